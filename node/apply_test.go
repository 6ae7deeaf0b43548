package node

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFill checks how the group commit packs an entry: everything waiting,
// up to MaxBatch; and, while it holds fewer than wanted, more for at most
// the wait.
func TestFill(t *testing.T) {
	newNode := func(maxBatch int) *groupCommit {
		return &groupCommit{maxBatch: maxBatch, proposals: make(chan *proposal, 16), shutdown: make(chan struct{})}
	}
	queue := func(n *groupCommit, k int) {
		for range k {
			n.proposals <- &proposal{}
		}
	}
	first := []*proposal{{}}
	// fill runs n.fill and fails the test, rather than hang it, when fill
	// does not return.
	fill := func(t *testing.T, n *groupCommit, want int, wait time.Duration) []*proposal {
		out := make(chan []*proposal, 1)
		go func() { out <- n.fill(first, want, wait) }()
		select {
		case b := <-out:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("fill did not return")
			return nil
		}
	}

	t.Run("takes what waits, up to MaxBatch", func(t *testing.T) {
		n := newNode(3)
		queue(n, 5)
		assert.Len(t, fill(t, n, 1, 0), 3)
		assert.Len(t, n.proposals, 3, "the rest wait for the next entry")
	})
	t.Run("no wait when the wait is 0", func(t *testing.T) {
		n := newNode(100)
		queue(n, 1)
		assert.Len(t, fill(t, n, 64, 0), 2)
	})
	t.Run("waits for the callers coming back", func(t *testing.T) {
		// The wait is an hour: the test ends only if fill stops as soon
		// as the batch is as large as wanted.
		n := newNode(100)
		queue(n, 1)
		go func() {
			time.Sleep(20 * time.Millisecond)
			queue(n, 3)
		}()
		assert.Len(t, fill(t, n, 5, time.Hour), 5)
	})
	t.Run("gives up after the wait", func(t *testing.T) {
		n := newNode(100)
		queue(n, 1)
		assert.Len(t, fill(t, n, 64, 10*time.Millisecond), 2)
	})
	t.Run("stops at shutdown", func(t *testing.T) {
		shutdown := make(chan struct{})
		n := newNode(100)
		n.shutdown = shutdown
		close(shutdown)
		assert.Len(t, fill(t, n, 64, time.Hour), 1)
	})
	t.Run("no wait when the batch is large enough", func(t *testing.T) {
		n := newNode(100)
		queue(n, 2)
		assert.Len(t, fill(t, n, 2, time.Hour), 3)
	})
}

// appliedFuture is an entry Raft has applied, with the state machine's
// response.
type appliedFuture struct{ resp *fsm.Response }

func (f appliedFuture) Error() error          { return nil }
func (f appliedFuture) Index() uint64         { return 1 }
func (f appliedFuture) Response() interface{} { return f.resp }

// TestResolveExpects checks what the group commit expects of the next
// entry once one resolves: the callers it answered, who are about to ask
// again, plus the requests already waiting; and the round it took, which
// bounds the wait for them.
func TestResolveExpects(t *testing.T) {
	shutdown := make(chan struct{})
	n := newGroupCommit(4, 1, 0, shutdown, nil, nil, func(f raft.Future) error { return f.Error() }, nil)
	defer close(shutdown)
	go n.resolveLoop()
	for range 3 { // requests that arrived while the entry was out
		n.proposals <- &proposal{}
	}
	batch := []*proposal{{done: make(chan outcome, 1)}, {done: make(chan outcome, 1)}}
	resp := &fsm.Response{Results: []*fsm.Result{{}, {}}}
	n.slots <- struct{}{}
	n.inflight <- &inflight{future: appliedFuture{resp}, batch: batch, start: time.Now().Add(-3 * time.Millisecond)}
	for _, p := range batch {
		select {
		case o := <-p.done:
			require.NoError(t, o.err)
		case <-time.After(10 * time.Second):
			t.Fatal("the entry's callers were not answered")
		}
	}
	assert.EqualValues(t, 5, n.expect.Load(), "two callers coming back and three waiting")
	assert.GreaterOrEqual(t, time.Duration(n.round.Load()), 3*time.Millisecond)
	select {
	case n.slots <- struct{}{}:
	default:
		t.Fatal("the entry's slot was not freed")
	}
}

// unansweredFuture is an entry Raft never answers: what becomes of one it
// holds in its buffered apply channel, or has committed but not yet handed
// to the state machine, when it shuts down. waited is closed once something
// waits for its answer.
type unansweredFuture struct {
	once   *sync.Once
	waited chan struct{}
}

func newUnansweredFuture() unansweredFuture {
	return unansweredFuture{once: new(sync.Once), waited: make(chan struct{})}
}

func (f unansweredFuture) Error() error {
	f.once.Do(func() { close(f.waited) })
	select {}
}
func (unansweredFuture) Index() uint64         { return 0 }
func (unansweredFuture) Response() interface{} { return nil }

// TestCloseWithAnUnansweredEntry checks that Close returns although Raft
// shut down without answering an entry, and that the entry's callers learn
// its outcome is unknown.
func TestCloseWithAnUnansweredEntry(t *testing.T) {
	// Not openReady: its cleanup would call Close again, and wait with it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Open(ctx, testConfig(t, t.TempDir()))
	require.NoError(t, err)
	require.NoError(t, n.WaitForLeader(ctx))
	p := &proposal{done: make(chan outcome, 1)}
	f := newUnansweredFuture()
	n.commit.inflight <- &inflight{future: f, batch: []*proposal{p}, start: time.Now()}
	// The new leader's own first entries (members, pools, feature level)
	// may still be ahead of this one: close only once resolveLoop waits
	// for it, or Close could stop resolveLoop before it took the entry.
	select {
	case <-f.waited:
	case <-ctx.Done():
		t.Fatal("resolveLoop never took the entry")
	}
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Close waits for an entry Raft will never answer")
	}
	select {
	case o := <-p.done:
		assert.ErrorIs(t, o.err, ErrClosed)
		assert.False(t, o.definite, "the entry may have been committed")
	default:
		t.Fatal("the entry's caller was not answered")
	}
}

// TestDrawnRequestIDs: a write without an ID gets one of the form the
// state machine counts apart from keyed ones, and a retry under that ID
// (which an unknown outcome names) gets the first answer.
func TestDrawnRequestIDs(t *testing.T) {
	n := openReady(t, testConfig(t, t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { return n.fsm.FeatureLevel() == fsm.MaxFeatureLevel }, 10*time.Second, 10*time.Millisecond,
		"a new cluster reaches its level")

	req := &fsm.Request{Kind: fsm.KindTxn, Ops: []fsm.Op{{Kind: fsm.OpAllocate, Pool: "nodeport", Owner: "o"}}}
	res, err := n.submit(ctx, req)
	require.NoError(t, err)
	require.Nil(t, res.Err)
	require.True(t, fsm.IsDrawnRequestID(req.ID), "drawn: %s", req.ID)
	_, err = uuid.Parse(strings.TrimPrefix(req.ID, fsm.DrawnRequestPrefix))
	require.NoError(t, err, "the prefix and a UUID: %s", req.ID)
	_, ok := n.fsm.RequestResult(req.ID)
	assert.True(t, ok, "the result is remembered under the drawn ID")

	before, err := n.Pool(ctx, Linearizable, "nodeport")
	require.NoError(t, err)
	again, err := n.Txn(ctx, req.Ops, req.ID)
	require.NoError(t, err, "a caller may retry under a drawn ID")
	assert.Equal(t, res.Allocations(), again, "and gets the first answer")
	after, err := n.Pool(ctx, Linearizable, "nodeport")
	require.NoError(t, err)
	assert.Equal(t, before.Used, after.Used, "nothing more was allocated")
}
