package test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testPools = []node.PoolSpec{{Name: "ip", Range: "10.96.0.0/24"}, {Name: "port", Range: "30000-30099"}}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitPools waits until the bootstrap pools exist on the leader.
func waitPools(t *testing.T, c *cluster.Cluster) *cluster.Member {
	l := c.Leader()
	require.Eventually(t, func() bool {
		ps, err := l.Node.Pools(ctxT(t, 5*time.Second), node.Leader)
		return err == nil && len(ps) == len(testPools)
	}, 10*time.Second, 20*time.Millisecond)
	return l
}

func follower(c *cluster.Cluster, leader *cluster.Member) *cluster.Member {
	for _, m := range c.Live() {
		if m != leader {
			return m
		}
	}
	return nil
}

func TestReplicationAndFollowerCalls(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	f := follower(c, l)
	ctx := ctxT(t, 20*time.Second)

	a, err := l.Node.Allocate(ctx, "ip", "", "default/web", 0, "")
	require.NoError(t, err)
	require.Len(t, a, 1)
	b, err := f.Node.Allocate(ctx, "ip", "10.96.0.10", "default/dns", 0, "")
	require.NoError(t, err, "a write on a follower is carried to the leader")
	assert.True(t, b[0].Static)
	got, err := f.Node.Get(ctx, node.Linearizable, "ip", a[0].Value)
	require.NoError(t, err, "a linearizable read on a follower sees the leader's write")
	assert.Equal(t, a[0], got)
	_, err = f.Node.Allocate(ctx, "ip", "10.96.0.10", "someone", 0, "")
	assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeAlreadyAllocated})
	var fe *fsm.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "default/dns", fe.Owner)
	assert.Equal(t, "provided IP is already allocated", fe.Message)

	many, err := f.Node.Allocate(ctx, "port", "", "bulk", 50, "")
	require.NoError(t, err)
	assert.Len(t, many, 50)
	list, next, err := f.Node.List(ctx, node.Linearizable, "port", "bulk", "", 1000)
	require.NoError(t, err)
	assert.Len(t, list, 50)
	assert.Empty(t, next)
	_, err = f.Node.Release(ctx, "ip", "10.96.0.10", "wrong", "")
	assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeOwnerMismatch})
	_, err = f.Node.Release(ctx, "ip", "10.96.0.10", "default/dns", "")
	require.NoError(t, err)
	st, err := f.Node.Pool(ctx, node.Linearizable, "ip")
	require.NoError(t, err)
	assert.Equal(t, 1, st.Used)
}

func TestFailoverAndCatchUp(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	ctx := ctxT(t, 30*time.Second)
	before, err := l.Node.Allocate(ctx, "port", "", "before", 10, "")
	require.NoError(t, err)

	c.Kill(l.Index)
	nl := c.Leader()
	require.NotEqual(t, l.ID, nl.ID)
	after, err := nl.Node.Allocate(ctx, "port", "", "after", 10, "")
	require.NoError(t, err, "writes resume on the new leader")
	for _, a := range append(before, after...) {
		got, err := nl.Node.Get(ctx, node.Linearizable, "port", a.Value)
		require.NoError(t, err, "acknowledged %s survives the failover", a.Value)
		assert.Equal(t, a.Owner, got.Owner)
	}
	c.Start(l.Index) // the old leader restarts and catches up; EnsureSame checks it
}

// TestIsolatedLeader: a leader cut off from the majority acknowledges no
// write and serves no linearizable read, while the majority goes on.
func TestIsolatedLeader(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	c.Isolate(l.Index)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := l.Node.Allocate(ctx, "ip", "10.96.0.50", "isolated", 0, "")
	require.Error(t, err, "an isolated leader must not acknowledge a write")
	assert.True(t, errors.Is(err, node.ErrUnknownOutcome) || errors.Is(err, node.ErrNoLeader), "got %v", err)

	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	_, err = l.Node.Get(ctx2, node.Linearizable, "ip", "10.96.0.50")
	require.ErrorIs(t, err, node.ErrNoLeader, "an isolated leader must not serve a linearizable read")

	var others []int
	for _, m := range c.Members {
		if m.Index != l.Index {
			others = append(others, m.Index)
		}
	}
	nl := c.LeaderAmong(others...)
	ctx3 := ctxT(t, 10*time.Second)
	got, err := nl.Node.Allocate(ctx3, "ip", "10.96.0.50", "majority", 0, "")
	require.NoError(t, err, "the majority elects a leader and goes on")
	assert.Equal(t, "10.96.0.50", got[0].Value)
	c.Heal()
	a, err := l.Node.Get(ctxT(t, 10*time.Second), node.Linearizable, "ip", "10.96.0.50")
	require.NoError(t, err)
	assert.Equal(t, "majority", a.Owner, "the isolated leader's unacknowledged write never took effect")
}

// TestDeposedLeaderServesNoStaleRead: a leader cut off from the majority
// that still believes it leads, while the majority has elected a new
// leader and committed a write, must not answer a linearizable read from
// its own state. n0 gets a leader lease of 5 s, so it keeps believing for
// seconds after the cut, long after n1 and n2 (400 ms timeouts) have
// moved on; only the read barrier stands between it and a stale answer.
// (Without that lease, Raft's own lease check steps the old leader down
// before a new one exists, and the window is rarely open: the Jepsen
// suite needs long SIGSTOP runs to see it.)
func TestDeposedLeaderServesNoStaleRead(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		if cfg.ID == "n0" {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 5*time.Second, 5*time.Second, 5*time.Second
		}
	}})
	waitPools(t, c)
	n0 := c.Members[0]

	// n0 sends a heartbeat only every 0.5-1 s, slower than n1 and n2 wait:
	// keep entries flowing through it until the cut, so they do not depose
	// it early.
	stop := make(chan struct{})
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if got, err := n0.Node.Allocate(ctx, "port", "", "keepalive", 0, ""); err == nil {
				_, _ = n0.Node.Release(ctx, "port", got[0].Value, "keepalive", "")
			}
			cancel()
		}
	}()
	require.Eventually(t, func() bool {
		if n0.Node.IsLeader() {
			return true
		}
		l := c.Leader()
		_ = l.Node.TransferLeadership(ctxT(t, 5*time.Second), "n0")
		return n0.Node.IsLeader()
	}, 20*time.Second, 100*time.Millisecond, "n0 takes the lead")
	require.Eventually(t, func() bool { // and serves linearizable reads
		_, err := n0.Node.Pool(ctxT(t, 5*time.Second), node.Linearizable, "ip")
		return err == nil && n0.Node.IsLeader()
	}, 10*time.Second, 20*time.Millisecond, "n0 serves linearizable reads")

	c.Isolate(0) // first: n1 and n2 must not depose n0 before the cut
	close(stop)
	<-writer
	nl := c.LeaderAmong(1, 2)
	got, err := nl.Node.Allocate(ctxT(t, 10*time.Second), "ip", "10.96.0.77", "new-leader", 0, "")
	require.NoError(t, err, "the majority elects a leader and commits")
	require.Equal(t, "10.96.0.77", got[0].Value)
	require.True(t, n0.Node.IsLeader(), "the test needs n0 to still believe it leads (its lease is 5 s)")

	_, err = n0.Node.Get(ctxT(t, time.Second), node.Linearizable, "ip", "10.96.0.77")
	require.Error(t, err, "a deposed leader cannot know the value's state")
	var fe *fsm.Error
	require.False(t, errors.As(err, &fe), "a deposed leader answered from its own state: %v", err)
	assert.ErrorIs(t, err, node.ErrNoLeader)
	assert.True(t, n0.Node.IsLeader(), "the read ended at its deadline, not when n0's lease ran out")

	c.Heal()
	a, err := n0.Node.Get(ctxT(t, 15*time.Second), node.Linearizable, "ip", "10.96.0.77")
	require.NoError(t, err)
	assert.Equal(t, "new-leader", a.Owner)
}

// TestSnapshotCatchUp: a follower cut off while the leader compacts its
// log past it must catch up by InstallSnapshot, then take the entries
// after it.
func TestSnapshotCatchUp(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, testSnapshotCatchUp)
}

func testSnapshotCatchUp(t *testing.T, store string) {
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, LogStore: store, Tune: func(cfg *node.Config) {
		cfg.SnapshotThreshold, cfg.TrailingLogs = 64, 16
		cfg.SnapshotInterval = 100 * time.Millisecond
		// raft-wal drops compacted entries a whole segment at a time and
		// still serves the rest: small segments, or the leader sends
		// those instead of its snapshot.
		cfg.WALSegmentSize = 8 << 10
	}})
	l := waitPools(t, c)
	f := follower(c, l)
	c.Isolate(f.Index)
	var others []int
	for _, m := range c.Members {
		if m.Index != f.Index {
			others = append(others, m.Index)
		}
	}
	l = c.LeaderAmong(others...)
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 300; i++ {
		_, err := l.Node.Allocate(ctx, "port", "", fmt.Sprint("o", i%7), 0, "")
		if err != nil {
			require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeRangeFull})
			_, err = l.Node.Release(ctx, "port", strconv.Itoa(30000+i%100), "", "")
			if err != nil {
				require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeNotAllocated})
			}
		}
	}
	require.NoError(t, l.Node.Snapshot())
	stale, err := strconv.ParseUint(f.Node.Stats()["last_log_index"], 10, 64)
	require.NoError(t, err)
	first, err := strconv.ParseUint(l.Node.Stats()["log_first_index"], 10, 64)
	require.NoError(t, err)
	require.Greater(t, first, stale+1, "the leader compacted its log past the follower: only a snapshot can catch it up")
	c.Heal()
	c.EnsureSame(t)
	snapIdx, _ := strconv.ParseUint(f.Node.Stats()["last_snapshot_index"], 10, 64)
	assert.Greater(t, snapIdx, stale, "the follower installed the leader's snapshot")
	l = c.LeaderAmong(0, 1, 2)
	for i := 0; i < 5; i++ {
		_, err := l.Node.Release(ctx, "port", strconv.Itoa(30000+i), "", "")
		if err != nil {
			require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeNotAllocated})
		}
	}
	last, err := strconv.ParseUint(l.Node.Stats()["last_log_index"], 10, 64)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := strconv.ParseUint(f.Node.Stats()["last_log_index"], 10, 64)
		return err == nil && got >= last
	}, 10*time.Second, 20*time.Millisecond, "the follower appends the entries after the snapshot")
}

// TestRestartFromSnapshotAndLog: state comes back from a snapshot plus the
// log entries after it, on every node, after the whole cluster stops.
func TestWholeClusterRestart(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	ctx := ctxT(t, 60*time.Second)
	acked := map[string]string{}
	for i := 0; i < 40; i++ {
		a, err := l.Node.Allocate(ctx, "ip", "", fmt.Sprint("owner-", i), 0, "")
		require.NoError(t, err)
		acked[a[0].Value] = a[0].Owner
		if i == 20 {
			for _, m := range c.Live() {
				require.NoError(t, m.Node.Snapshot(), "snapshot on %s", m.ID)
			}
		}
	}
	for _, m := range c.Members {
		c.Kill(m.Index)
	}
	for _, m := range c.Members {
		c.Start(m.Index)
	}
	l = c.Leader()
	list, _, err := l.Node.List(ctxT(t, 20*time.Second), node.Linearizable, "ip", "", "", 1000)
	require.NoError(t, err)
	got := map[string]string{}
	for _, a := range list {
		got[a.Value] = a.Owner
	}
	assert.Equal(t, acked, got, "every acknowledged allocation survives a whole-cluster restart")
}

// TestIdempotentRetryAcrossLeaderChange: a retry with the same request ID
// on a new leader returns the original value and allocates nothing more.
func TestIdempotentRetryAcrossLeaderChange(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	ctx := ctxT(t, 30*time.Second)
	first, err := l.Node.Allocate(ctx, "ip", "", "svc", 0, "retry-key-1")
	require.NoError(t, err)
	c.Kill(l.Index)
	nl := c.Leader()
	again, err := nl.Node.Allocate(ctx, "ip", "", "svc", 0, "retry-key-1")
	require.NoError(t, err)
	assert.Equal(t, first, again, "the retry returns the original answer")
	st, err := nl.Node.Pool(ctx, node.Linearizable, "ip")
	require.NoError(t, err)
	assert.Equal(t, 1, st.Used, "and allocates nothing more")
	_, err = nl.Node.Allocate(ctx, "ip", "", "other-owner", 0, "retry-key-1")
	assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeIdempotencyKeyReused})
	c.Start(l.Index)
}

// TestFollowerLeavesUnreachableLeader: calls a follower forwarded to a
// leader that then vanished behind a partition (packets dropped, not
// refused: a paused process or a firewall) are carried to the new leader
// as soon as the follower learns of it, with the same request ID, instead
// of waiting out the caller's deadline. The partition lasts until both
// calls have returned, so only the new leader can have answered them.
func TestFollowerLeavesUnreachableLeader(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	f := follower(c, l)
	st, err := f.Node.Cluster()
	require.NoError(t, err)
	require.Equal(t, l.ID, st.LeaderID, "the follower knows the leader before the partition")
	ctx := ctxT(t, 20*time.Second)
	_, err = f.Node.Pool(ctx, node.Linearizable, "ip")
	require.NoError(t, err, "a forwarded read opens the follower's connection to the leader")

	c.Isolate(l.Index)
	var (
		wg   sync.WaitGroup
		a    []fsm.Allocation
		aErr error
		gErr error
	)
	wg.Add(2)
	go func() { defer wg.Done(); a, aErr = f.Node.Allocate(ctx, "ip", "10.96.0.77", "moved", 0, "moved-key") }()
	go func() { defer wg.Done(); _, gErr = f.Node.Get(ctx, node.Linearizable, "ip", "10.96.0.1") }()
	wg.Wait()
	require.NoError(t, aErr, "the write reaches the new leader")
	require.ErrorIs(t, gErr, &fsm.Error{Code: fsm.CodeNotAllocated}, "the read is answered by the new leader")

	var others []int
	for _, m := range c.Members {
		if m.Index != l.Index {
			others = append(others, m.Index)
		}
	}
	nl := c.LeaderAmong(others...)
	got, err := nl.Node.Get(ctx, node.Linearizable, "ip", "10.96.0.77")
	require.NoError(t, err)
	assert.Equal(t, a[0], got)
	c.Heal()
	again, err := l.Node.Allocate(ctx, "ip", "10.96.0.77", "moved", 0, "moved-key")
	require.NoError(t, err)
	assert.Equal(t, a, again, "a retry of the key after the heal returns the first answer")
}

func TestMembershipAndTransfer(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	f := follower(c, l)
	ctx := ctxT(t, 30*time.Second)
	require.NoError(t, f.Node.TransferLeadership(ctx, f.ID), "a transfer asked on a follower is carried to the leader")
	require.Eventually(t, func() bool { return f.Node.IsLeader() }, 10*time.Second, 20*time.Millisecond)
	st, err := l.Node.Cluster()
	require.NoError(t, err)
	assert.Len(t, st.Members, 3)
	for _, m := range st.Members {
		assert.Equal(t, "api-"+m.ID, m.APIAddr, "member table row of %s", m.ID)
	}
	err = l.Node.RemoveMember(ctx, "nope", "")
	assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeMemberNotFound})
	require.NoError(t, l.Node.RemoveMember(ctx, l.ID, ""), "a node can ask for its own removal")
	c.Kill(l.Index)
	st, err = f.Node.Cluster()
	require.NoError(t, err)
	assert.Len(t, st.Members, 2)
	_, err = f.Node.Allocate(ctx, "ip", "", "two-node", 0, "")
	require.NoError(t, err, "the two remaining nodes form a majority")
}

type fsmOp = fsm.Op

func allocOp(pool, owner string) fsm.Op {
	return fsm.Op{Kind: fsm.OpAllocate, Pool: pool, Owner: owner}
}
