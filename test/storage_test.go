package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFoundingInAnyOrder: the nodes of a new cluster, started in any
// order with delays between them, form one cluster, and none is refused.
func TestFoundingInAnyOrder(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools,
		Delays: []time.Duration{1500 * time.Millisecond, 0, 700 * time.Millisecond}})
	l := waitPools(t, c)
	st, err := l.Node.Cluster()
	require.NoError(t, err)
	require.NotEmpty(t, st.ClusterID, "the first leader named the cluster")
	for _, m := range st.Members {
		assert.True(t, m.Voter, "founder %s is a voter", m.ID)
	}
	for _, m := range c.Members {
		require.Eventually(t, func() bool { return m.Node.ClusterID() == st.ClusterID }, 10*time.Second, 20*time.Millisecond,
			"%s learned the cluster ID", m.ID)
	}
}

// TestWipedVoterRefused is the re-imaged node: three nodes, B killed,
// 200 allocations acknowledged by the leader L and follower A, L and A
// killed, A's data directory emptied, A and B started with their usual
// flags. A must refuse to start (it used to bootstrap a new log, let B win
// an election, and erase the 200 values when L came back); the
// acknowledged values survive; then the runbook brings A back.
func TestWipedVoterRefused(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, wipedVoterRefused)
}

func wipedVoterRefused(t *testing.T, store string) {
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, LogStore: store})
	l := waitPools(t, c)
	var a, b *cluster.Member
	for _, m := range c.Members {
		switch {
		case m == l:
		case b == nil:
			b = m
		default:
			a = m
		}
	}
	c.Kill(b.Index)
	ctx := ctxT(t, 60*time.Second)
	acked := allocateAcked(ctx, t, l.Node, 200)
	c.Kill(l.Index)
	c.Kill(a.Index)
	c.Wipe(a.Index)
	c.Start(b.Index)
	err := c.TryStart(a.Index)
	require.ErrorIs(t, err, node.ErrStorage, "the wiped voter refuses to start")
	assert.Contains(t, err.Error(), "is a voter of cluster")
	c.Start(l.Index)
	nl := c.LeaderAmong(l.Index, b.Index)
	requireAcked(ctx, t, nl.Node, acked)

	// The runbook: remove the member, empty its directory, join it again.
	require.NoError(t, nl.Node.RemoveMember(ctx, a.ID, ""))
	c.Wipe(a.Index)
	cfg := c.Config(a.Index)
	cfg.Peers, cfg.Join = nil, []string{nl.Addr}
	c.SetConfig(a.Index, cfg)
	c.Start(a.Index)
	require.Eventually(t, func() bool {
		st, err := nl.Node.Cluster()
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if m.ID == a.ID {
				return m.Voter
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "the rejoined node is promoted to voter once it caught up")
	got, err := a.Node.Allocate(ctx, "ip", "", "after-rejoin", 0, "")
	require.NoError(t, err)
	assert.NotContains(t, acked, got[0].Value, "a value acknowledged before is not handed out again")
}

// TestDiskLostRightAfterFirstEntries: a founder whose disk is lost as
// soon as the cluster formed (it may have acknowledged its first entries)
// refuses to start, and so does one that comes back with --join.
func TestDiskLostRightAfterFirstEntries(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, diskLostRightAfterFirstEntries)
}

func diskLostRightAfterFirstEntries(t *testing.T, store string) {
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, LogStore: store})
	c.Kill(1)
	c.Wipe(1)
	err := c.TryStart(1)
	require.ErrorIs(t, err, node.ErrStorage, "with --peers")
	c.Wipe(1)
	cfg := c.Config(1)
	cfg.Peers, cfg.Join = nil, []string{c.Members[0].Addr, c.Members[2].Addr}
	c.SetConfig(1, cfg)
	err = c.TryStart(1)
	require.ErrorIs(t, err, node.ErrStorage, "with --join")
	assert.Contains(t, err.Error(), "its data is gone")
	l := waitPools(t, c)
	_, err = l.Node.Allocate(ctxT(t, 10*time.Second), "ip", "", "two-left", 0, "")
	require.NoError(t, err, "the two others go on")
}

// TestMistakenJoin: a node that started on its own (and so founded a
// cluster of its own) is not added: 409 NodeNotEmpty, membership
// unchanged, and no Raft traffic crosses between the two clusters.
func TestMistakenJoin(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	bare := cluster.New(t, 1, cluster.Options{Pools: testPools})
	other := waitPools(t, bare)
	require.Eventually(t, func() bool { return other.Node.ClusterID() != "" }, 10*time.Second, 20*time.Millisecond)
	ctx := ctxT(t, 10*time.Second)
	before, err := l.Node.Cluster()
	require.NoError(t, err)
	f := follower(c, l)
	err = f.Node.AddMember(ctx, fsm.Member{ID: other.ID, RaftAddr: other.Addr, APIAddr: "api-bare"})
	var fe *fsm.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, fsm.CodeNodeNotEmpty, fe.Code)
	require.NotNil(t, fe.Node)
	assert.Equal(t, other.Node.ClusterID(), fe.Node.ClusterID)
	assert.Positive(t, fe.Node.LastIndex)
	// A join that names one node and gives another's address.
	err = l.Node.AddMember(ctx, fsm.Member{ID: "n9", RaftAddr: f.Addr})
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, fsm.CodeInvalidArgument, fe.Code)
	assert.Contains(t, fe.Message, `is "`+f.ID+`", not "n9"`)
	after, err := l.Node.Cluster()
	require.NoError(t, err)
	assert.Equal(t, membership(before), membership(after), "membership unchanged")
	assert.True(t, other.Node.IsLeader(), "the bare node still leads its own cluster")
	for _, m := range l.Node.LocalState().Members() {
		assert.NotEqual(t, other.Addr, m.RaftAddr, "no member row for it")
	}
}

// membership is a cluster status's members without their health, which
// moves from one reading to the next.
func membership(st node.ClusterStatus) []string {
	var out []string
	for _, m := range st.Members {
		out = append(out, fmt.Sprintf("%s raft=%s api=%s voter=%t leader=%t", m.ID, m.RaftAddr, m.APIAddr, m.Voter, m.Leader))
	}
	return out
}

// TestReadiness: a restarted follower is not ready while it has not
// applied the leader's commit index, whatever its own Raft believes.
func TestReadiness(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	f := follower(c, l)
	require.Eventually(t, func() bool { return f.Node.Readiness().Ready }, 10*time.Second, 20*time.Millisecond)
	c.Kill(f.Index)
	ctx := ctxT(t, 30*time.Second)
	// 300 entries, more than Raft hands the state machine in one batch (its
	// MaxAppendEntries, 256 in node.go): the state machine stalls after its
	// first batch, so it must stall short of the leader's commit index.
	// With fewer, the whole catch-up could arrive and apply as one batch,
	// and the node would rightly be ready.
	for i := 0; i < 150; i++ {
		a, err := l.Node.Allocate(ctx, "port", "", "while-down", 0, "")
		require.NoError(t, err)
		_, err = l.Node.Release(ctx, "port", a[0].Value, "while-down", "")
		require.NoError(t, err)
	}
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the cluster's own cleanup halts the node
	cfg := c.Config(f.Index)
	cfg.OnApply = func(int, []*fsm.Result) { <-hold } // the restarted state machine stalls after its first batch
	c.SetConfig(f.Index, cfg)
	c.Start(f.Index)
	if !assert.Eventually(t, func() bool {
		r := f.Node.Readiness()
		return !r.Ready && r.Reason == node.ReasonCatchingUp && strings.Contains(r.Detail, "behind the leader's commit index")
	}, 10*time.Second, 10*time.Millisecond) {
		t.Fatalf("not catching up once it heard the leader: %+v, applied index %d", f.Node.Readiness(), f.Node.AppliedIndex())
	}
	require.Never(t, func() bool { return f.Node.Readiness().Ready }, 1500*time.Millisecond, 10*time.Millisecond,
		"not ready while its state machine has not applied the leader's commit index")
	release()
	require.Eventually(t, func() bool { return f.Node.Readiness().Ready }, 10*time.Second, 20*time.Millisecond)
}

// TestFoundingResumesAfterCrash: a founder that crashed after it saw every
// peer without state (its founding marker) waits for its peers to be
// ready before it bootstraps: bootstrapping at once would show the others,
// which have not seen every peer yet, a peer with state, and they would
// refuse to start.
func TestFoundingResumesAfterCrash(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools,
		Delays: []time.Duration{0, time.Second, 1200 * time.Millisecond},
		Tune: func(cfg *node.Config) {
			if cfg.ID == "n0" {
				require.NoError(t, os.MkdirAll(cfg.DataDir, 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(cfg.DataDir, "founding"), []byte("ready\n"), 0o600))
			}
		}})
	l := waitPools(t, c)
	st, err := l.Node.Cluster()
	require.NoError(t, err)
	assert.Len(t, st.Members, 3)
}

// TestLoneRestartNotCaptured: a former voter whose directory was emptied,
// restarted alone (no --peers, no --join), founds a cluster of its own:
// the old cluster's leader, which still counts it as a voter and keeps
// dialing it, must not take it over (it did while the new node had no
// cluster ID yet: it became a follower of the old leader with a
// one-voter configuration, and later acknowledged writes on its own).
// With keepID, the operator removed the log store and the state marker
// but left cluster-id: the node bootstrapped alone under the old cluster's
// ID, and so served a second, empty copy of that cluster under its name.
func TestLoneRestartNotCaptured(t *testing.T) {
	t.Parallel()
	for _, keepID := range []bool{false, true} {
		t.Run(fmt.Sprintf("keepID=%v", keepID), func(t *testing.T) {
			c := cluster.New(t, 3, cluster.Options{Pools: testPools})
			l := waitPools(t, c)
			ctx := ctxT(t, 30*time.Second)
			before, err := l.Node.Allocate(ctx, "ip", "", "real-cluster", 0, "")
			require.NoError(t, err)
			f := follower(c, l)
			c.Kill(f.Index)
			cfg := c.Config(f.Index)
			if keepID {
				emptyButClusterID(t, cfg.DataDir)
			} else {
				c.Wipe(f.Index)
			}
			cfg.Peers = nil
			c.SetConfig(f.Index, cfg)
			c.Start(f.Index)
			require.NotEmpty(t, f.Node.ClusterID(), "a lone node knows its cluster before its Raft port opens")
			assert.NotEqual(t, l.Node.ClusterID(), f.Node.ClusterID())
			time.Sleep(3 * time.Second) // the old leader keeps dialing its former voter
			assert.NotEqual(t, l.Node.ClusterID(), f.Node.ClusterID(), "not taken over")
			_, err = f.Node.Get(ctx, node.Stale, "ip", before[0].Value)
			assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeNotAllocated}, "the old cluster's log did not reach it")
			st, err := f.Node.Cluster()
			require.NoError(t, err)
			require.Len(t, st.Members, 1)
			assert.Equal(t, f.ID, st.Members[0].ID)
			assert.True(t, f.Node.IsLeader(), "it leads its own cluster")
			c.Kill(f.Index) // two clusters now: EnsureSame compares the old one's
		})
	}
}

// emptyButClusterID removes everything in a data directory but its
// cluster-id file.
func emptyButClusterID(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	kept := false
	for _, e := range entries {
		if e.Name() == "cluster-id" {
			kept = true
			continue
		}
		require.NoError(t, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	require.True(t, kept, "the directory had a cluster-id file")
}

// forEachLogStore runs test once per Raft log store, as subtests named
// after the store.
func forEachLogStore(t *testing.T, test func(t *testing.T, store string)) {
	for _, store := range []string{node.LogStoreBolt, node.LogStoreWAL} {
		t.Run(store, func(t *testing.T) { test(t, store) })
	}
}

// TestLeftoverFoundingMarkerRemoved: a crash between bootstrap and the
// removal of the founding marker leaves the marker beside a directory
// with state. The node removes it when it next starts: left there, a
// later loss of raft.db and the state marker let the node skip the
// question that finds its peers with state, and bootstrap an empty voter
// into the cluster.
func TestLeftoverFoundingMarkerRemoved(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	f := follower(c, l)
	ctx := ctxT(t, 30*time.Second)
	_, err := l.Node.Allocate(ctx, "ip", "", "acked", 0, "k")
	require.NoError(t, err)
	c.Kill(f.Index)
	marker := filepath.Join(c.Config(f.Index).DataDir, "founding")
	require.NoError(t, os.WriteFile(marker, []byte("00000000-0000-4000-8000-000000000000\n"), 0o600))
	c.Start(f.Index)
	_, err = os.Stat(marker)
	require.ErrorIs(t, err, os.ErrNotExist, "a node with state removes a founding marker left behind")
	c.Kill(f.Index)
	emptyButClusterID(t, c.Config(f.Index).DataDir)
	err = c.TryStart(f.Index)
	require.ErrorIs(t, err, node.ErrStorage, "a voter whose data is gone refuses to start")
}

// TestLoneFlagsOnAVoterWarn: a voter of a cluster of three started with
// neither peers nor join would, once its data directory is lost, found a
// new empty cluster rather than refuse to start; it says so when it
// starts. With its peers it says nothing.
func TestLoneFlagsOnAVoterWarn(t *testing.T) {
	t.Parallel()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	f := follower(c, l)
	const warning = "runs without --join or --peers, but is one of several voters"
	for _, lone := range []bool{false, true} {
		c.Kill(f.Index)
		var logs lockedBuffer
		cfg := c.Config(f.Index)
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logs})
		if lone {
			cfg.Peers = nil
		}
		c.SetConfig(f.Index, cfg)
		c.Start(f.Index)
		if lone {
			assert.Contains(t, logs.String(), warning)
		} else {
			assert.NotContains(t, logs.String(), warning)
		}
	}
}

// TestWholeClusterLost is a re-imaged three-node appliance: every data
// directory lost, n0's backup directory kept (n1 and n2 kept none).
// Started with their usual --peers, the nodes see no state anywhere,
// which is also what a new cluster looks like; n0's backups say
// otherwise, and no node founds a new, empty cluster, which would hand out
// the values its clients hold. Then the runbook: n0 founds the cluster
// alone from its newest backup. n1 and n2, restarted with --peers before
// their flags were changed (n2 said ready to found before), refuse: taking
// n0's cluster for the one their founding made, they would bootstrap its
// voter set and, two of three, elect a leader of an empty log. With
// --join they become members, and every acknowledged value keeps its
// owner.
func TestWholeClusterLost(t *testing.T) {
	t.Parallel()
	bdir := t.TempDir()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		if cfg.ID == "n0" {
			cfg.BackupDir, cfg.BackupInterval = filepath.Join(bdir, cfg.ID), time.Second
		}
	}})
	l := waitPools(t, c)
	ctx := ctxT(t, 120*time.Second)
	acked := allocateAcked(ctx, t, l.Node, 20)
	applied := l.Node.AppliedIndex()
	var newest string
	require.Eventually(t, func() bool {
		var index uint64
		_, newest, index = scheduledBackups(t, c.Config(0).BackupDir)
		return index >= applied
	}, 30*time.Second, 100*time.Millisecond, "n0's backups hold the allocations")
	for _, m := range c.Members {
		c.Kill(m.Index)
		c.Wipe(m.Index)
	}

	errs := c.TryStartAll(0, 1, 2)
	require.ErrorIs(t, errs[0], node.ErrLostBesideBackups, "n0 refuses to found")
	assert.Contains(t, errs[0].Error(), "the cluster's data was lost on every node")
	assert.Contains(t, errs[0].Error(), newest)
	for _, err := range errs[1:] {
		require.ErrorContains(t, err, "still waiting for peers", "n1 and n2 wait for n0")
	}

	cfg := c.Config(0)
	cfg.Peers, cfg.RestoreFrom = nil, newest
	c.SetConfig(0, cfg)
	c.Start(0)
	// n1 and n2 may have seen n0 without state before it refused, and said
	// they were ready: make sure both did (their founding markers, which a
	// ready founder keeps), the case where two empty founders are a
	// majority of the voter set they would bootstrap.
	for _, i := range []int{1, 2} {
		marker := filepath.Join(c.Members[i].DataDir, "founding")
		require.NoError(t, os.WriteFile(marker, []byte("33333333-3333-4333-8333-33333333333"+fmt.Sprint(i)+"\n"), 0o600))
	}
	for i, err := range c.TryStartAll(1, 2) {
		require.Error(t, err, "n%d, restarted with --peers, founds nothing", i+1)
		assert.Contains(t, err.Error(), "is not one of its voters: start it with --join", "n%d", i+1)
	}
	for _, i := range []int{1, 2} {
		cfg := c.Config(i)
		cfg.Peers, cfg.Join = nil, []string{c.Members[0].Addr}
		c.SetConfig(i, cfg)
		c.Start(i)
		assert.NoFileExists(t, filepath.Join(c.Members[i].DataDir, "founding"),
			"n%d: a founding marker outliving the join would skip the questions after a later loss", i)
	}
	require.Eventually(t, func() bool {
		st, err := c.Members[0].Node.Cluster()
		if err != nil {
			return false
		}
		voters := 0
		for _, m := range st.Members {
			if m.Voter {
				voters++
			}
		}
		return voters == 3
	}, 30*time.Second, 50*time.Millisecond, "the two who joined are promoted")
	nl := c.Leader()
	requireAcked(ctx, t, nl.Node, acked)
	for i := 0; i < 20; i++ {
		got, err := c.Members[i%3].Node.Allocate(ctx, "ip", "", "after", 0, "")
		require.NoError(t, err)
		assert.NotContains(t, acked, got[0].Value, "a value acknowledged before the loss is not handed out again")
	}
}

// TestWholeClusterFoundsEmptyOnPurpose: with --found-empty, the nodes of
// a cluster whose every data directory was lost, backups kept, found a
// new, empty cluster (the machines put to a new use).
func TestWholeClusterFoundsEmptyOnPurpose(t *testing.T) {
	t.Parallel()
	bdir := t.TempDir()
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		cfg.BackupDir, cfg.BackupInterval = filepath.Join(bdir, cfg.ID), time.Second
	}})
	l := waitPools(t, c)
	old := l.Node.ClusterID()
	got, err := l.Node.Allocate(ctxT(t, 10*time.Second), "ip", "", "old", 0, "")
	require.NoError(t, err)
	applied := l.Node.AppliedIndex()
	require.Eventually(t, func() bool {
		for _, m := range c.Members {
			if _, _, index := scheduledBackups(t, c.Config(m.Index).BackupDir); index < applied {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "every node took a backup")
	for _, m := range c.Members {
		c.Kill(m.Index)
		c.Wipe(m.Index)
		cfg := c.Config(m.Index)
		cfg.FoundEmpty = true
		c.SetConfig(m.Index, cfg)
	}
	for _, err := range c.TryStartAll(0, 1, 2) {
		require.NoError(t, err)
	}
	nl := waitPools(t, c)
	assert.NotEqual(t, old, nl.Node.ClusterID(), "a new cluster")
	_, err = nl.Node.Get(ctxT(t, 10*time.Second), node.Linearizable, "ip", got[0].Value)
	require.Error(t, err, "the new cluster is empty")
	var fe *fsm.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, fsm.CodeNotAllocated, fe.Code)
}

// allocateAcked allocates n dynamic values of pool "ip" through nd, each
// acknowledged, under owners of their own, and returns value → owner.
func allocateAcked(ctx context.Context, t *testing.T, nd *node.Node, n int) map[string]string {
	t.Helper()
	acked := map[string]string{}
	for i := 0; i < n; i++ {
		owner := fmt.Sprintf("acked-%d", i)
		got, err := nd.Allocate(ctx, "ip", "", owner, 0, owner)
		require.NoError(t, err)
		acked[got[0].Value] = owner
	}
	return acked
}

// requireAcked checks, with linearizable reads through nd, that every
// acknowledged value still has its owner.
func requireAcked(ctx context.Context, t *testing.T, nd *node.Node, acked map[string]string) {
	t.Helper()
	for v, owner := range acked {
		got, err := nd.Get(ctx, node.Linearizable, "ip", v)
		require.NoError(t, err, "acknowledged %s", v)
		assert.Equal(t, owner, got.Owner, "acknowledged %s", v)
	}
}
