package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/storage"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/durable"
	"github.com/rangealloc/rangealloc/snapshot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lostLoneNode runs a lone node with scheduled backups, allocates, waits
// for a backup that holds every allocation, and then loses the node's
// data directory. It returns the node's config, the allocations, and that
// backup.
func lostLoneNode(t *testing.T) (Config, []fsm.Allocation, string) {
	t.Helper()
	cfg := testConfig(t, filepath.Join(t.TempDir(), "data"))
	cfg.BackupDir, cfg.BackupInterval, cfg.BackupRetain = filepath.Join(t.TempDir(), "backups"), time.Second, 3
	results := make(chan BackupResult, 64)
	cfg.OnBackup = func(r BackupResult) { results <- r }
	n := openReady(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var acked []fsm.Allocation
	for i := 0; i < 10; i++ {
		a, err := n.Allocate(ctx, "nodeport", "", "svc", 0, "")
		require.NoError(t, err)
		acked = append(acked, a...)
	}
	applied := n.AppliedIndex()
	var backup string
	for backup == "" {
		select {
		case r := <-results:
			require.NoError(t, r.Err)
			if r.Index >= applied {
				backup = r.Path
			}
		case <-ctx.Done():
			t.Fatal("no backup holds the allocations")
		}
	}
	require.NoError(t, n.Close())
	require.NoError(t, os.RemoveAll(cfg.DataDir), "the disk is lost")
	cfg.OnBackup = nil
	return cfg, acked, backup
}

// TestLoneNodeLostDiskRefusesToFoundEmpty: a lone node whose data
// directory was lost, while its backup directory was not, refuses to
// found a new, empty cluster, which would hand out values its clients
// hold. It names the newest backup and the ways out, and founds nothing.
func TestLoneNodeLostDiskRefusesToFoundEmpty(t *testing.T) {
	cfg, acked, backup := lostLoneNode(t)
	newest, count, err := newestBackup(cfg.BackupDir)
	require.NoError(t, err)
	require.Positive(t, count)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Open(ctx, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refusing to start")
	assert.Contains(t, err.Error(), "this node's data was lost")
	assert.Contains(t, err.Error(), "--restore-from "+newest)
	assert.Contains(t, err.Error(), "--found-empty")
	assert.GreaterOrEqual(t, filepath.Base(newest), filepath.Base(backup), "the newest backup is named")

	// Refused again: nothing was founded by the refusal.
	_, err = Open(ctx, cfg)
	require.ErrorContains(t, err, "this node's data was lost")

	// --found-empty founds an empty cluster, as asked.
	empty := cfg
	empty.FoundEmpty = true
	n := openReady(t, empty)
	for _, a := range acked {
		_, err := n.Get(ctx, Linearizable, a.Pool, a.Value)
		require.Error(t, err, "%s: an empty cluster", a.Value)
	}
}

// TestLoneNodeFoundsFromBackup: with RestoreFrom, a lone node without
// state founds its cluster from the backup, and Open returns only once
// the backup is restored: the first read sees every allocation the backup
// holds. A restart with the setting left in place restores nothing again.
func TestLoneNodeFoundsFromBackup(t *testing.T) {
	cfg, acked, backup := lostLoneNode(t)
	cfg.RestoreFrom = backup
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := openHolding(ctx, t, cfg, acked, "restored before Open returned")
	_, err := os.Stat(filepath.Join(cfg.DataDir, restorePendingFile))
	assert.ErrorIs(t, err, os.ErrNotExist, "the founding is done")
	requireFounded(t, n)
	svc := &rpcService{n: n}
	assert.Nil(t, svc.member(), "forwarded calls are served once the founding is done")
	n.founder.restoring.Store(true)
	n.life.p.Store(uint32(phaseRestoring)) // as between the founding and the restore
	e := svc.member()
	require.NotNil(t, e, "no forwarded read or write reaches the state a founding restore replaces")
	assert.True(t, e.NotLeader, "a refusal callers retry: nothing was applied")
	n.life.p.Store(uint32(phaseServing))
	n.founder.restoring.Store(false)

	later, err := n.Allocate(ctx, "nodeport", "", "after", 0, "")
	require.NoError(t, err)
	require.NoError(t, n.Close())
	// RestoreFrom still set, as a unit file would leave it, and the file
	// moved away since: a node with state never reads it, so neither
	// restores it again nor fails to start for want of it.
	require.NoError(t, os.Rename(backup, backup+".moved"))
	n2 := openHolding(ctx, t, cfg, append(acked, later...), "a node with state does not restore again")
	require.NoError(t, n2.Close())
	require.NoError(t, os.Rename(backup+".moved", backup))

	// A crash after the restore was applied and before the marker went:
	// the restore is asked again under its request ID, and answered
	// without restoring over what was written since.
	b, err := readBackupFile(backup)
	require.NoError(t, err)
	require.NoError(t, durable.WriteFile(filepath.Join(cfg.DataDir, restorePendingFile),
		[]byte(fmt.Sprintf("%016x %s\n", b.Fingerprint(), backup)), 0o600))
	openHolding(ctx, t, cfg, append(acked, later...), "the restore is not applied twice")
	_, err = os.Stat(filepath.Join(cfg.DataDir, restorePendingFile))
	assert.ErrorIs(t, err, os.ErrNotExist, "the founding is done")
}

// TestLoneNodeFoundingInterrupted: a node that founded its cluster from a
// backup and stopped before the restore refuses to start without the
// backup, and with it finishes the restore.
func TestLoneNodeFoundingInterrupted(t *testing.T) {
	cfg, acked, backup := lostLoneNode(t)
	cfg.RestoreFrom = backup
	// Stop the founding between the founding and the restore: the restore
	// waits for a leader, which a lone node elects after its heartbeat
	// timeout; the pending marker is written before the founding.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	founding, stop := context.WithCancel(ctx)
	go func() {
		for founding.Err() == nil {
			if _, err := os.Stat(filepath.Join(cfg.DataDir, storage.MarkerFile)); err == nil {
				stop()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if n, err := Open(founding, cfg); err == nil {
		_ = n.Close()
		t.Fatal("the founding was not stopped between its bootstrap and its restore")
	}
	require.FileExists(t, filepath.Join(cfg.DataDir, restorePendingFile))

	without := cfg
	without.RestoreFrom = ""
	_, err := Open(ctx, without)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "stopped before restoring it")
	assert.Contains(t, err.Error(), "--restore-from "+backup)

	other := filepath.Join(t.TempDir(), "other.snap")
	var buf bytes.Buffer
	require.NoError(t, fsm.New(hclog.NewNullLogger()).WriteBackup(&buf), "a valid backup of another state")
	require.NoError(t, os.WriteFile(other, buf.Bytes(), 0o600))
	wrong := cfg
	wrong.RestoreFrom = other
	_, err = Open(ctx, wrong)
	require.ErrorContains(t, err, "is not the backup this node founded its cluster from")

	n := openHolding(ctx, t, cfg, acked, "the restore finished")
	requireFounded(t, n)
	_, err = os.Stat(filepath.Join(cfg.DataDir, restorePendingFile))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestRestoreFromInvalid: a backup that is not one refuses to start,
// naming the file, and founds nothing.
func TestRestoreFromInvalid(t *testing.T) {
	cfg, _, backup := lostLoneNode(t)
	bad := filepath.Join(t.TempDir(), "bad.snap")
	require.NoError(t, os.WriteFile(bad, []byte("not a backup"), 0o600))
	cfg.RestoreFrom = bad
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Open(ctx, cfg)
	require.ErrorIs(t, err, ErrInvalidBackup)
	assert.Contains(t, err.Error(), bad)
	cfg.RestoreFrom = filepath.Join(t.TempDir(), "missing.snap")
	_, err = Open(ctx, cfg)
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "--restore-from")
	cfg.RestoreFrom = backup
	n := openReady(t, cfg)
	require.NotEmpty(t, n.ClusterID())
}

// openHolding opens a node and requires it to hold every allocation of
// acked, with its owner, from its first read.
func openHolding(ctx context.Context, t *testing.T, cfg Config, acked []fsm.Allocation, why string) *Node {
	t.Helper()
	n, err := Open(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	for _, a := range acked {
		got, err := n.Get(ctx, Linearizable, a.Pool, a.Value)
		require.NoError(t, err, "%s: %s", a.Value, why)
		assert.Equal(t, a.Owner, got.Owner, "%s: %s", a.Value, why)
	}
	return n
}

// requireFounded: a cluster founded from a backup holds what a founding
// writes (its ID, this node's member row, this release's level), which
// the restore keeps.
func requireFounded(t *testing.T, n *Node) {
	t.Helper()
	assert.NotEmpty(t, n.fsm.ClusterID(), "the replicated cluster ID")
	assert.Equal(t, n.ClusterID(), n.fsm.ClusterID())
	_, ok := n.fsm.Member(n.ID())
	assert.True(t, ok, "this node's member row")
	assert.Equal(t, fsm.MaxFeatureLevel, n.fsm.FeatureLevel(), "the founding's level")
}

// TestRestoreFromNotOlderThanBackups: a backup named to found from is
// refused when the backup directory holds a newer one (a flag left in
// place after an earlier founding, met by a second loss), by the time in
// the names, unless that newer one is of the same cluster and holds no
// more (a node that lagged, whose later backups hold less than another
// node's earlier one); the newest, or a file not named as a scheduled
// backup, is taken.
func TestRestoreFromNotOlderThanBackups(t *testing.T) {
	dir := t.TempDir()
	write := func(name, cluster string, index uint64) (string, *fsm.Backup) {
		t.Helper()
		path := filepath.Join(dir, name)
		var buf bytes.Buffer
		require.NoError(t, snapshot.Write(&buf, &snapshot.State{Index: index, Term: 1, ClusterID: cluster}))
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
		b, err := readBackupFile(path)
		require.NoError(t, err)
		return path, b
	}
	x, y := "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"
	older, ob := write("rangealloc-n1-20260301T120000.000Z-4711.snap", x, 4711)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o600))
	assert.NoError(t, notOlderThanBackups(older, ob, dir), "the newest itself")

	// Written by the same node later, while it lagged: same cluster, less.
	lagging, lb := write("rangealloc-n1-20260301T130000.000Z-4000.snap", x, 4000)
	assert.NoError(t, notOlderThanBackups(older, ob, dir), "a later backup of the same cluster holding less")
	assert.NoError(t, notOlderThanBackups(lagging, lb, dir))

	// Founded again since (a new cluster, counting from 1).
	newer, nb := write("rangealloc-n1-20260302T120000.000Z-12.snap", y, 12)
	err := notOlderThanBackups(older, ob, dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds a newer backup, "+newer)
	assert.NoError(t, notOlderThanBackups(newer, nb, dir))
	assert.NoError(t, notOlderThanBackups(filepath.Join(t.TempDir(), "copy.snap"), ob, dir))
	assert.NoError(t, notOlderThanBackups(older, ob, ""))
	got, count, err := newestBackup(dir)
	require.NoError(t, err)
	assert.Equal(t, newer, got, "newest by time, not by index")
	assert.Equal(t, 3, count)

	// The same cluster, holding more than the file named.
	more, _ := write("rangealloc-n1-20260303T120000.000Z-13.snap", y, 13)
	err = notOlderThanBackups(newer, nb, dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds a newer backup, "+more)

	// Backups without a cluster ID are not taken for one cluster's.
	dir = t.TempDir()
	unnamed, ub := write("rangealloc-n1-20260301T120000.000Z-50.snap", "", 50)
	write("rangealloc-n1-20260302T120000.000Z-10.snap", "", 10)
	require.ErrorContains(t, notOlderThanBackups(unnamed, ub, dir), "holds a newer backup")
}

// TestLoneNodeLostDiskSteersClusterBackupToJoin: a lone node without state
// whose newest backup is of a cluster of several (it was the first node of
// a cluster grown with joins, started without --join) refuses to found, and
// its message sends the operator to --join first: founding alone from that
// backup while the others run would make a second cluster beside theirs.
func TestLoneNodeLostDiskSteersClusterBackupToJoin(t *testing.T) {
	nodes, _ := threeNodesOf(t, "")
	require.Eventually(t, func() bool { return len(nodes[0].LocalState().Members()) == 3 },
		10*time.Second, 20*time.Millisecond, "every founder has its member row")
	var b bytes.Buffer
	require.NoError(t, nodes[0].fsm.WriteBackup(&b))
	bdir := t.TempDir()
	name := fmt.Sprintf("rangealloc-a-20260301T120000.000Z-%d.snap", nodes[0].AppliedIndex())
	require.NoError(t, os.WriteFile(filepath.Join(bdir, name), b.Bytes(), 0o600))

	cfg := testConfig(t, filepath.Join(t.TempDir(), "data"))
	cfg.ID, cfg.BackupDir = "a", bdir
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Open(ctx, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "this node's data was lost")
	assert.Contains(t, err.Error(), "That backup is of a cluster of 3 members (a, b, c)")
	assert.Contains(t, err.Error(), "start it with --join")
	assert.Contains(t, err.Error(), "If none is left, start it with --restore-from "+filepath.Join(bdir, name))
	assert.NoFileExists(t, filepath.Join(cfg.DataDir, storage.ClusterFile), "nothing founded")
}
