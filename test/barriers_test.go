package test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The read barrier of linearize (node/read.go), pinned by tests that fail
// deterministically when it is removed (scripts/mutate.sh):
//
//	a deposed leader that still believes it leads serves no read:
//	         TestDeposedLeaderServesNoStaleRead (node_test.go)
//	a read returns only once the state machine applied every entry
//	         committed before it: TestLinearizableReadWaitsForApply
//	a new leader answers no read from a state that lacks what its
//	         predecessor acknowledged: TestNewLeaderReadsAfterItsTermEntry

// applyGate holds one node's state machine back: armed for a node and an
// owner, the OnApply hook of that node blocks after the first batch that
// allocates to that owner, until release. Raft applies entries on one
// goroutine, so every entry after that batch waits, committed but not
// applied.
type applyGate struct {
	mu sync.Mutex
	// mu guards the following
	node, owner string
	held        chan struct{} // closed once the hook blocks
	release     chan struct{} // closed to let it go on
}

// arm makes the next batch of node id that allocates to owner block.
func (g *applyGate) arm(id, owner string) (held, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.node, g.owner = id, owner
	g.held, g.release = make(chan struct{}), make(chan struct{})
	return g.held, g.release
}

// hook returns node id's OnApply hook.
func (g *applyGate) hook(id string) func(int, []*fsm.Result) {
	return func(_ int, results []*fsm.Result) {
		g.mu.Lock()
		match := g.node == id && allocatesTo(results, g.owner)
		held, release := g.held, g.release
		if match {
			g.node = "" // once
		}
		g.mu.Unlock()
		if match {
			close(held)
			<-release
		}
	}
}

func allocatesTo(results []*fsm.Result, owner string) bool {
	for _, r := range results {
		for _, op := range r.Allocations() {
			for _, a := range op {
				if a.Owner == owner {
					return true
				}
			}
		}
	}
	return false
}

// TestLinearizableReadWaitsForApply pins the last step of linearize: a
// linearizable read returns only once the leader's state machine has
// applied the commit index captured before the quorum check. The leader's
// state machine is held back behind one entry while the next one, W,
// commits (the followers apply it); a read of W's value on the leader must
// wait, and then see W.
//
// No black-box test catches a read that skips the wait today (see
// docs/TESTING.md, "Mutation testing"): a leader answers a write only
// after applying it, and serves no read before applying an entry of its
// term, so an entry committed and not yet applied was answered to nobody.
// This test keeps the guarantee from resting on those two facts alone.
func TestLinearizableReadWaitsForApply(t *testing.T) {
	t.Parallel()
	var gate applyGate
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		cfg.OnApply = gate.hook(cfg.ID)
		// The leader must hand W to Raft while the entry before it is
		// still unapplied: with one entry in flight it would wait.
		cfg.MaxInflight = 4
	}})
	l := waitPools(t, c)
	ctx := ctxT(t, 30*time.Second)
	waitLinearizable(t, ctx, l)

	held, release := gate.arm(l.ID, "blocker")
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	writes := make(chan error, 2)
	go func() { _, err := l.Node.Allocate(ctx, "ip", "10.96.0.10", "blocker", 0, ""); writes <- err }()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader did not apply the blocker entry")
	}
	go func() { _, err := l.Node.Allocate(ctx, "ip", "10.96.0.20", "w", 0, ""); writes <- err }()
	for _, f := range c.Live() {
		if f == l {
			continue
		}
		require.Eventually(t, func() bool {
			_, err := f.Node.LocalState().Get("ip", "10.96.0.20")
			return err == nil
		}, 10*time.Second, 10*time.Millisecond, "W commits: follower %s applies it", f.ID)
	}
	_, err := l.Node.LocalState().Get("ip", "10.96.0.20")
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeNotAllocated}, "the leader's state machine is held back before W")
	require.True(t, l.Node.IsLeader())

	type answer struct {
		a   fsm.Allocation
		err error
	}
	read := make(chan answer, 1)
	go func() {
		a, err := l.Node.Get(ctx, node.Linearizable, "ip", "10.96.0.20")
		read <- answer{a, err}
	}()
	select {
	case got := <-read:
		t.Fatalf("a linearizable read returned before the leader applied the commit index it captured: %+v, %v", got.a, got.err)
	case <-time.After(500 * time.Millisecond):
	}
	unblock()
	select {
	case got := <-read:
		require.NoError(t, got.err)
		assert.Equal(t, "w", got.a.Owner, "the read waited, and sees the committed write")
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not return once the state machine went on")
	}
	for range 2 {
		require.NoError(t, <-writes)
	}
}

// replicationGate fails chosen AppendEntries calls at once, as a reset
// connection would, while heartbeats (no entries, no commit index) pass:
// a leader keeps its lease and passes VerifyLeader, yet replicates
// nothing, or tells its followers nothing about what it committed.
type replicationGate struct {
	commitFrom atomic.Uint64 // fail calls that carry a commit index at or above this (0: none)
	entries    atomic.Bool   // fail calls that carry entries
}

func (g *replicationGate) open() {
	g.commitFrom.Store(0)
	g.entries.Store(false)
}

func (g *replicationGate) fails(a *raft.AppendEntriesRequest) bool {
	if c := g.commitFrom.Load(); c > 0 && a.LeaderCommitIndex >= c {
		return true
	}
	return g.entries.Load() && len(a.Entries) > 0
}

// wrap returns tr with its AppendEntries calls judged by g. Pipelining is
// refused, so that Raft sends every entry through AppendEntries.
func (g *replicationGate) wrap(tr raft.Transport) raft.Transport {
	gt := &gatedTransport{Transport: tr, g: g}
	if pv, ok := tr.(raft.WithPreVote); ok {
		return &gatedPreVoteTransport{gatedTransport: gt, pv: pv}
	}
	return gt
}

type gatedTransport struct {
	raft.Transport
	g *replicationGate
}

var errGated = errors.New("AppendEntries failed by the test's replication gate")

func (t *gatedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if t.g.fails(args) {
		return errGated
	}
	return t.Transport.AppendEntries(id, target, args, resp)
}

func (t *gatedTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// Close closes the wrapped transport (Raft's shutdown probes raft.WithClose).
func (t *gatedTransport) Close() error {
	if c, ok := t.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// gatedPreVoteTransport keeps pre-vote on when the wrapped transport has
// it (raft.NewRaft probes raft.WithPreVote).
type gatedPreVoteTransport struct {
	*gatedTransport
	pv raft.WithPreVote
}

func (t *gatedPreVoteTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.pv.RequestPreVote(id, target, args, resp)
}

// TestNewLeaderReadsAfterItsTermEntry: a new leader may not know that its
// predecessor committed an entry and answered it. Its commit index learns
// so only when an entry of its own term commits, so it serves no
// linearizable read before it has applied one (the ready flag of
// node.leaderLoop).
//
// The old leader commits and answers W, but its followers never hear of
// the commit (the calls that would tell them fail), and then it dies. The
// new leader has W in its log, uncommitted as far as it knows, and can
// replicate nothing (its calls carrying entries fail) while its heartbeats
// keep its lease and pass VerifyLeader. A linearizable read of W's value
// on it must not answer from its state, which lacks W; once replication
// resumes, the read sees W.
func TestNewLeaderReadsAfterItsTermEntry(t *testing.T) {
	t.Parallel()
	var gate replicationGate
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		faulty := cfg.WrapTransport
		cfg.WrapTransport = func(tr raft.Transport) raft.Transport { return gate.wrap(faulty(tr)) }
	}})
	l := waitPools(t, c)
	ctx := ctxT(t, 30*time.Second)
	waitLinearizable(t, ctx, l)
	last, err := strconv.ParseUint(l.Node.Stats()["last_log_index"], 10, 64)
	require.NoError(t, err)
	c.WaitApplied(l.Node.LocalState().AppliedIndex()) // quiet: every follower knows every commit so far

	gate.commitFrom.Store(last + 1)
	w, err := l.Node.Allocate(ctx, "ip", "10.96.0.50", "acked", 0, "")
	require.NoError(t, err, "the leader commits W with a follower's acknowledgement")
	require.Greater(t, w[0].Revision, last)
	var others []int
	for _, m := range c.Live() {
		if m != l {
			_, err := m.Node.LocalState().Get("ip", "10.96.0.50")
			require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeNotAllocated}, "follower %s must not know W committed", m.ID)
			others = append(others, m.Index)
		}
	}

	gate.entries.Store(true)
	c.Kill(l.Index)
	nl := c.LeaderAmong(others...)
	_, err = nl.Node.Get(ctxT(t, time.Second), node.Linearizable, "ip", "10.96.0.50")
	require.Error(t, err, "a new leader that applied no entry of its term cannot know W's state")
	var fe *fsm.Error
	require.False(t, errors.As(err, &fe), "the new leader answered from a state without the acknowledged W: %v", err)
	require.True(t, nl.Node.IsLeader(), "the read ended at its deadline, with %s still leading", nl.ID)

	gate.open()
	got, err := nl.Node.Get(ctxT(t, 15*time.Second), node.Linearizable, "ip", "10.96.0.50")
	require.NoError(t, err)
	assert.Equal(t, "acked", got.Owner)
	c.Start(l.Index)
}

// waitLinearizable waits until the leader l serves linearizable reads
// (it has applied an entry of its term).
func waitLinearizable(t *testing.T, ctx context.Context, l *cluster.Member) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := l.Node.Pool(ctx, node.Linearizable, "ip")
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "the leader serves linearizable reads")
}

// TestIdleAfterReadsConverges: a linearizable read that is the last entry
// of the log leaves no node behind. The read's entry must reach every
// state machine, or followers report an applied index below the commit
// index, and /readyz says catching_up, until the next write (the
// Jepsen-style suite's convergence check caught this, seed 3).
func TestIdleAfterReadsConverges(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	// The new leader's last entry of its own raises the feature level
	// after the pools: once every node has it, the reads below are the
	// log's last entries.
	waitLevel(t, c)
	ctx := ctxT(t, 30*time.Second)
	waitLinearizable(t, ctx, l)
	_, err := l.Node.Allocate(ctx, "ip", "10.96.0.30", "idle", 0, "")
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := l.Node.Get(ctx, node.Linearizable, "ip", "10.96.0.30")
		require.NoError(t, err)
	}
	lst, err := l.Node.Cluster()
	require.NoError(t, err)
	commit := lst.CommitIndex
	for _, n := range c.Live() {
		var applied atomic.Uint64 // the condition runs on a goroutine of its own
		ok := assert.Eventually(t, func() bool {
			st, err := n.Node.Cluster()
			applied.Store(st.AppliedIndex)
			return err == nil && st.AppliedIndex == commit && n.Node.Readiness().Ready
		}, 10*time.Second, 20*time.Millisecond)
		if !ok {
			t.Fatalf("%s has not applied the leader's commit index %d and become ready: applied %d, %+v",
				n.ID, commit, applied.Load(), n.Node.Readiness())
		}
	}
}
