package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testFloor is the MinFreeDisk of the disk tests.
const testFloor = 100 << 20

// fakeDisk is a file system whose free space the test sets.
type fakeDisk struct{ free atomic.Uint64 }

func (d *fakeDisk) read(string) (uint64, error) { return d.free.Load(), nil }

func (d *fakeDisk) fill()  { d.free.Store(testFloor / 2) }
func (d *fakeDisk) empty() { d.free.Store(8 * testFloor) }

// withFakeDisk points cfg at a fake disk with space, read every 10 ms.
func withFakeDisk(cfg Config) (Config, *fakeDisk) {
	d := &fakeDisk{}
	d.empty()
	cfg.MinFreeDisk, cfg.DiskCheckInterval, cfg.DiskFree = testFloor, 10*time.Millisecond, d.read
	return cfg, d
}

// waitReason waits until n's readiness reason is want ("" for ready).
func waitReason(t *testing.T, n *Node, want string) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return n.Readiness().Reason == want }, 10*time.Second, 5*time.Millisecond) {
		t.Fatalf("%s: readiness %+v, want reason %q", n.ID(), n.Readiness(), want)
	}
}

// requireRefused requires err to be InsufficientStorage naming the node,
// its free bytes and the floor.
func requireRefused(t *testing.T, err error, who *Node, free uint64, what string) {
	t.Helper()
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeInsufficientStorage}, "%s: %v", what, err)
	assert.Contains(t, err.Error(), "node "+who.ID(), what)
	assert.Contains(t, err.Error(), "("+strconv.FormatUint(free, 10)+" bytes)", what)
	assert.Contains(t, err.Error(), "floor of 100.0 MiB", what)
}

// clientWrites are every kind of client write, each with a fresh request
// ID, for the node n.
func clientWrites(n *Node, held fsm.Allocation, backup []byte) []struct {
	name string
	call func(ctx context.Context, id string) error
} {
	spec := service.Spec{Namespace: "default", Name: "web", Type: "NodePort", Ports: []service.Port{{Port: 80}}}
	return []struct {
		name string
		call func(ctx context.Context, id string) error
	}{
		{"allocate", func(ctx context.Context, id string) error {
			_, err := n.Allocate(ctx, "nodeport", "", "refused", 1, id)
			return err
		}},
		{"release", func(ctx context.Context, id string) error {
			_, err := n.Release(ctx, held.Pool, held.Value, "", id)
			return err
		}},
		{"txn", func(ctx context.Context, id string) error {
			_, err := n.Txn(ctx, []fsm.Op{{Kind: fsm.OpAllocate, Pool: "nodeport", Value: "31000", Owner: "refused"}}, id)
			return err
		}},
		{"create pool", func(ctx context.Context, id string) error {
			_, _, err := n.CreatePool(ctx, "extra", "40000-40010", id)
			return err
		}},
		{"delete pool", func(ctx context.Context, id string) error { return n.DeletePool(ctx, "spare", id) }},
		{"put service", func(ctx context.Context, id string) error {
			_, err := n.PutService(ctx, spec, false, id)
			return err
		}},
		{"delete service", func(ctx context.Context, id string) error {
			_, err := n.DeleteService(ctx, "default", "kept", false, id)
			return err
		}},
		{"set service network", func(ctx context.Context, id string) error {
			return n.SetServiceNetwork(ctx, fsm.ServiceNetwork{Families: []service.Family{service.IPv4}, IPv4Pool: "clusterip-ipv4", NodePortPool: "spare"}, id)
		}},
		{"reconcile repair", func(ctx context.Context, id string) error {
			_, _, err := n.Reconcile(ctx, n.AppliedIndex(), nil, true, id)
			return err
		}},
		{"import", func(ctx context.Context, id string) error {
			_, err := n.Import(ctx, []service.Spec{{Namespace: "default", Name: "imported", ClusterIPs: []string{"10.96.0.50"}}}, nil, id)
			return err
		}},
		{"restore", func(ctx context.Context, _ string) error { return n.Restore(ctx, bytes.NewReader(backup), "") }},
	}
}

// TestDiskLowRefusesClientWrites: below the floor, every client write is
// refused with InsufficientStorage naming the node, its free bytes and the
// floor, and changes nothing; /readyz says disk_full; reads, Raft's own
// entries and member rows still go through. Once space returns the node
// takes writes again by itself, and a refused request ID applies once.
func TestDiskLowRefusesClientWrites(t *testing.T) {
	cfg, disk := withFakeDisk(testConfig(t, t.TempDir()))
	cfg.ServiceNetwork = &fsm.ServiceNetwork{Families: []service.Family{service.IPv4}, IPv4Pool: "clusterip-ipv4", NodePortPool: "nodeport"}
	n := openReady(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := n.Allocate(ctx, "nodeport", "", "kept", 1, "")
	require.NoError(t, err)
	_, _, err = n.CreatePool(ctx, "spare", "41000-41010", "")
	require.NoError(t, err)
	_, err = n.PutService(ctx, service.Spec{Namespace: "default", Name: "kept"}, false, "")
	require.NoError(t, err)
	var backup bytes.Buffer
	require.NoError(t, n.Backup(ctx, &backup))
	waitReason(t, n, "")
	before := n.AppliedIndex()
	stats := n.DiskStats()
	assert.False(t, stats.Low)
	assert.Equal(t, uint64(8*testFloor), stats.Free)
	assert.Greater(t, stats.RaftLogBytes, uint64(0), "raft.db has a size")

	disk.fill()
	waitReason(t, n, ReasonDiskFull)
	assert.Contains(t, n.Readiness().Detail, "below its floor")
	assert.True(t, n.DiskStats().Low)
	for i, w := range clientWrites(n, held[0], backup.Bytes()) {
		err := w.call(ctx, fmt.Sprintf("refused-%d", i))
		requireRefused(t, err, n, testFloor/2, w.name)
	}
	got, err := n.Get(ctx, Linearizable, held[0].Pool, held[0].Value)
	require.NoError(t, err, "reads are served")
	assert.Equal(t, held[0], got, "the refused release changed nothing")
	pools, err := n.Pools(ctx, Linearizable)
	require.NoError(t, err)
	assert.Len(t, pools, 3, "no pool was created or deleted")
	_, err = n.Service(ctx, Linearizable, "default", "web")
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeServiceNotFound}, "the refused Service write changed nothing")

	// Raft's own entries and member rows go through.
	require.NoError(t, n.raft.Barrier(5*time.Second).Error(), "a barrier")
	row := fsm.Member{ID: n.ID(), RaftAddr: n.RaftAddr(), APIAddr: "http://127.0.0.1:1"}
	res, err := n.submit(ctx, &fsm.Request{Kind: fsm.KindSetMember, Member: row})
	require.NoError(t, err)
	require.Nil(t, res.Err, "a member row")
	m, ok := n.fsm.Member(n.ID())
	require.True(t, ok)
	assert.Equal(t, row, m)
	assert.Greater(t, n.AppliedIndex(), before, "internal entries were applied")

	disk.empty()
	waitReason(t, n, "")
	a, err := n.Allocate(ctx, "nodeport", "", "after", 1, "refused-0")
	require.NoError(t, err, "a refused request ID applies once space returns")
	again, err := n.Allocate(ctx, "nodeport", "", "after", 1, "refused-0")
	require.NoError(t, err)
	assert.Equal(t, a, again, "and only once")
}

// TestDiskLowForwarded: a follower that is low refuses writes it would
// forward; a leader that is low refuses a forwarded client write but
// applies a forwarded member row.
func TestDiskLowForwarded(t *testing.T) {
	c := newDiskCluster(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := c.leader(t)
	f := c.followers(l)[0]
	_, err := f.Allocate(ctx, "nodeport", "", "through-f", 1, "")
	require.NoError(t, err)

	c.disk[f].fill()
	waitReason(t, f, ReasonDiskFull)
	_, err = f.Allocate(ctx, "nodeport", "", "refused", 1, "")
	requireRefused(t, err, f, testFloor/2, "a low follower")
	c.disk[f].empty()
	waitReason(t, f, "")

	// The leader's side of a forwarded call. Every disk is low, so the
	// leader has no one to hand off to and keeps leading.
	for _, n := range append(c.followers(l), l) { // the followers first
		c.disk[n].fill()
		require.Eventually(t, func() bool { return n.DiskStats().Low }, 5*time.Second, 5*time.Millisecond)
	}
	svc := &rpcService{n: l}
	forward := func(req *fsm.Request) *fsm.Result {
		t.Helper()
		var reply submitReply
		require.NoError(t, svc.Submit(&submitArgs{Entry: fsm.EncodeBatch([]*fsm.Request{req})}, &reply))
		require.Nil(t, reply.Err, "%+v", reply.Err)
		res, err := fsm.DecodeResult(reply.Result)
		require.NoError(t, err)
		return res
	}
	res := forward(&fsm.Request{Kind: fsm.KindTxn, ID: "fwd", Ops: []fsm.Op{{Kind: fsm.OpAllocate, Pool: "nodeport", Owner: "refused", Count: 1}}})
	require.NotNil(t, res.Err)
	requireRefused(t, res.Err, l, testFloor/2, "a low leader, forwarded")
	row := fsm.Member{ID: f.ID(), RaftAddr: f.RaftAddr(), APIAddr: "http://127.0.0.1:2"}
	res = forward(&fsm.Request{Kind: fsm.KindSetMember, ID: "row", Member: row})
	assert.Nil(t, res.Err, "a forwarded member row is applied")
	m, _ := l.fsm.Member(f.ID())
	assert.Equal(t, row, m)
	assert.True(t, l.IsLeader(), "with no voter with space, the leader keeps leading")
}

// TestDiskLowAfterUnknownOutcome: a follower forwards a write, the leader
// applies it, and the answer is lost; by the retry the follower's disk is
// low. The call must end with an unknown outcome, not a refusal that says
// nothing was applied, and a retry with the same request ID once space
// returns answers the first result.
func TestDiskLowAfterUnknownOutcome(t *testing.T) {
	var (
		armed atomic.Int32 // 1 + the index of the node whose next answer is lost
		nodes [3]atomic.Pointer[Node]
		disks [3]atomic.Pointer[fakeDisk]
	)
	c := newDiskCluster(t, func(i int, cfg *Config) {
		dial := cfg.DialRPC
		if dial == nil {
			dial = func(addr string, timeout time.Duration) (net.Conn, error) {
				return net.DialTimeout("tcp", addr, timeout)
			}
		}
		cfg.DialRPC = func(addr string, timeout time.Duration) (net.Conn, error) {
			conn, err := dial(addr, timeout)
			if err != nil {
				return nil, err
			}
			return &answerLost{Conn: conn, lose: func() bool {
				if !armed.CompareAndSwap(int32(i+1), 0) {
					return false
				}
				disks[i].Load().fill()
				nodes[i].Load().disk.check()
				return true
			}}, nil
		}
	})
	for i, n := range c.nodes {
		nodes[i].Store(n)
		disks[i].Store(c.disk[n])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := c.leader(t)
	f := c.followers(l)[0]
	fi := 0
	for i, n := range c.nodes {
		if n == f {
			fi = i
		}
	}
	_, err := f.Allocate(ctx, "nodeport", "", "warm-up", 1, "") // the connection's handshake is behind us
	require.NoError(t, err)
	armed.Store(int32(fi + 1))
	_, err = f.Allocate(ctx, "nodeport", "", "lost", 1, "lost-answer")
	require.ErrorIs(t, err, ErrUnknownOutcome, "%v", err)
	require.Zero(t, armed.Load(), "the answer was lost")
	held, _, err := l.List(ctx, Linearizable, "nodeport", "lost", "", 10)
	require.NoError(t, err)
	require.Len(t, held, 1, "the leader applied the first attempt")

	c.disk[f].empty()
	waitReason(t, f, "")
	again, err := f.Allocate(ctx, "nodeport", "", "lost", 1, "lost-answer")
	require.NoError(t, err)
	assert.Equal(t, held, again, "the retry answers the first result")
}

// answerLost closes a connection that carried a forwarded write as an
// answer arrives, when lose says so. Probes, which share the dialer, are
// left alone.
type answerLost struct {
	net.Conn
	lose   func() bool
	submit atomic.Bool
}

func (c *answerLost) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("Node.Submit")) {
		c.submit.Store(true)
	}
	return c.Conn.Write(p)
}

func (c *answerLost) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.submit.Load() && c.lose() {
		c.Conn.Close()
		return 0, errors.New("the test broke the connection as the answer arrived")
	}
	return n, err
}

// TestDiskLowLeaderHandsOff: a low leader hands leadership to the voter
// with space (not to the other low one), which takes writes; writes
// through the low nodes are refused and nothing acknowledged is lost.
// With no voter with space, the leader finds none to hand to. Space
// back, the old leader takes writes again.
func TestDiskLowLeaderHandsOff(t *testing.T) {
	c := newDiskCluster(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := c.leader(t)
	fs := c.followers(l)
	low, roomy := fs[0], fs[1]
	acked, err := l.Allocate(ctx, "nodeport", "", "before", 5, "")
	require.NoError(t, err)

	for _, n := range fs {
		c.disk[n].fill()
		require.Eventually(t, func() bool { return n.DiskStats().Low }, 5*time.Second, 5*time.Millisecond)
	}
	_, ok := guardDisk(l).voterWithSpace()
	assert.False(t, ok, "no other voter has space")
	c.disk[roomy].empty()
	require.Eventually(t, func() bool {
		s, ok := guardDisk(l).voterWithSpace()
		return ok && s.ID == raft.ServerID(roomy.ID())
	}, 5*time.Second, 10*time.Millisecond, "the voter with space is picked")

	c.disk[l].fill()
	require.Eventually(t, roomy.IsLeader, 20*time.Second, 10*time.Millisecond, "leadership moves to %s, the node with space", roomy.ID())
	more, err := roomy.Allocate(ctx, "nodeport", "", "after", 1, "")
	require.NoError(t, err, "the new leader takes writes")
	for _, n := range []*Node{l, low} {
		_, err := n.Allocate(ctx, "nodeport", "", "refused", 1, "")
		requireRefused(t, err, n, testFloor/2, "through a low node")
	}
	for _, a := range append(acked, more...) {
		got, err := roomy.Get(ctx, Linearizable, a.Pool, a.Value)
		require.NoError(t, err)
		assert.Equal(t, a, got, "acknowledged writes survive the hand-off")
	}

	c.disk[l].empty()
	waitReason(t, l, "")
	_, err = l.Allocate(ctx, "nodeport", "", "back", 1, "")
	require.NoError(t, err, "the old leader takes writes again, without a restart")
}

// diskCluster is three nodes, each on a fake disk.
type diskCluster struct {
	nodes []*Node
	disk  map[*Node]*fakeDisk
}

func newDiskCluster(t *testing.T, tune func(i int, cfg *Config)) *diskCluster {
	c := &diskCluster{disk: map[*Node]*fakeDisk{}}
	var cfgs []Config
	var peers []Peer
	for i := 0; i < 3; i++ {
		cfg := testConfig(t, t.TempDir())
		cfg.ID = fmt.Sprintf("n%d", i+1)
		cfgs = append(cfgs, cfg)
		peers = append(peers, Peer{ID: cfg.ID, RaftAddr: cfg.RaftAddr})
	}
	disks := make([]*fakeDisk, 3)
	for i := range cfgs {
		cfgs[i].Peers = peers
		cfgs[i], disks[i] = withFakeDisk(cfgs[i])
		if tune != nil {
			tune(i, &cfgs[i])
		}
	}
	// Founding waits for every peer: open them together.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type opened struct {
		n   *Node
		err error
	}
	ch := make([]chan opened, 3)
	for i := range cfgs {
		ch[i] = make(chan opened, 1)
		go func() {
			n, err := Open(ctx, cfgs[i])
			ch[i] <- opened{n, err}
		}()
	}
	for i := range cfgs {
		o := <-ch[i]
		require.NoError(t, o.err)
		t.Cleanup(func() { _ = o.n.Close() })
		c.nodes = append(c.nodes, o.n)
		c.disk[o.n] = disks[i]
	}
	l := c.leader(t)
	require.Eventually(t, func() bool {
		ps, err := l.Pools(ctx, Linearizable)
		return err == nil && len(ps) == 2
	}, 10*time.Second, 10*time.Millisecond, "bootstrap pools")
	return c
}

// leader waits for a node that leads and is ready.
func (c *diskCluster) leader(t *testing.T) *Node {
	t.Helper()
	var l *Node
	require.Eventually(t, func() bool {
		for _, n := range c.nodes {
			if n.IsLeader() && n.leader.ready.Load() {
				l = n
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "a leader")
	return l
}

func (c *diskCluster) followers(l *Node) []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n != l {
			out = append(out, n)
		}
	}
	return out
}

// TestCheckDisk: what a node makes of a sequence of free-space readings.
// A failed reading keeps the last one; with no floor nothing is low.
func TestCheckDisk(t *testing.T) {
	type reading struct {
		free    uint64
		err     bool
		low     bool
		showing uint64 // DiskStats().Free after the reading
	}
	cases := []struct {
		name     string
		floor    uint64
		readings []reading
	}{
		{"above, below, above", 100, []reading{{200, false, false, 200}, {99, false, true, 99}, {100, false, false, 100}}},
		{"no floor", 0, []reading{{0, false, false, 0}, {1, false, false, 1}}},
		{"a failed first reading is not low", 100, []reading{{0, true, false, 0}}},
		{"a failed reading keeps the last", 100, []reading{{50, false, true, 50}, {0, true, true, 50}, {500, false, false, 500}, {0, true, false, 500}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var next reading
			cfg := DefaultConfig()
			cfg.DataDir, cfg.MinFreeDisk = t.TempDir(), c.floor
			cfg.DiskFree = func(string) (uint64, error) {
				if next.err {
					return 0, errors.New("statfs: input/output error")
				}
				return next.free, nil
			}
			n := &Node{cfg: cfg, id: "n1", logger: hclog.NewNullLogger()}
			n.disk.init(n.id, cfg, LogStoreBolt, n.logger)
			for i, r := range c.readings {
				next = r
				n.disk.check()
				s := n.DiskStats()
				assert.Equal(t, r.low, s.Low, "reading %d (%+v): Low", i, r)
				assert.Equal(t, r.showing, s.Free, "reading %d (%+v): Free", i, r)
				assert.Equal(t, r.low, n.disk.lowError() != nil, "reading %d: refusal", i)
				assert.Equal(t, r.low, n.disk.refuse(&fsm.Request{Kind: fsm.KindTxn}) != nil, "reading %d: a txn", i)
				assert.Nil(t, n.disk.refuse(&fsm.Request{Kind: fsm.KindSetMember}), "a member row is never refused")
			}
		})
	}
}

func TestDiskConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir, cfg.RaftAddr = "d", "127.0.0.1:1"
	assert.Equal(t, uint64(256<<20), cfg.MinFreeDisk, "the default floor")
	cfg.MinFreeDisk = 0
	require.NoError(t, cfg.Validate(), "0 disables the floor")
	cfg.DiskCheckInterval = 0
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "DiskCheckInterval is 0s")
}

// TestClientWrite: which request kinds a low disk refuses.
func TestClientWrite(t *testing.T) {
	for k, want := range map[fsm.Kind]bool{
		fsm.KindTxn: true, fsm.KindCreatePool: true, fsm.KindCreatePoolExclusive: true, fsm.KindDeletePool: true,
		fsm.KindSetServiceNetwork: true, fsm.KindPutService: true, fsm.KindPutServiceV2: true, fsm.KindDeleteService: true,
		fsm.KindReconcile: true, fsm.KindImport: true,
		fsm.KindSetMember: false, fsm.KindRemoveMember: false, fsm.KindSetClusterID: false,
	} {
		assert.Equal(t, want, clientWrite(k), "clientWrite(%v)", k)
	}
}
