package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/testaddr"
	"github.com/rangealloc/rangealloc/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func freeAddr(t *testing.T) string { return testaddr.Loopback(t) }

func testConfig(t *testing.T, dir string) Config {
	cfg := DefaultConfig()
	cfg.DataDir, cfg.RaftAddr = dir, freeAddr(t)
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 150*time.Millisecond
	cfg.Pools = []PoolSpec{{Name: "clusterip-ipv4", Range: "10.96.0.0/12"}, {Name: "nodeport", Range: "30000-32767"}}
	cfg.LogStore = os.Getenv("RANGEALLOC_TEST_LOG_STORE") // "" (bolt) unless the run picks wal
	return cfg
}

func openReady(t *testing.T, cfg Config) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Open(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	require.NoError(t, n.WaitForLeader(ctx))
	require.Eventually(t, func() bool {
		ps, err := n.Pools(ctx, Linearizable)
		return err == nil && len(ps) == len(cfg.Pools)
	}, 10*time.Second, 10*time.Millisecond, "bootstrap pools")
	return n
}

func TestSingleNodeBootstrapAndRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	n := openReady(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := n.ID()
	require.NotEmpty(t, id, "an ID is generated")
	kept, err := os.ReadFile(filepath.Join(dir, "node-id"))
	require.NoError(t, err)
	assert.Equal(t, id, strings.TrimSpace(string(kept)), "and kept in the data directory")

	var acked []fsm.Allocation
	for i := 0; i < 20; i++ {
		a, err := n.Allocate(ctx, "nodeport", "", "svc", 0, "")
		require.NoError(t, err)
		acked = append(acked, a...)
	}
	require.NoError(t, n.Snapshot())
	more, err := n.Allocate(ctx, "clusterip-ipv4", "10.96.0.10", "default/dns", 0, "")
	require.NoError(t, err)
	acked = append(acked, more...)
	require.NoError(t, n.Close())

	cfg.ID = "" // read back from the data directory
	n2 := openReady(t, cfg)
	assert.Equal(t, id, n2.ID())
	for _, a := range acked {
		got, err := n2.Get(ctx, Linearizable, a.Pool, a.Value)
		require.NoError(t, err, "%s survives the restart", a.Value)
		assert.Equal(t, a, got)
	}
	pools, err := n2.Pools(ctx, Linearizable)
	require.NoError(t, err)
	require.Len(t, pools, 2, "the configured pools are not created twice")
}

func TestConfigValidate(t *testing.T) {
	base := DefaultConfig()
	base.DataDir, base.RaftAddr = "d", "127.0.0.1:1"
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no data dir", func(c *Config) { c.DataDir = "" }, "DataDir"},
		{"no raft addr", func(c *Config) { c.RaftAddr = "" }, "RaftAddr"},
		{"peers and join", func(c *Config) { c.Peers = []Peer{{ID: "a", RaftAddr: "x"}}; c.Join = []string{"y"} }, "exclude"},
		{"duplicate peer", func(c *Config) { c.Peers = []Peer{{ID: "a", RaftAddr: "x"}, {ID: "a", RaftAddr: "y"}} }, "twice"},
		{"bad pool name", func(c *Config) { c.Pools = []PoolSpec{{Name: "Bad", Range: "1-2"}} }, "invalid pool name"},
		{"pool range too large", func(c *Config) { c.Pools = []PoolSpec{{Name: "ip", Range: "10.96.0.0/8"}} }, `pool "ip": `},
		{"pool range backwards", func(c *Config) { c.Pools = []PoolSpec{{Name: "np", Range: "30000-20000"}} }, `pool "np": `},
		{"pools overlap", func(c *Config) {
			c.Pools = []PoolSpec{{Name: "a", Range: "10.96.0.0/16"}, {Name: "b", Range: "10.96.0.0/24"}}
		}, `pools "a" (10.96.0.0/16) and "b" (10.96.0.0/24) overlap`},
		{"lease above heartbeat", func(c *Config) { c.LeaderLeaseTimeout = 2 * c.HeartbeatTimeout }, "LeaderLeaseTimeout"},
		{"zero batch", func(c *Config) { c.MaxBatch = 0 }, "MaxBatch"},
		{"negative batch wait", func(c *Config) { c.BatchWait = -time.Millisecond }, "BatchWait is -1ms"},
		{"long ID", func(c *Config) { c.ID = strings.Repeat("n", fsm.MaxMemberID+1) }, "ID is 129 bytes long; at most 128"},
		{"long API address", func(c *Config) { c.APIAddr = strings.Repeat("a", fsm.MaxAddressLen+1) }, "APIAddr is 257 bytes long; at most 256"},
		{"restore-from with join", func(c *Config) { c.RestoreFrom, c.Join = "b.snap", []string{"y"} }, "founds a cluster alone"},
		{"restore-from with peers", func(c *Config) {
			c.ID, c.RestoreFrom, c.Peers = "a", "b.snap", []Peer{{ID: "a", RaftAddr: "x"}}
		}, "founds a cluster alone"},
		{"found-empty with join", func(c *Config) { c.FoundEmpty, c.Join = true, []string{"y"} }, "a node that joins founds nothing"},
		{"restore-from and found-empty", func(c *Config) { c.RestoreFrom, c.FoundEmpty = "b.snap", true }, "exclude each other"},
	}
	require.NoError(t, base.Validate())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			before := c
			err := c.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, before, c, "Validate does not change the config")
		})
	}
}

func TestNodeIDMismatchRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.ID = "alpha"
	n := openReady(t, cfg)
	require.NoError(t, n.Close())
	cfg.ID = "beta"
	_, err := Open(context.Background(), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"beta" does not match "alpha"`)
}

func TestBackupRestore(t *testing.T) {
	src := openReady(t, testConfig(t, t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := src.Allocate(ctx, "nodeport", "", "svc", 30, "")
	require.NoError(t, err)
	var backup bytes.Buffer
	require.NoError(t, src.Backup(ctx, &backup))

	dstDir := t.TempDir()
	dst := openReady(t, testConfig(t, dstDir))
	noTemp := func() {
		t.Helper()
		tmp, err := filepath.Glob(filepath.Join(dstDir, "restore-*.tmp"))
		require.NoError(t, err)
		assert.Empty(t, tmp, "a restore leaves no temp file")
	}
	_, err = dst.Allocate(ctx, "nodeport", "30000", "to-be-replaced", 0, "")
	require.NoError(t, err)

	bad := append([]byte(nil), backup.Bytes()...)
	bad[len(bad)/2] ^= 0xff
	err = dst.Restore(ctx, bytes.NewReader(bad), "")
	require.ErrorIs(t, err, ErrInvalidBackup)
	noTemp()
	got, err := dst.Get(ctx, Linearizable, "nodeport", "30000")
	require.NoError(t, err, "a refused backup changes nothing")
	assert.Equal(t, "to-be-replaced", got.Owner)

	require.NoError(t, dst.Restore(ctx, bytes.NewReader(backup.Bytes()), ""))
	noTemp()
	_, err = dst.Get(ctx, Linearizable, "nodeport", "30000")
	if !errors.Is(err, &fsm.Error{Code: fsm.CodeNotAllocated}) {
		got, _ := dst.Get(ctx, Linearizable, "nodeport", "30000")
		assert.Equal(t, "svc", got.Owner, "the restored state replaced the old one")
	}
	for _, v := range a {
		got, err := dst.Get(ctx, Linearizable, "nodeport", v.Value)
		require.NoError(t, err)
		assert.Equal(t, v, got)
	}
	more, err := dst.Allocate(ctx, "nodeport", "", "after-restore", 1, "")
	require.NoError(t, err, "writes go on after a restore")
	assert.Greater(t, more[0].Revision, a[0].Revision)
}

// TestRestoreRequestID: a restore retried under its request ID with the
// same backup restores nothing again, so what was written since stays; the
// ID with another backup, or with a write, is refused. Restores without an
// ID each restore.
func TestRestoreRequestID(t *testing.T) {
	src := openReady(t, testConfig(t, t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := src.Allocate(ctx, "nodeport", "30001", "in-backup", 0, "")
	require.NoError(t, err)
	var one, two bytes.Buffer
	require.NoError(t, src.Backup(ctx, &one))
	_, err = src.Allocate(ctx, "nodeport", "30002", "in-backup", 0, "")
	require.NoError(t, err)
	require.NoError(t, src.Backup(ctx, &two))

	dst := openReady(t, testConfig(t, t.TempDir()))
	held := func(value string) bool {
		t.Helper()
		_, err := dst.Get(ctx, Linearizable, "nodeport", value)
		if err != nil {
			require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeNotAllocated})
		}
		return err == nil
	}
	require.NoError(t, dst.Restore(ctx, bytes.NewReader(one.Bytes()), "restore-1"))
	assert.True(t, held("30001"), "restored")
	_, err = dst.Allocate(ctx, "nodeport", "30050", "after", 0, "")
	require.NoError(t, err)

	require.NoError(t, dst.Restore(ctx, bytes.NewReader(one.Bytes()), "restore-1"), "a retry answers what the first did")
	assert.True(t, held("30050"), "a retry restores nothing again: the write acknowledged since stays")
	err = dst.Restore(ctx, bytes.NewReader(two.Bytes()), "restore-1")
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeIdempotencyKeyReused}, "the ID with another backup")
	assert.False(t, held("30002"), "a refused restore changes nothing")
	_, err = dst.Allocate(ctx, "nodeport", "30060", "after", 0, "restore-1")
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeIdempotencyKeyReused}, "the ID with a write")

	// A backup that remembers the restore's ID (taken after it) restores
	// under that ID into a cluster that does not know it.
	var three bytes.Buffer
	require.NoError(t, dst.Backup(ctx, &three))
	other := openReady(t, testConfig(t, t.TempDir()))
	require.NoError(t, other.Restore(ctx, bytes.NewReader(three.Bytes()), "restore-1"))
	require.NoError(t, other.Restore(ctx, bytes.NewReader(three.Bytes()), "restore-1"))
	_, err = other.Get(ctx, Linearizable, "nodeport", "30050")
	require.NoError(t, err)

	for i := 0; i < 2; i++ {
		require.NoError(t, dst.Restore(ctx, bytes.NewReader(one.Bytes()), ""))
		assert.False(t, held("30050"), "a restore without an ID always restores")
		_, err = dst.Allocate(ctx, "nodeport", "30050", "after", 0, "")
		require.NoError(t, err)
	}
	err = dst.Restore(ctx, bytes.NewReader(one.Bytes()), strings.Repeat("k", fsm.MaxRequestID+1))
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeInvalidArgument})
	assert.True(t, held("30050"), "a refused restore changes nothing")
}

// TestRestartAfterNetworkPoolDeleted: before feature level 4, deleting
// an empty pool that the service network names left a state whose
// snapshot no node could load: the restart after a snapshot failed, as
// would a follower's catch-up by InstallSnapshot. Such a state now loads;
// from level 4 the deletion is refused.
func TestRestartAfterNetworkPoolDeleted(t *testing.T) {
	for _, level := range []int{3, fsm.MaxFeatureLevel} {
		t.Run(fmt.Sprint("level=", level), func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			cfg.MaxFeatureLevel = level
			n := openReady(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.Eventually(t, func() bool { return n.fsm.FeatureLevel() == level }, 10*time.Second, 10*time.Millisecond,
				"the new cluster takes its founder's level")
			require.NoError(t, n.SetServiceNetwork(ctx, fsm.ServiceNetwork{Families: []service.Family{service.IPv4},
				IPv4Pool: "clusterip-ipv4", NodePortPool: "nodeport"}, ""))
			held, err := n.Allocate(ctx, "clusterip-ipv4", "", "svc", 0, "")
			require.NoError(t, err)
			err = n.DeletePool(ctx, "nodeport", "")
			if level >= 4 {
				require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodePoolNotEmpty}, "the network names the pool")
			} else {
				require.NoError(t, err)
			}
			require.NoError(t, n.Snapshot())
			require.NoError(t, n.Close())

			cfg.ID = ""
			ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel2()
			n2, err := Open(ctx2, cfg)
			require.NoError(t, err, "the node starts from its snapshot")
			t.Cleanup(func() { _ = n2.Close() })
			require.NoError(t, n2.WaitForLeader(ctx2))
			got, err := n2.Get(ctx, Linearizable, "clusterip-ipv4", held[0].Value)
			require.NoError(t, err)
			assert.Equal(t, held[0], got)
		})
	}
}

// TestJoinRefusesABadMember: the leader checks a member where every way
// of adding one meets (memberChanges.add). The Join and AddMember calls
// forwarded by other nodes skipped Node.AddMember's checks: a member row
// with an API address too long for the member table was added to the Raft
// configuration, and only then refused by the state machine.
func TestJoinRefusesABadMember(t *testing.T) {
	a := openReady(t, testConfig(t, t.TempDir()))
	// b waits to join through an address where nobody answers; meanwhile
	// it answers probes, as a newcomer does.
	cfg := testConfig(t, t.TempDir())
	cfg.ID, cfg.Pools, cfg.Join = "b", nil, []string{"127.0.0.1:1"}
	bctx, stop := context.WithCancel(context.Background())
	opened := make(chan struct{})
	go func() {
		defer close(opened)
		if b, err := Open(bctx, cfg); err == nil {
			_ = b.Close()
		}
	}()
	t.Cleanup(func() { stop(); <-opened })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { _, err := a.probes.probe(ctx, cfg.RaftAddr); return err == nil }, 10*time.Second, 20*time.Millisecond)

	err := a.members.add(ctx, fsm.Member{ID: "b", RaftAddr: cfg.RaftAddr, APIAddr: strings.Repeat("a", fsm.MaxAddressLen+1)})
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeInvalidArgument})
	assert.Contains(t, err.Error(), "member addresses are at most")
	f := a.raft.GetConfiguration()
	require.NoError(t, f.Error())
	assert.Len(t, f.Configuration().Servers, 1, "the configuration is unchanged")
}

// TestProbeNamesALeaderOnceReady: a new leader's commit index may be
// below what its predecessor committed until it has applied an entry of
// its term; a probe says it leads only from then on, so that a follower
// never takes that commit index as the leader's word on readiness.
func TestProbeNamesALeaderOnceReady(t *testing.T) {
	n := openReady(t, testConfig(t, t.TempDir()))
	require.True(t, n.probeReply().Leader)
	n.leader.ready.Store(false)
	assert.False(t, n.probeReply().Leader, "a leader that has not applied an entry of its term")
	n.leader.ready.Store(true)
	assert.True(t, n.probeReply().Leader)
}

// TestLargeAnswerKeepsSnapshots: an allocation of 4,096 values with an
// owner of 253 bytes answers more than a snapshot keeps of a remembered
// result. It used to be applied, and every snapshot and backup failed
// after it. It is refused: by the state machine from feature level 4, by
// the proposer below; snapshots and backups go on.
func TestLargeAnswerKeepsSnapshots(t *testing.T) {
	for _, level := range []int{3, fsm.MaxFeatureLevel} {
		t.Run(fmt.Sprint("level=", level), func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			cfg.MaxFeatureLevel = level
			cfg.Pools = []PoolSpec{{Name: "big", Range: "10.128.0.0/12"}}
			n := openReady(t, cfg)
			require.Eventually(t, func() bool { return n.fsm.FeatureLevel() == level }, 10*time.Second, 10*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := n.Allocate(ctx, "big", "", strings.Repeat("o", fsm.MaxOwnerLen), fsm.MaxCount, "big-count")
			require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeInvalidArgument})
			got, err := n.Allocate(ctx, "big", "", "svc", fsm.MaxCount, "")
			require.NoError(t, err)
			require.Len(t, got, fsm.MaxCount)
			require.NoError(t, n.Snapshot())
			var b bytes.Buffer
			require.NoError(t, n.Backup(ctx, &b))
		})
	}
}

// TestCreatePoolRetryAnswersTheFirstAnswer: a retry of a pool's creation
// under its request ID answers as the first did, whatever happened to the
// pool since. The answer used to be read afresh after the write: deleted
// meanwhile, the retry answered PoolNotFound, and a read that failed after
// the write applied answered NoLeader (nothing applied).
func TestCreatePoolRetryAnswersTheFirstAnswer(t *testing.T) {
	n := openReady(t, testConfig(t, t.TempDir()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, created, err := n.CreatePool(ctx, "extra", "10.200.0.0/24", "create-extra")
	require.NoError(t, err)
	require.True(t, created)
	assert.Equal(t, "extra", first.Name)
	assert.Equal(t, 254, first.Range.Size(), "a /24 without its network and broadcast addresses")
	require.NoError(t, n.DeletePool(ctx, "extra", "delete-extra"))
	again, created, err := n.CreatePool(ctx, "extra", "10.200.0.0/24", "create-extra")
	require.NoError(t, err, "the retry answers the first answer")
	assert.True(t, created)
	assert.Equal(t, first, again)
	_, err = n.Pool(ctx, Linearizable, "extra")
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodePoolNotFound}, "and creates nothing again")
}

// TestDataDirPrivate: a data dir the node creates is 0700 and the files it
// writes there are 0600, since its snapshots and log hold every owner and
// Service. A data dir an operator made readable to others is kept as it
// is (the node does not change what it did not create), with a warning
// that names it and the fix.
func TestDataDirPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	n := openReady(t, testConfig(t, dir))
	_, err := n.Allocate(context.Background(), "nodeport", "", "svc", 0, "")
	require.NoError(t, err)
	require.NoError(t, n.Close())
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "a data dir the node creates is private")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	files := 0
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "%s: only the node's user reads it", e.Name())
		files++
	}
	assert.GreaterOrEqual(t, files, 4, "node-id, cluster-id, log-store, state and the log store: %v", entries)

	open := filepath.Join(t.TempDir(), "open")
	require.NoError(t, os.Mkdir(open, 0o755))
	require.NoError(t, os.Chmod(open, 0o755)) // whatever the umask
	var logs bytes.Buffer
	cfg := testConfig(t, open)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	openReady(t, cfg)
	fi, err = os.Stat(open)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), "an operator's data dir keeps its mode")
	assert.Contains(t, logs.String(), "data dir is readable by other users")
	assert.Contains(t, logs.String(), "chmod 700 "+open)
}
