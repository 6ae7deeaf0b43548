package node

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock               { return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }
func emptyState() func(io.Writer) error      { return fsm.New(hclog.NewNullLogger()).WriteBackup }
func testBackuper(dir, id string, retain int) *backuper {
	return newBackuper(dir, id, retain, emptyState(), hclog.NewNullLogger())
}

// dirNames lists the names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// allAllocations returns every allocation of every pool of n.
func allAllocations(t *testing.T, ctx context.Context, n *Node) []fsm.Allocation {
	t.Helper()
	pools, err := n.Pools(ctx, Linearizable)
	require.NoError(t, err)
	var out []fsm.Allocation
	for _, p := range pools {
		after := ""
		for {
			page, next, err := n.List(ctx, Linearizable, p.Name, "", after, 100)
			require.NoError(t, err)
			out = append(out, page...)
			if next == "" {
				break
			}
			after = next
		}
	}
	return out
}

// TestBackupRestoresSameState: a scheduled backup is named after the
// node, its time and index, reads back as a restore would, and restored
// into another cluster gives back the same allocations.
func TestBackupRestoresSameState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := openReady(t, testConfig(t, t.TempDir()))
	for i := 0; i < 10; i++ {
		_, err := n.Allocate(ctx, "nodeport", "", "svc", 0, "")
		require.NoError(t, err)
	}
	_, err := n.Allocate(ctx, "clusterip-ipv4", "10.96.0.10", "default/dns", 0, "")
	require.NoError(t, err)
	want := allAllocations(t, ctx, n)
	require.Len(t, want, 11)

	dir := t.TempDir()
	clock := newFakeClock()
	b := newBackuper(dir, n.ID(), 3, n.LocalState().WriteBackup, hclog.NewNullLogger())
	b.now = clock.now
	res := b.take()
	require.NoError(t, res.Err)
	assert.Equal(t, n.AppliedIndex(), res.Index, "the backup holds the applied state")
	wantName := "rangealloc-" + n.ID() + "-20260301T120000.000Z-"
	assert.True(t, strings.HasPrefix(filepath.Base(res.Path), wantName), "name %s, want %s<index>.snap", res.Path, wantName)
	assert.Equal(t, []string{filepath.Base(res.Path)}, dirNames(t, dir), "one file, no temp file")
	fi, err := os.Stat(res.Path)
	require.NoError(t, err)
	assert.Equal(t, fi.Size(), res.Bytes)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "a backup holds the whole state: owner only")

	other := openReady(t, testConfig(t, t.TempDir()))
	f, err := os.Open(res.Path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, other.Restore(ctx, f, ""))
	assert.Equal(t, want, allAllocations(t, ctx, other))
}

// TestBackupRetention: a backuper keeps exactly its newest N backups and
// never touches a file that is not one of its own.
func TestBackupRetention(t *testing.T) {
	dir := t.TempDir()
	foreign := []string{
		"notes.txt",
		"rangealloc-n2-20200101T000000.000Z-1.snap",     // another node's
		"rangealloc-n1-garbage.snap",                    // not a backup's name
		"rangealloc-n1-20200101T000000.000Z-1.snap.bak", // a copy an operator made
		"rangealloc-n1-20200101T000000Z-1.snap",         // another time format
		".rangealloc-n2-123.tmp",                        // another node's backup in progress
	}
	for _, name := range foreign {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("keep"), 0o600))
	}
	// A directory with a backup's name is not a backup either.
	require.NoError(t, os.Mkdir(filepath.Join(dir, "rangealloc-n1-20000101T000000.000Z-1.snap"), 0o750))
	foreign = append(foreign, "rangealloc-n1-20000101T000000.000Z-1.snap")

	clock := newFakeClock()
	n1, n1x := testBackuper(dir, "n1", 3), testBackuper(dir, "n1-x", 2) // n1-x's names start with n1's prefix
	n1.now, n1x.now = clock.now, clock.now
	var kept1, kept1x []string
	for i := 0; i < 6; i++ {
		clock.advance(time.Minute)
		r1, r2 := n1.take(), n1x.take()
		require.NoError(t, r1.Err)
		require.NoError(t, r2.Err)
		kept1, kept1x = append(kept1, filepath.Base(r1.Path)), append(kept1x, filepath.Base(r2.Path))
	}
	want := append(append(append([]string{}, foreign...), kept1[3:]...), kept1x[4:]...)
	sort.Strings(want)
	assert.Equal(t, want, dirNames(t, dir), "the newest 3 of n1, the newest 2 of n1-x, and every foreign file")
	for _, name := range foreign[:len(foreign)-1] {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, "keep", string(b), "%s untouched", name)
	}
}

// TestBackupFailures: a backup that fails (the disk fills, the bytes do
// not read back, the directory is gone) leaves no file behind, is counted
// with its reason, and the next one succeeds.
func TestBackupFailures(t *testing.T) {
	valid := func(w io.Writer) error { return emptyState()(w) }
	cases := []struct {
		name  string
		write func(io.Writer) error
		setup func(t *testing.T, dir string)
		want  string
	}{
		{name: "disk full", want: "no space left on device", write: func(w io.Writer) error {
			_, _ = w.Write(make([]byte, 100))
			return syscall.ENOSPC
		}},
		{name: "not a backup", want: "verify", write: func(w io.Writer) error {
			_, err := w.Write([]byte("this is not a rangealloc backup"))
			return err
		}},
		{name: "cut short", want: "verify", write: func(w io.Writer) error {
			var buf bytesBuffer
			if err := valid(&buf); err != nil {
				return err
			}
			_, err := w.Write(buf.b[:len(buf.b)/2])
			return err
		}},
		{name: "one flipped bit", want: "verify", write: func(w io.Writer) error {
			var buf bytesBuffer
			if err := valid(&buf); err != nil {
				return err
			}
			buf.b[len(buf.b)/2] ^= 1
			_, err := w.Write(buf.b)
			return err
		}},
		{name: "directory gone", want: "backup dir", write: valid, setup: func(t *testing.T, dir string) {
			require.NoError(t, os.RemoveAll(dir))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "backups")
			require.NoError(t, os.Mkdir(dir, 0o750))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("keep"), 0o600))
			b := newBackuper(dir, "n1", 3, tc.write, hclog.NewNullLogger())
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			res := b.take()
			require.Error(t, res.Err)
			assert.Contains(t, res.Err.Error(), tc.want)
			assert.Empty(t, res.Path)
			st := b.Status()
			assert.Equal(t, uint64(1), st.Failures)
			assert.Equal(t, res.Err.Error(), st.LastError)
			assert.True(t, st.Last.Time.IsZero(), "no backup yet")
			if tc.setup != nil {
				require.NoError(t, os.Mkdir(dir, 0o750))
			} else {
				assert.Equal(t, []string{"notes.txt"}, dirNames(t, dir), "no temp file, no backup")
			}

			b.write = valid
			res = b.take()
			require.NoError(t, res.Err, "the next backup tries again")
			st = b.Status()
			assert.Equal(t, uint64(1), st.Failures)
			assert.Equal(t, res, st.Last)
		})
	}
}

// TestBackupTimestampMoves: each verified backup moves the last backup's
// time; a failed one does not.
func TestBackupTimestampMoves(t *testing.T) {
	clock := newFakeClock()
	b := testBackuper(t.TempDir(), "n1", 2)
	b.now = clock.now
	assert.True(t, b.Status().Last.Time.IsZero(), "zero before any backup")
	require.NoError(t, b.take().Err)
	assert.Equal(t, clock.t, b.Status().Last.Time)

	clock.advance(time.Hour)
	require.NoError(t, b.take().Err)
	assert.Equal(t, clock.t, b.Status().Last.Time)

	good := clock.t
	clock.advance(time.Hour)
	b.write = func(io.Writer) error { return errors.New("no state") }
	require.Error(t, b.take().Err)
	assert.Equal(t, good, b.Status().Last.Time, "a failure keeps the last good backup's time")
}

// TestBackupFirstDelay: after a restart the next backup is due an
// interval after the newest one, not an interval after the start.
func TestBackupFirstDelay(t *testing.T) {
	clock := newFakeClock()
	b := testBackuper(t.TempDir(), "n1", 2)
	b.now = clock.now
	assert.Equal(t, time.Duration(0), b.firstDelay(time.Hour), "no backup yet: at once")
	require.NoError(t, b.take().Err)
	clock.advance(20 * time.Minute)
	assert.Equal(t, 40*time.Minute, b.firstDelay(time.Hour))
	clock.advance(3 * time.Hour)
	assert.Equal(t, time.Duration(0), b.firstDelay(time.Hour), "overdue: at once")
	clock.t = clock.t.Add(-10 * time.Hour) // the clock went back
	assert.Equal(t, time.Hour, b.firstDelay(time.Hour), "never more than an interval")
}

// TestBackupRemovesOwnTemps: a temp file a crash left behind is removed at
// start; other nodes' and other files are not.
func TestBackupRemovesOwnTemps(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{".rangealloc-n1-123.tmp", ".rangealloc-n2-123.tmp", "x.tmp"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o600))
	}
	testBackuper(dir, "n1", 2).removeTemps()
	assert.Equal(t, []string{".rangealloc-n2-123.tmp", "x.tmp"}, dirNames(t, dir))
}

// TestBackupFileSafeID: any node ID gives one file name in the directory.
func TestBackupFileSafeID(t *testing.T) {
	dir := t.TempDir()
	res := testBackuper(dir, "../a/b c*", 1).take()
	require.NoError(t, res.Err)
	assert.Equal(t, dir, filepath.Dir(res.Path))
	assert.True(t, strings.HasPrefix(filepath.Base(res.Path), "rangealloc-.._a_b_c_-"), res.Path)
}

// TestNodeScheduledBackups: a node with BackupDir takes a backup at start,
// reports it, and stops taking them when closed.
func TestNodeScheduledBackups(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.BackupDir, cfg.BackupInterval, cfg.BackupRetain = filepath.Join(t.TempDir(), "backups"), time.Second, 2
	results := make(chan BackupResult, 16)
	cfg.OnBackup = func(r BackupResult) { results <- r }
	n := openReady(t, cfg)
	var res BackupResult
	select {
	case res = <-results:
	case <-time.After(10 * time.Second):
		t.Fatal("no backup at start")
	}
	require.NoError(t, res.Err)
	assert.Equal(t, res, n.BackupStatus().Last)
	_, err := verifyBackup(res.Path)
	require.NoError(t, err)

	require.NoError(t, n.Close(), "Close stops the backup loop")
	files, err := os.ReadDir(cfg.BackupDir)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(files), 2, "retention")
	for _, f := range files {
		assert.False(t, strings.HasSuffix(f.Name(), ".tmp"), "no temp file left: %s", f.Name())
	}
}

// TestBackupConfig: bad backup settings and an unusable directory stop
// Open before anything starts.
func TestBackupConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	cases := []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"interval too short", func(c *Config) { c.BackupInterval = 500 * time.Millisecond }, "BackupInterval is 500ms; want 1s or more"},
		{"retain zero", func(c *Config) { c.BackupRetain = 0 }, "BackupRetain is 0; want 1 or more"},
		{"dir is a file", func(c *Config) { c.BackupDir = file }, "backup dir"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			cfg.BackupDir = filepath.Join(t.TempDir(), "backups")
			tc.edit(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n, err := Open(ctx, cfg)
			if err == nil {
				_ = n.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	cfg := testConfig(t, t.TempDir())
	cfg.BackupInterval, cfg.BackupRetain = 0, 0
	assert.NoError(t, cfg.Validate(), "without BackupDir the backup settings are not used")
}
