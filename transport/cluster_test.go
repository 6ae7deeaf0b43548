package transport

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testFSM records the commands it applies, in order.
type testFSM struct {
	mu sync.Mutex
	// mu guards the following
	applied []string
}

var _ raft.FSM = (*testFSM)(nil)

func (f *testFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, string(l.Data))
	return len(f.applied)
}

func (f *testFSM) Applied() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.applied)
}

func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) { return testSnapshot(f.Applied()), nil }

func (f *testFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var applied []string
	if err := json.NewDecoder(rc).Decode(&applied); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = applied
	return nil
}

type testSnapshot []string

func (s testSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s testSnapshot) Release() {}

// countingTransport is raft's NetworkTransport counting the AppendEntries
// it sends over pipelines, to show pipelined replication is in use.
type countingTransport struct {
	*raft.NetworkTransport
	pipelined atomic.Int64
}

func (c *countingTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := c.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return &countingPipeline{AppendPipeline: p, n: &c.pipelined}, nil
}

type countingPipeline struct {
	raft.AppendPipeline
	n *atomic.Int64
}

func (p *countingPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	p.n.Add(1)
	return p.AppendPipeline.AppendEntries(args, resp)
}

// logWriter sends logs to the test's log until the test is over.
type logWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p))
	}
	return len(p), nil
}

// testNode is one member of a testCluster.
type testNode struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	mux   *Mux
	trans *countingTransport
	raft  *raft.Raft
	fsm   *testFSM
}

// testCluster is a Raft cluster over real TCP on 127.0.0.1, every node's
// transport wrapped by one fault table, like raft's MakeCluster.
type testCluster struct {
	t      *testing.T
	faults *Faults
	nodes  []*testNode
}

// faultTimeout is how long a cut holds a call in these tests: longer than
// Raft's timeouts, so that raft sees silence, short enough that a test
// failing with a cut in place stops quickly.
const faultTimeout = time.Second

func newTestCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	logs := &logWriter{t: t}
	t.Cleanup(func() { logs.mu.Lock(); logs.done = true; logs.mu.Unlock() })
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: logs})
	c := &testCluster{t: t, faults: NewFaults(1)}
	c.faults.SetTimeout(faultTimeout)
	var servers []raft.Server
	for i := range n {
		m, err := Listen("127.0.0.1:0", nil, Options{Logger: logger})
		require.NoError(t, err)
		nd := &testNode{id: raft.ServerID(fmt.Sprintf("n%d", i)), addr: raft.ServerAddress(m.Addr().String()), mux: m, fsm: &testFSM{}}
		c.nodes = append(c.nodes, nd)
		servers = append(servers, raft.Server{ID: nd.id, Address: nd.addr})
	}
	t.Cleanup(c.shutdown)
	for _, nd := range c.nodes {
		conf := raft.DefaultConfig()
		conf.LocalID = nd.id
		conf.HeartbeatTimeout, conf.ElectionTimeout = 200*time.Millisecond, 200*time.Millisecond
		conf.LeaderLeaseTimeout, conf.CommitTimeout = 100*time.Millisecond, 5*time.Millisecond
		conf.Logger = logger.Named(string(nd.id))
		nd.trans = &countingTransport{NetworkTransport: NewTCPTransport(nd.mux.Raft(), logger.Named(string(nd.id)))}
		trans := Wrap(nd.trans, nd.addr, c.faults)
		_, ok := trans.(raft.WithPreVote)
		require.True(t, ok, "pre-vote stays on behind the wrapper")
		store, snaps := raft.NewInmemStore(), raft.NewInmemSnapshotStore()
		require.NoError(t, raft.BootstrapCluster(conf, store, store, snaps, trans, raft.Configuration{Servers: servers}))
		r, err := raft.NewRaft(conf, nd.fsm, store, store, snaps, trans)
		require.NoError(t, err)
		nd.raft = r
	}
	return c
}

// shutdown heals the table, then stops every node.
func (c *testCluster) shutdown() {
	c.faults.Heal()
	for _, nd := range c.nodes {
		if nd.raft != nil {
			assert.NoError(c.t, nd.raft.Shutdown().Error())
		}
		assert.NoError(c.t, nd.mux.Close())
	}
}

func (c *testCluster) addrs() []raft.ServerAddress {
	var out []raft.ServerAddress
	for _, nd := range c.nodes {
		out = append(out, nd.addr)
	}
	return out
}

// others returns the nodes other than nd.
func (c *testCluster) others(nd *testNode) []*testNode {
	var out []*testNode
	for _, o := range c.nodes {
		if o != nd {
			out = append(out, o)
		}
	}
	return out
}

// leader waits until exactly one of among (all nodes if none) leads, and
// returns it.
func (c *testCluster) leader(among ...*testNode) *testNode {
	c.t.Helper()
	if len(among) == 0 {
		among = c.nodes
	}
	var leader *testNode
	require.Eventually(c.t, func() bool {
		leader = nil
		for _, nd := range among {
			if nd.raft.State() == raft.Leader {
				if leader != nil {
					return false
				}
				leader = nd
			}
		}
		return leader != nil
	}, 5*time.Second, 10*time.Millisecond, "no single leader among %d nodes", len(among))
	return leader
}

// apply applies each command on nd, failing the test on an error.
func (c *testCluster) apply(nd *testNode, cmds ...string) {
	c.t.Helper()
	for _, cmd := range cmds {
		require.NoError(c.t, nd.raft.Apply([]byte(cmd), time.Second).Error(), "Apply(%q) on %s", cmd, nd.id)
	}
}

// ensureSame waits until every node has the same last log index, the same
// applied index and the same FSM state.
func (c *testCluster) ensureSame() {
	c.t.Helper()
	first := c.nodes[0]
	require.Eventually(c.t, func() bool {
		for _, nd := range c.nodes[1:] {
			if nd.raft.LastIndex() != first.raft.LastIndex() || nd.raft.AppliedIndex() != first.raft.AppliedIndex() ||
				!slices.Equal(nd.fsm.Applied(), first.fsm.Applied()) {
				return false
			}
		}
		return first.raft.AppliedIndex() == first.raft.LastIndex()
	}, 10*time.Second, 10*time.Millisecond, "replicas differ")
}

// cmds returns n commands named prefix-0 ... prefix-(n-1).
func cmds(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}
