package test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// levels returns each live member's applied feature level.
func levels(c *cluster.Cluster) []int {
	var out []int
	for _, m := range c.Live() {
		out = append(out, m.Node.LocalState().FeatureLevel())
	}
	return out
}

// waitLevel waits until every live node has this release's feature level:
// a new cluster's leader raises it last of its own first entries.
func waitLevel(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, l := range levels(c) {
			if l != fsm.MaxFeatureLevel {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "every node reaches this release's feature level")
}

func memberOf(t *testing.T, st node.ClusterStatus, id string) node.Member {
	t.Helper()
	for _, m := range st.Members {
		if m.ID == id {
			return m
		}
	}
	t.Fatalf("no member %s in %v", id, membership(st))
	return node.Member{}
}

// TestNewClusterStartsAtItsLevel: founders all of this release start the
// cluster at this release's feature level.
func TestNewClusterStartsAtItsLevel(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	waitPools(t, c)
	waitLevel(t, c)
}

// TestNewClusterWithAFounderDown: a founder that dies before the first
// leader could ask it which level it supports keeps the cluster at level
// 1 for now, but does not hold up the rest: the configured pools are
// created and the two others serve writes, as with any one node down.
func TestNewClusterWithAFounderDown(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	c.Kill(1) // before the first election (an election timeout away)
	l := waitPools(t, c)
	_, err := l.Node.Allocate(ctxT(t, 10*time.Second), "ip", "", "two-founders", 0, "")
	require.NoError(t, err)
	assert.Equal(t, 1, l.Node.LocalState().FeatureLevel(), "the silent founder's release is not known")
}

// TestFinalizeUpgradeWaitsForEveryMember: while one member runs an older
// release (it says it supports level 1), the cluster stays at level 1: a
// level-2 kind is refused before it reaches the log, and finalize names
// the member. Once it is upgraded, finalize raises the level everywhere.
func TestFinalizeUpgradeWaitsForEveryMember(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		if cfg.ID == "n2" {
			cfg.MaxFeatureLevel = 1
		}
	}})
	l := waitPools(t, c)
	ctx := ctxT(t, 30*time.Second)
	assert.Equal(t, []int{1, 1, 1}, levels(c), "a founder of the older release holds the new cluster at level 1")
	if l.ID == "n2" { // the older release has no finalize to run
		require.NoError(t, l.Node.TransferLeadership(ctx, "n0"))
		l = c.LeaderAmong(0, 1)
	}

	f := follower(c, l)
	err := f.Node.FinalizeUpgrade(ctx)
	var fe *fsm.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, fsm.CodeVersionMismatch, fe.Code)
	assert.Contains(t, fe.Message, "n2 (release")
	assert.Equal(t, []int{1, 1, 1}, levels(c))
	// The leader learns each member's level from its health probes, once
	// a second: the pools may be there before the first round.
	var st node.ClusterStatus
	require.Eventually(t, func() bool {
		st, err = f.Node.Cluster()
		return err == nil && memberOf(t, st, "n2").FeatureLevel != 0
	}, 10*time.Second, 20*time.Millisecond, "the leader's view of n2, through a follower")
	assert.Equal(t, 1, st.FeatureLevel)
	assert.Equal(t, 1, memberOf(t, st, "n2").FeatureLevel, "the leader's view, through a follower")

	// A level-2 kind: a member kept a non-voter.
	err = l.Node.AddMember(ctx, fsm.Member{ID: "n9", RaftAddr: c.Members[2].Addr, Nonvoter: true})
	require.ErrorAs(t, err, &fe)
	assert.Contains(t, fe.Message, "feature level")

	// Upgrade n2: the same node, restarted without the older release's cap.
	cfg := c.Config(2)
	cfg.MaxFeatureLevel = 0
	c.SetConfig(2, cfg)
	c.Restart(2)
	require.Eventually(t, func() bool { return f.Node.FinalizeUpgrade(ctx) == nil }, 20*time.Second, 200*time.Millisecond)
	c.WaitApplied(c.Leader().Node.LocalState().AppliedIndex())
	assert.Equal(t, []int{fsm.MaxFeatureLevel, fsm.MaxFeatureLevel, fsm.MaxFeatureLevel}, levels(c))
	require.NoError(t, f.Node.FinalizeUpgrade(ctx), "nothing newer to finalize: no error")
}

// TestJoinRefusesAnOlderRelease: a node whose binary does not support the
// cluster's level is refused for good, and the configuration is unchanged.
func TestJoinRefusesAnOlderRelease(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 1, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	require.Eventually(t, func() bool { return levels(c)[0] == fsm.MaxFeatureLevel }, 10*time.Second, 20*time.Millisecond)
	before, err := l.Node.Cluster()
	require.NoError(t, err)
	_, err = c.TryAdd(func(cfg *node.Config) { cfg.MaxFeatureLevel = 1 })
	var fe *fsm.Error
	require.ErrorAs(t, err, &fe, "Open refuses for good")
	assert.Equal(t, fsm.CodeVersionMismatch, fe.Code)
	assert.Contains(t, err.Error(), fmt.Sprintf("supports feature level 1, and the cluster is at %d", fsm.MaxFeatureLevel))
	after, err := l.Node.Cluster()
	require.NoError(t, err)
	assert.Equal(t, membership(before), membership(after))
}

// voterIDs returns the IDs of the voters of the leader's configuration.
func voterIDs(t *testing.T, c *cluster.Cluster) []string {
	st, err := c.Leader().Node.Cluster()
	require.NoError(t, err)
	var out []string
	for _, m := range st.Members {
		if m.Voter {
			out = append(out, m.ID)
		}
	}
	return out
}

// TestMemberHealthAndDeadCleanup: a stopped member shows unreachable, in
// a follower's view too; with --cleanup-dead-after, a dead voter of four
// is removed, and a dead voter of three never is.
func TestMemberHealthAndDeadCleanup(t *testing.T) {
	t.Parallel()
	const after = 7 * time.Second // beyond the 5 s after which a member shows unreachable
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) { cfg.CleanupDeadAfter = after }})
	l := waitPools(t, c)
	ctx := ctxT(t, 60*time.Second)
	require.Eventually(t, func() bool {
		st, err := follower(c, l).Node.Cluster()
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if !m.Known || !m.Reachable || !m.Healthy || m.Version == "" || m.FeatureLevel != fsm.MaxFeatureLevel {
				return false
			}
		}
		return true
	}, 15*time.Second, 100*time.Millisecond, "every member healthy, as a follower asks the leader")

	// A fourth voter: joins as a non-voter, promoted once caught up.
	n3 := c.Add(nil)
	require.Eventually(t, func() bool { return len(voterIDs(t, c)) == 4 }, 20*time.Second, 100*time.Millisecond, "promoted")
	_, err := n3.Node.Allocate(ctx, "ip", "", "via-n3", 0, "")
	require.NoError(t, err)

	// One of four dies: unreachable, then removed (4 -> 3 keeps the floor).
	l = c.Leader()
	victim := follower(c, l)
	c.Kill(victim.Index)
	require.Eventually(t, func() bool {
		st, err := l.Node.Cluster()
		require.NoError(t, err)
		for _, m := range st.Members {
			if m.ID == victim.ID {
				return m.Known && !m.Reachable && !m.Healthy && m.LastContact > healthThresholdForTests
			}
		}
		return false
	}, 15*time.Second, 100*time.Millisecond, "the dead member shows unreachable")
	require.Eventually(t, func() bool { return len(voterIDs(t, c)) == 3 }, 20*time.Second, 200*time.Millisecond, "the dead voter is removed")
	assert.NotContains(t, voterIDs(t, c), victim.ID)
	_, inTable := c.Leader().Node.LocalState().Member(victim.ID)
	assert.False(t, inTable, "its member row goes too")

	// Another dies: three voters is the floor; it stays.
	l = c.Leader()
	second := follower(c, l)
	c.Kill(second.Index)
	time.Sleep(after + 4*time.Second)
	assert.Len(t, voterIDs(t, c), 3, "never below three voters")
	assert.Contains(t, voterIDs(t, c), second.ID)
	_, err = c.Leader().Node.Allocate(ctx, "ip", "", "two-of-three", 0, "")
	require.NoError(t, err, "the two live voters of three still commit")
}

// healthThresholdForTests is the 5 s after which the leader calls a
// member unreachable.
const healthThresholdForTests = 5 * time.Second

// TestNonvoterIsNotPromoted: a node that joins asking to stay a non-voter
// replicates the log and is never promoted; one that does not is.
func TestNonvoterIsNotPromoted(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 1, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	require.Eventually(t, func() bool { return levels(c)[0] == fsm.MaxFeatureLevel }, 10*time.Second, 20*time.Millisecond)
	kept := c.Add(func(cfg *node.Config) { cfg.Nonvoter = true })
	voter := c.Add(nil)
	require.Eventually(t, func() bool {
		ids := voterIDs(t, c)
		return len(ids) == 2 && ids[0] != kept.ID && ids[1] != kept.ID
	}, 20*time.Second, 100*time.Millisecond, "the other joiner is promoted")
	got, err := l.Node.Allocate(ctxT(t, 10*time.Second), "ip", "", "replicated", 0, "")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		a, err := kept.Node.Get(ctxT(t, time.Second), node.Stale, "ip", got[0].Value)
		return err == nil && a.Owner == "replicated"
	}, 10*time.Second, 50*time.Millisecond, "the non-voter replicates")
	time.Sleep(3 * time.Second) // several promotion rounds
	assert.NotContains(t, voterIDs(t, c), kept.ID)
	row, ok := l.Node.LocalState().Member(kept.ID)
	require.True(t, ok)
	assert.True(t, row.Nonvoter)
	_ = voter
}

// TestNonvoterJoinRefusedByOlderMember: a node that asks to stay a
// non-voter does not join through a member whose release cannot keep the
// mark (it would drop it, and the node would be promoted): it refuses to
// start, and the configuration is unchanged.
func TestNonvoterJoinRefusedByOlderMember(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 1, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) { cfg.MaxFeatureLevel = 1 }})
	l := waitPools(t, c)
	before, err := l.Node.Cluster()
	require.NoError(t, err)
	_, err = c.TryAdd(func(cfg *node.Config) { cfg.Nonvoter = true })
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--non-voter: the member at "+l.Addr)
	after, err := l.Node.Cluster()
	require.NoError(t, err)
	assert.Equal(t, membership(before), membership(after))
}

// TestScheduledBackupsWaitAfterRestart: a node restarted while its peers
// are down holds only its last snapshot in its state machine until a
// leader commits the rest of its log. Its scheduled backups wait for that:
// they used to back up the older state every interval, and pruning then
// deleted the backups that held the acknowledged allocations. Once a peer
// is back, backups resume with everything.
func TestScheduledBackupsWaitAfterRestart(t *testing.T) {
	t.Parallel()
	bdir := t.TempDir()
	var mu sync.Mutex
	var took []uint64
	backups := func() []uint64 { mu.Lock(); defer mu.Unlock(); return append([]uint64(nil), took...) }
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		if cfg.ID == "n0" {
			cfg.BackupDir, cfg.BackupInterval, cfg.BackupRetain = bdir, time.Second, 2
			cfg.OnBackup = func(r node.BackupResult) {
				mu.Lock()
				defer mu.Unlock()
				if r.Err == nil {
					took = append(took, r.Index)
				}
			}
		}
	}})
	l := waitPools(t, c)
	ctx := ctxT(t, 60*time.Second)
	for i := 0; i < 20; i++ {
		owner := fmt.Sprintf("acked-%d", i)
		_, err := l.Node.Allocate(ctx, "ip", "", owner, 0, owner)
		require.NoError(t, err)
	}
	want := l.Node.AppliedIndex()
	c.WaitApplied(want)
	require.Eventually(t, func() bool { b := backups(); return len(b) > 0 && b[len(b)-1] >= want },
		10*time.Second, 20*time.Millisecond, "n0 backs up what it applied")
	for _, m := range c.Members {
		c.Kill(m.Index)
	}
	mu.Lock()
	took = nil
	mu.Unlock()
	// A power cut; n0 comes back first, alone, for three intervals.
	c.Start(0)
	time.Sleep(3 * time.Second)
	assert.Empty(t, backups(), "no backup while n0 has applied less than its log held")
	best := uint64(0)
	files, err := filepath.Glob(filepath.Join(bdir, "rangealloc-n0-*.snap"))
	require.NoError(t, err)
	for _, p := range files {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		bk, err := fsm.ReadBackup(bytes.NewReader(b))
		require.NoError(t, err)
		best = max(best, bk.Index())
	}
	require.GreaterOrEqual(t, best, want, "a kept backup holds every acknowledged allocation")

	c.Start(1) // a majority again
	require.Eventually(t, func() bool { b := backups(); return len(b) > 0 && b[len(b)-1] >= want },
		20*time.Second, 50*time.Millisecond, "backups resume once n0 has applied its log")
}
