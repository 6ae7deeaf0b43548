package test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRestoreKeepsMembers: a backup taken from another cluster brings its
// pools and allocations, and this cluster's member table and cluster ID
// stay, so every member still shows its API address and the nodes still
// talk to each other. Restored through a follower (forwarded to the
// leader), then through the leader.
func TestRestoreKeepsMembers(t *testing.T) {
	t.Parallel()
	other := cluster.New(t, 1, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) { cfg.APIAddr = "elsewhere-" + cfg.ID }})
	src := waitPools(t, other)
	ctx := ctxT(t, 60*time.Second)
	held, err := src.Node.Allocate(ctx, "ip", "", "from-backup", 3, "")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		m, ok := src.Node.LocalState().Member(src.ID)
		return ok && m.APIAddr == "elsewhere-"+src.ID
	}, 10*time.Second, 20*time.Millisecond, "the other cluster's member table")
	var backup bytes.Buffer
	require.NoError(t, src.Node.Backup(ctx, &backup))

	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	withAPI := func(m *cluster.Member) bool {
		st, err := m.Node.Cluster()
		if err != nil || len(st.Members) != 3 {
			return false
		}
		for _, row := range st.Members {
			if row.APIAddr != "api-"+row.ID {
				return false
			}
		}
		return true
	}
	require.Eventually(t, func() bool { return withAPI(l) }, 10*time.Second, 20*time.Millisecond, "every member has its API address")
	want := l.Node.LocalState().Members()
	require.Eventually(t, func() bool { return src.Node.ClusterID() != "" && l.Node.ClusterID() != "" }, 10*time.Second, 20*time.Millisecond)
	id := l.Node.ClusterID()
	require.NotEqual(t, src.Node.ClusterID(), id)

	for _, via := range []*cluster.Member{follower(c, l), l} {
		require.NoError(t, via.Node.Restore(ctx, bytes.NewReader(backup.Bytes()), ""), "restore through %s", via.ID)
		for _, a := range held {
			got, err := via.Node.Get(ctx, node.Linearizable, "ip", a.Value)
			require.NoError(t, err)
			assert.Equal(t, "from-backup", got.Owner, "the backup's allocations")
		}
		for _, m := range c.Live() {
			if !assert.Eventually(t, func() bool { return withAPI(m) }, 10*time.Second, 20*time.Millisecond) {
				t.Fatalf("%s shows every member with its API address after a restore through %s: %+v", m.ID, via.ID, m.Node.LocalState().Members())
			}
			assert.Equal(t, want, m.Node.LocalState().Members(), "%s keeps the member table", m.ID)
			assert.Equal(t, id, m.Node.LocalState().ClusterID(), "%s keeps the cluster ID", m.ID)
			assert.Equal(t, id, m.Node.ClusterID())
		}
		_, err := via.Node.Allocate(ctx, "ip", "", "after-restore", 1, "")
		require.NoError(t, err, "writes go on")
	}
}

// TestRestoreRetriedAfterLostAnswer: a restore forwarded by a follower
// whose answer is lost (the leader's replies to it are cut, then the
// leader crashes) is retried by the follower through the new leader. The
// retry carries the first attempt's request ID, so it answers what the
// first did instead of restoring again: the allocation acknowledged
// between the restore and the crash survives. So it does when the new
// leader is low on disk: it looks the ID up before it refuses a restore
// for disk, which would say nothing was applied.
func TestRestoreRetriedAfterLostAnswer(t *testing.T) {
	t.Parallel()
	for _, lowDisk := range []bool{false, true} {
		t.Run(fmt.Sprintf("lowDisk=%v", lowDisk), func(t *testing.T) { restoreRetriedAfterLostAnswer(t, lowDisk) })
	}
}

func restoreRetriedAfterLostAnswer(t *testing.T, lowDisk bool) {
	var low atomic.Bool
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		cfg.MinFreeDisk, cfg.DiskCheckInterval = 1<<20, 10*time.Millisecond
		cfg.DiskFree = func(string) (uint64, error) {
			if low.Load() {
				return 1, nil
			}
			return 1 << 40, nil
		}
	}})
	l := waitPools(t, c)
	f := follower(c, l)
	ctx := ctxT(t, 60*time.Second)
	held, err := l.Node.Allocate(ctx, "ip", "", "from-backup", 1, "")
	require.NoError(t, err)
	var backup bytes.Buffer
	require.NoError(t, l.Node.Backup(ctx, &backup))
	// Released through the follower, which opens its forwarding
	// connection to the leader before the cut (a dial across it fails).
	_, err = f.Node.Release(ctx, "ip", held[0].Value, "from-backup", "")
	require.NoError(t, err)

	c.Faults.Cut(raft.ServerAddress(l.Addr), raft.ServerAddress(f.Addr))
	done := make(chan error, 1)
	go func() { done <- f.Node.Restore(ctx, bytes.NewReader(backup.Bytes()), "") }()
	require.Eventually(t, func() bool {
		got, err := l.Node.Get(ctx, node.Leader, "ip", held[0].Value)
		return err == nil && got.Owner == "from-backup"
	}, 20*time.Second, 20*time.Millisecond, "the leader restored the backup")
	after, err := l.Node.Allocate(ctx, "ip", "", "after-restore", 1, "")
	require.NoError(t, err, "a write acknowledged after the restore")
	select {
	case err := <-done:
		t.Fatalf("the follower got an answer across the cut: %v", err)
	default:
	}

	if lowDisk {
		low.Store(true) // every node: no leader the retry may reach has room
		require.Eventually(t, func() bool {
			for _, m := range c.Live() {
				if !m.Node.DiskStats().Low {
					return false
				}
			}
			return true
		}, 10*time.Second, 10*time.Millisecond, "every node sees its disk low")
	}
	c.Kill(l.Index)
	c.Heal()
	require.NoError(t, <-done, "the follower's retry answers what the first attempt did")
	low.Store(false)
	nl := c.Leader()
	got, err := nl.Node.Get(ctx, node.Linearizable, "ip", after[0].Value)
	require.NoError(t, err, "the acknowledged allocation survives the retried restore")
	assert.Equal(t, "after-restore", got.Owner)
}

// TestRestoreDuringTransfer: a restore on a leader that is handing the
// lead over (a transfer, as a node low on disk or shutting down starts
// one) is retried through the next leader, as a lost lead is, not
// returned as a failure. The leader's link to the target is cut, so the
// transfer stays in progress for an election timeout (400 ms); the
// restore starts 100 ms into it.
func TestRestoreDuringTransfer(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	target := follower(c, l)
	ctx := ctxT(t, 30*time.Second)
	var backup bytes.Buffer
	require.NoError(t, l.Node.Backup(ctx, &backup))
	c.Faults.Cut(raft.ServerAddress(l.Addr), raft.ServerAddress(target.Addr))
	go func() {
		tctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = l.Node.TransferLeadership(tctx, target.ID)
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, l.Node.Restore(ctx, bytes.NewReader(backup.Bytes()), ""), "retried once the transfer ends")
	c.Heal()
}

// TestReadyAfterRepeatedRestore: a restore retried under its request ID
// restores nothing again, and leaves the cluster ready. Its leader used
// a raft.Barrier to read the latest request IDs; a barrier that ends the
// log is never applied, so every follower of the idle cluster stayed
// catching_up (its applied index below the leader's commit index).
func TestReadyAfterRepeatedRestore(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	ctx := ctxT(t, 60*time.Second)
	_, err := l.Node.Allocate(ctx, "ip", "", "o1", 0, "k1")
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, l.Node.Backup(ctx, &buf))
	data := buf.Bytes()
	require.NoError(t, l.Node.Restore(ctx, bytes.NewReader(data), "restore-1"))
	l = c.Leader()
	require.NoError(t, l.Node.Restore(ctx, bytes.NewReader(data), "restore-1"), "the retry answers success")
	// Readiness compares with the commit index a follower last heard of,
	// within a second: wait until each has asked again since the retry.
	time.Sleep(2 * time.Second)
	for _, m := range c.Live() {
		if m == l {
			continue
		}
		require.Eventually(t, func() bool { return m.Node.Readiness().Ready }, 2*time.Second, 20*time.Millisecond,
			"follower %s, idle and holding everything, is ready: %+v", m.ID, m.Node.Readiness())
	}
}
