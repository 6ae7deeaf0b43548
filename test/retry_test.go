package test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
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

// TestRetryAfterLostAnswerAppliesOnce: a write whose first attempt
// committed but whose answer was lost is retried by the node (node.submit)
// with the same request ID, so the caller gets the first answer and the
// request takes one value. A retry under a fresh ID would take a second
// one. Each case loses the answer on one of submit's two paths.
func TestRetryAfterLostAnswerAppliesOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, ctx context.Context, owner string) (*node.Node, []fsm.Allocation)
	}{
		{"forwarded: the connection breaks as the leader's answer arrives", forwardedAnswerLost},
		{"proposed: the leader is deposed after replicating the entry", proposedAnswerLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, 30*time.Second)
			const owner = "lost-answer"
			leader, got := tc.run(t, ctx, owner)
			require.Len(t, got, 1)
			held := ownerHolds(t, ctx, leader, "ip", owner)
			assert.Equal(t, []string{got[0].Value}, held, "the retry returned the first answer, and the request took one value")
			st, err := leader.Pool(ctx, node.Linearizable, "ip")
			require.NoError(t, err)
			assert.Equal(t, 1, st.Used)
		})
	}
}

// forwardedAnswerLost calls Allocate on a follower and breaks its
// forwarding connection as the leader's answer arrives: the leader applied
// the request, the follower's call has an unknown outcome, and the
// follower retries through a new connection.
func forwardedAnswerLost(t *testing.T, ctx context.Context, owner string) (*node.Node, []fsm.Allocation) {
	var lost lostReplies
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		cfg.DialRPC = lost.wrap(cfg.DialRPC)
	}})
	l := waitPools(t, c)
	f := follower(c, l)
	lost.armed.Store(true)
	got, err := f.Node.Allocate(ctx, "ip", "", owner, 0, "lost-answer-key")
	require.NoError(t, err)
	require.EqualValues(t, 1, lost.lost.Load(), "the first answer was lost")
	return l.Node, got
}

// proposedAnswerLost calls Allocate on the leader while its followers'
// answers are cut (its messages still reach them): the entry reaches both
// followers, the leader cannot count it committed and steps down when its
// lease runs out (an unknown outcome), the followers elect a new leader
// that commits the entry, and after the heal the old leader retries
// through the new one.
func proposedAnswerLost(t *testing.T, ctx context.Context, owner string) (*node.Node, []fsm.Allocation) {
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	// The leader's own entries (the feature level comes last) must be
	// committed before the cut: one still in flight would hold the
	// leader's only slot, and the allocation would never be replicated.
	waitLevel(t, c)
	var others []int
	for _, m := range c.Live() {
		if m != l {
			c.Faults.Cut(raftAddr(m), raftAddr(l))
			others = append(others, m.Index)
		}
	}
	type answer struct {
		a   []fsm.Allocation
		err error
	}
	done := make(chan answer, 1)
	go func() {
		a, err := l.Node.Allocate(ctx, "ip", "", owner, 0, "lost-answer-key")
		done <- answer{a, err}
	}()
	nl := c.LeaderAmong(others...)
	require.Eventually(t, func() bool {
		allocs, _, err := nl.Node.LocalState().List("ip", owner, "", 10)
		return err == nil && len(allocs) == 1
	}, 15*time.Second, 10*time.Millisecond, "the new leader commits the first attempt")
	require.False(t, l.Node.IsLeader(), "the old leader stepped down")
	select {
	case got := <-done:
		t.Fatalf("the call returned before the heal, when only the first attempt could have applied: %v, %v", got.a, got.err)
	default:
	}
	c.Heal()
	got := <-done
	require.NoError(t, got.err)
	var ue *node.UnknownOutcomeError
	require.False(t, errors.As(got.err, &ue))
	return nl.Node, got.a
}

// lostReplies breaks a forwarding connection as an answer arrives, while
// armed: the leader applied the request, and the caller never hears its
// answer. It loses the first answer only (disarming), or every answer. The
// transport's hello, which the dialer reads first (two bytes, then the
// cluster ID they announce), passes.
type lostReplies struct {
	every bool
	armed atomic.Bool
	lost  atomic.Int32
}

func (g *lostReplies) wrap(dial func(string, time.Duration) (net.Conn, error)) func(string, time.Duration) (net.Conn, error) {
	return func(addr string, timeout time.Duration) (net.Conn, error) {
		conn, err := dial(addr, timeout)
		if err != nil {
			return nil, err
		}
		return &lossyConn{Conn: conn, g: g}, nil
	}
}

type lossyConn struct {
	net.Conn
	g     *lostReplies
	hello []byte // what was read of the hello
}

func (c *lossyConn) Read(p []byte) (int, error) {
	if len(c.hello) < 2 || len(c.hello) < 2+int(c.hello[1]) {
		n, err := c.Conn.Read(p) // the hello is read with buffers of its exact size
		c.hello = append(c.hello, p[:n]...)
		return n, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 && c.lose() {
		c.g.lost.Add(1)
		c.Conn.Close()
		return 0, errors.New("the test broke the connection as the answer arrived")
	}
	return n, err
}

func (c *lossyConn) lose() bool {
	if c.g.every {
		return c.g.armed.Load()
	}
	return c.g.armed.CompareAndSwap(true, false)
}

func raftAddr(m *cluster.Member) raft.ServerAddress { return raft.ServerAddress(m.Addr) }

// ownerHolds returns the values owner holds in pool, read linearizably.
func ownerHolds(t *testing.T, ctx context.Context, n *node.Node, pool, owner string) []string {
	t.Helper()
	allocs, _, err := n.List(ctx, node.Linearizable, pool, owner, "", 100)
	require.NoError(t, err)
	var values []string
	for _, a := range allocs {
		values = append(values, a.Value)
	}
	return values
}

// TestNoLeaderAnswerMeansNotApplied: writes forwarded by a follower under
// deadlines of 0 to 8 ms. A call answered ErrNoLeader (503 NoLeader:
// nothing was applied) must not be applied afterwards: a client without
// a key writes again on that answer. The follower's sender used to
// encode a write its caller had just given up on into the call.
func TestNoLeaderAnswerMeansNotApplied(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: []node.PoolSpec{{Name: "big", Range: "10.128.0.0/12"}}})
	l := c.Leader()
	ctx := ctxT(t, 120*time.Second)
	require.Eventually(t, func() bool {
		ps, err := l.Node.Pools(ctx, node.Leader)
		return err == nil && len(ps) == 1
	}, 10*time.Second, 20*time.Millisecond)
	f := follower(c, l)
	var mu sync.Mutex
	var noLeader []string
	var wg sync.WaitGroup
	for round := 0; round < 30; round++ {
		for i := 0; i < 32; i++ {
			id := fmt.Sprintf("r%d-c%d", round, i)
			ops := make([]fsm.Op, 250)
			for j := range ops {
				ops[j] = fsm.Op{Kind: fsm.OpAllocate, Pool: "big", Owner: id}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(8000))*time.Microsecond)
				defer cancel()
				_, err := f.Node.Txn(cctx, ops, id)
				var ue *node.UnknownOutcomeError
				if errors.Is(err, node.ErrNoLeader) && !errors.As(err, &ue) {
					mu.Lock()
					noLeader = append(noLeader, id)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	require.NotEmpty(t, noLeader, "some calls gave up before their write was sent")
	// What is in flight lands; then each ID is looked up on the leader.
	_, err := l.Node.Pools(ctx, node.Linearizable)
	require.NoError(t, err)
	time.Sleep(time.Second)
	var applied []string
	for _, id := range noLeader {
		held, _, err := l.Node.LocalState().List("big", id, "", 1000)
		require.NoError(t, err)
		if len(held) > 0 {
			applied = append(applied, fmt.Sprintf("%s holds %d values", id, len(held)))
		}
	}
	t.Logf("%d calls answered NoLeader", len(noLeader))
	require.Empty(t, applied, "calls answered NoLeader (nothing applied) whose write was applied")
}

// TestRemoveMemberAnswerLost: a follower forwards a member removal, the
// leader removes the member, and every answer is lost until the call's
// deadline. The call ends as an unknown outcome that names the request ID
// the node drew (503 Unavailable over the API), not as "no leader": the
// removal may have happened. Retried under that ID once answers arrive,
// it answers success, as the removal did, and not MemberNotFound.
func TestRemoveMemberAnswerLost(t *testing.T) {
	t.Parallel()
	lost := lostReplies{every: true}
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		cfg.DialRPC = lost.wrap(cfg.DialRPC)
	}})
	l := waitPools(t, c)
	var caller, gone *cluster.Member
	for _, m := range c.Live() {
		switch {
		case m == l:
		case caller == nil:
			caller = m
		default:
			gone = m
		}
	}
	lost.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := caller.Node.RemoveMember(ctx, gone.ID, "")
	cancel()
	lost.armed.Store(false)
	require.Positive(t, lost.lost.Load(), "answers were lost")
	var ue *node.UnknownOutcomeError
	require.ErrorAs(t, err, &ue, "the removal may have happened: %v", err)
	assert.True(t, fsm.IsDrawnRequestID(ue.RequestID), "the error names the ID the node drew: %q", ue.RequestID)

	ctx = ctxT(t, 20*time.Second)
	require.NoError(t, caller.Node.RemoveMember(ctx, gone.ID, ue.RequestID), "the retry answers as the removal did")
	st, err := l.Node.Cluster()
	require.NoError(t, err)
	for _, m := range st.Members {
		assert.NotEqual(t, gone.ID, m.ID, "the member was removed")
	}
	c.Kill(gone.Index) // out of the cluster, it hears of no entry the others apply
}
