package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/testaddr"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/transport"
	"github.com/stretchr/testify/require"
)

// Options tune a cluster.
type Options struct {
	// Pools are created at bootstrap.
	Pools []node.PoolSpec
	// Tune, when set, adjusts each node's configuration.
	Tune func(*node.Config)
	// Seed drives the fault table's random drops.
	Seed int64
	// Delays, when set, holds member i's first start back by Delays[i].
	Delays []time.Duration
	// LogStore is each node's Raft log store (node.LogStoreBolt or
	// node.LogStoreWAL); empty means the environment's
	// RANGEALLOC_TEST_LOG_STORE, or else the default (bolt).
	LogStore string
}

// LogStoreEnv names the environment variable that picks the log store of
// the tests that do not pick one: "bolt" or "wal".
const LogStoreEnv = "RANGEALLOC_TEST_LOG_STORE"

// Member is one node of the cluster; Node is nil while it is down.
type Member struct {
	Index   int
	ID      string
	Addr    string
	DataDir string
	Node    *node.Node
	cfg     node.Config
}

// Cluster is a set of nodes sharing one fault table.
type Cluster struct {
	t       testing.TB
	Members []*Member
	Faults  *transport.Faults
}

// New starts n nodes bootstrapped as one cluster and registers a cleanup
// that stops them and then runs EnsureSame.
func New(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	c := &Cluster{t: t, Faults: transport.NewFaults(opts.Seed)}
	logs := newTestWriter(t)
	// A message held by a cut fails after a second, as a connection timeout
	// would, so that stopping a node behind a cut does not wait for long.
	c.Faults.SetTimeout(time.Second)
	dir := t.TempDir()
	var peers []node.Peer
	for i := 0; i < n; i++ {
		addr := freeAddr(t)
		m := &Member{Index: i, ID: fmt.Sprintf("n%d", i), Addr: addr, DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i))}
		c.Members = append(c.Members, m)
		peers = append(peers, node.Peer{ID: m.ID, RaftAddr: addr, APIAddr: "api-" + m.ID})
	}
	for _, m := range c.Members {
		cfg := node.DefaultConfig()
		cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.APIAddr = m.ID, m.DataDir, m.Addr, "api-"+m.ID
		cfg.Peers, cfg.Pools = peers, opts.Pools
		cfg.LogStore = opts.LogStore
		if cfg.LogStore == "" {
			cfg.LogStore = os.Getenv(LogStoreEnv)
		}
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = 400*time.Millisecond, 400*time.Millisecond
		cfg.LeaderLeaseTimeout = 200 * time.Millisecond
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: m.ID, Level: hclog.Warn, Output: logs})
		local := raft.ServerAddress(m.Addr)
		cfg.WrapTransport = func(tr raft.Transport) raft.Transport { return transport.Wrap(tr, local, c.Faults) }
		cfg.DialRPC = c.faultyDial(local)
		if opts.Tune != nil {
			opts.Tune(&cfg)
		}
		m.cfg = cfg
	}
	// Founders wait for each other (node.Open), so they start together.
	errs := make(chan error, n)
	for i, m := range c.Members {
		go func() {
			if i < len(opts.Delays) {
				time.Sleep(opts.Delays[i])
			}
			errs <- c.open(m)
		}()
	}
	for range c.Members {
		require.NoError(t, <-errs)
	}
	t.Cleanup(func() {
		c.Heal()
		if !t.Failed() {
			c.EnsureSame(t)
		}
		for _, m := range c.Members {
			if m.Node != nil {
				_ = m.Node.Halt()
			}
		}
	})
	return c
}

// testWriter sends logs to the test's log until the test ends: Raft's
// connection handlers may still log after Halt, and testing panics on a
// Log after the test completed.
type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func newTestWriter(t testing.TB) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() { // registered first, so it runs last
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p))
	}
	return len(p), nil
}

func freeAddr(t testing.TB) string { return testaddr.Loopback(t) }

// faultyDial dials the forwarding RPC through the fault table, which it
// treats as a firewall that drops packets: a dial across a cut fails, and
// on a connection whose path is cut, bytes written vanish and bytes sent
// back never arrive, so a call in flight hangs as it would behind
// iptables DROP (or at a paused leader) instead of failing at once.
func (c *Cluster) faultyDial(local raft.ServerAddress) func(string, time.Duration) (net.Conn, error) {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		remote := raft.ServerAddress(addr)
		if !c.Faults.Allowed(local, remote) || !c.Faults.Allowed(remote, local) {
			return nil, fmt.Errorf("dial %s: cut by the test", addr)
		}
		conn, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, err
		}
		return &faultConn{Conn: conn, local: local, remote: remote, f: c.Faults}, nil
	}
}

type faultConn struct {
	net.Conn
	local, remote raft.ServerAddress
	f             *transport.Faults
	broken        atomic.Bool // bytes were lost: the stream can never be read right again
}

func (fc *faultConn) Write(p []byte) (int, error) {
	if !fc.f.Allowed(fc.local, fc.remote) {
		fc.broken.Store(true)
		return len(p), nil // dropped on the way
	}
	if fc.broken.Load() {
		fc.Conn.Close() // the peer saw a gap in the stream and gave up
		return 0, fmt.Errorf("write to %s: connection lost bytes to a cut", fc.remote)
	}
	return fc.Conn.Write(p)
}

func (fc *faultConn) Read(p []byte) (int, error) {
	for {
		n, err := fc.Conn.Read(p)
		if n > 0 && !fc.f.Allowed(fc.remote, fc.local) {
			fc.broken.Store(true)
			continue // dropped on the way
		}
		if n > 0 && fc.broken.Load() {
			fc.Conn.Close()
			return 0, fmt.Errorf("read from %s: connection lost bytes to a cut", fc.remote)
		}
		return n, err
	}
}

// Add starts a new member without state that joins through the live
// members (node.Config.Join), with tune applied to its configuration, and
// returns it once it has joined (as a non-voter: the leader promotes it).
// Its data directory and logs are the cluster's, and the fault table
// covers it.
func (c *Cluster) Add(tune func(*node.Config)) *Member {
	c.t.Helper()
	m, err := c.TryAdd(tune)
	require.NoError(c.t, err)
	return m
}

// TryAdd is Add for a node that must refuse to start: it returns Open's
// error. A node that starts is kept as a member of the test cluster.
func (c *Cluster) TryAdd(tune func(*node.Config)) (*Member, error) {
	c.t.Helper()
	base := c.Members[0].cfg
	m := &Member{Index: len(c.Members), ID: fmt.Sprintf("n%d", len(c.Members)), Addr: freeAddr(c.t)}
	m.DataDir = filepath.Join(filepath.Dir(c.Members[0].DataDir), m.ID)
	cfg := base
	cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.APIAddr = m.ID, m.DataDir, m.Addr, "api-"+m.ID
	cfg.Peers, cfg.Join, cfg.Pools = nil, nil, nil
	for _, o := range c.Live() {
		cfg.Join = append(cfg.Join, o.Addr)
	}
	cfg.Logger = base.Logger.ResetNamed(m.ID)
	local := raft.ServerAddress(m.Addr)
	cfg.WrapTransport = func(tr raft.Transport) raft.Transport { return transport.Wrap(tr, local, c.Faults) }
	cfg.DialRPC = c.faultyDial(local)
	if tune != nil {
		tune(&cfg)
	}
	m.cfg = cfg
	if err := c.open(m); err != nil {
		return nil, err
	}
	c.Members = append(c.Members, m)
	return m, nil
}

// Start opens member i's node on its data directory.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	m := c.Members[i]
	require.Nil(c.t, m.Node, "node %s is running", m.ID)
	require.NoError(c.t, c.open(m))
}

func (c *Cluster) open(m *Member) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the port may linger briefly after a kill
		var n *node.Node
		if n, err = node.Open(ctx, m.cfg); err == nil {
			m.Node = n
			return nil
		}
		if errors.Is(err, node.ErrStorage) || errors.Is(err, node.ErrLostBesideBackups) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("open %s: %w", m.ID, err)
}

// TryStart opens member i's node and returns Open's error: for a node
// that must refuse to start. A node that starts is kept running.
func (c *Cluster) TryStart(i int) error {
	c.t.Helper()
	m := c.Members[i]
	require.Nil(c.t, m.Node, "node %s is running", m.ID)
	return c.open(m)
}

// TryStartAll opens the nodes of members idx together, as founders must
// start (each waits for the others), and returns each Open's error in
// the order of idx. A node that starts is kept running.
func (c *Cluster) TryStartAll(idx ...int) []error {
	c.t.Helper()
	for _, i := range idx {
		require.Nil(c.t, c.Members[i].Node, "node %s is running", c.Members[i].ID)
	}
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for k, i := range idx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = c.open(c.Members[i])
		}()
	}
	wg.Wait()
	return errs
}

// Config returns member i's configuration, for a test to change before
// the next start (see SetConfig).
func (c *Cluster) Config(i int) node.Config { return c.Members[i].cfg }

// SetConfig replaces member i's configuration for its next start.
func (c *Cluster) SetConfig(i int, cfg node.Config) { c.Members[i].cfg = cfg }

// Wipe removes member i's data directory, as a replaced disk or a
// re-imaged machine would. The member must be down.
func (c *Cluster) Wipe(i int) {
	c.t.Helper()
	m := c.Members[i]
	require.Nil(c.t, m.Node, "node %s is running", m.ID)
	require.NoError(c.t, os.RemoveAll(m.DataDir))
}

// Kill stops member i as a crash would: no leadership handover.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	m := c.Members[i]
	require.NotNil(c.t, m.Node, "node %s is down", m.ID)
	_ = m.Node.Halt()
	m.Node = nil
}

// Restart kills member i and starts it again on the same data directory.
func (c *Cluster) Restart(i int) {
	c.Kill(i)
	c.Start(i)
}

// Live returns the running members.
func (c *Cluster) Live() []*Member {
	var out []*Member
	for _, m := range c.Members {
		if m.Node != nil {
			out = append(out, m)
		}
	}
	return out
}

// Leader waits until exactly one running member is the leader and every
// running member in its partition agrees, and returns it.
func (c *Cluster) Leader() *Member {
	c.t.Helper()
	var leader *Member
	require.Eventually(c.t, func() bool {
		leader = nil
		for _, m := range c.Live() {
			if m.Node.IsLeader() {
				if leader != nil {
					return false
				}
				leader = m
			}
		}
		return leader != nil
	}, 15*time.Second, 20*time.Millisecond, "no single leader")
	return leader
}

// LeaderAmong waits for a leader among the given members and returns it.
func (c *Cluster) LeaderAmong(idx ...int) *Member {
	c.t.Helper()
	var leader *Member
	require.Eventually(c.t, func() bool {
		for _, i := range idx {
			if m := c.Members[i]; m.Node != nil && m.Node.IsLeader() {
				leader = m
				return true
			}
		}
		return false
	}, 15*time.Second, 20*time.Millisecond, "no leader among %v", idx)
	return leader
}

// Partition cuts every link between members of different groups, both ways.
func (c *Cluster) Partition(groups ...[]int) {
	var g [][]raft.ServerAddress
	for _, grp := range groups {
		var addrs []raft.ServerAddress
		for _, i := range grp {
			addrs = append(addrs, raft.ServerAddress(c.Members[i].Addr))
		}
		g = append(g, addrs)
	}
	c.Faults.Partition(g...)
}

// Isolate cuts member i off from every other member.
func (c *Cluster) Isolate(i int) {
	var rest []int
	for _, m := range c.Members {
		if m.Index != i {
			rest = append(rest, m.Index)
		}
	}
	c.Partition([]int{i}, rest)
}

// Heal removes every fault.
func (c *Cluster) Heal() { c.Faults.Heal() }

// WaitApplied waits until every running member has applied index.
func (c *Cluster) WaitApplied(index uint64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, m := range c.Live() {
		require.NoError(c.t, m.Node.LocalState().WaitApplied(ctx, index), "node %s", m.ID)
	}
}

// EnsureSame waits for the running members to apply the same log and
// compares their pools, bitmaps, allocations and member tables.
func (c *Cluster) EnsureSame(t testing.TB) {
	t.Helper()
	live := c.Live()
	if len(live) < 2 {
		return
	}
	var want any
	require.Eventually(t, func() bool {
		var idx uint64
		for _, m := range live {
			idx = max(idx, m.Node.LocalState().AppliedIndex())
		}
		for _, m := range live {
			if m.Node.LocalState().AppliedIndex() != idx {
				return false
			}
		}
		want = Dump(live[0].Node.LocalState())
		for _, m := range live[1:] {
			if !reflect.DeepEqual(want, Dump(m.Node.LocalState())) {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "replicas differ")
}

// Dump returns a comparable picture of a replica's state: per pool the
// RangeAllocation record and every allocation, plus the member table, the
// service network and the Service records.
func Dump(f *fsm.FSM) map[string]any {
	svcs, _ := f.Services("")
	out := map[string]any{"members": f.Members(), "network": f.ServiceNetwork(), "services": svcs}
	for _, p := range f.Pools() {
		rng, data, err := f.RangeAllocation(p.Name)
		if err != nil {
			continue
		}
		allocs, _, _ := f.List(p.Name, "", "", 1<<21)
		out["pool/"+p.Name] = []any{rng, data, allocs}
	}
	return out
}
