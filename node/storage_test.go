package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/storage"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// damagedDir returns the data directory of a single node that held state
// in a bolt store: allocations in two terms, a snapshot taken in the
// second, and a log compacted behind it. old is a copy of raft.db from
// the first term.
func damagedDir(t *testing.T) (cfg Config, old []byte) {
	t.Helper()
	cfg, oldDir := damagedDirOf(t, LogStoreBolt)
	old, err := os.ReadFile(filepath.Join(oldDir, storage.BoltFile))
	require.NoError(t, err)
	return cfg, old
}

// damagedDirOf is damagedDir with the given log store; the copy of the
// first term's log store (raft.db or wal/) is in the directory old.
func damagedDirOf(t *testing.T, store string) (cfg Config, old string) {
	t.Helper()
	cfg = testConfig(t, t.TempDir())
	cfg.LogStore = store
	cfg.TrailingLogs = 2
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := openReady(t, cfg)
	for i := 0; i < 5; i++ {
		_, err := n.Allocate(ctx, "nodeport", "", fmt.Sprintf("first-%d", i), 0, "")
		require.NoError(t, err)
	}
	require.NoError(t, n.Close())
	old = t.TempDir()
	if store == storage.LogStoreWAL {
		require.NoError(t, os.CopyFS(filepath.Join(old, storage.WALDir), os.DirFS(filepath.Join(cfg.DataDir, storage.WALDir))))
	} else {
		b, err := os.ReadFile(filepath.Join(cfg.DataDir, storage.BoltFile))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(old, storage.BoltFile), b, 0o600))
	}
	n = openReady(t, cfg) // a new term
	for i := 0; i < 20; i++ {
		_, err := n.Allocate(ctx, "nodeport", "", fmt.Sprintf("second-%d", i), 0, "")
		require.NoError(t, err)
	}
	require.NoError(t, n.Snapshot())
	require.NoError(t, n.Close())
	return cfg, old
}

func snapshotDirs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, storage.SnapDir, "*-*-*"))
	require.NoError(t, err)
	require.NotEmpty(t, m, "a snapshot was taken")
	return m
}

func TestStorageDamageRefused(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string, old []byte)
		path   string // the file the refusal names
		says   string
	}{
		{"raft.db truncated to 0 bytes", func(t *testing.T, dir string, _ []byte) {
			require.NoError(t, os.Truncate(filepath.Join(dir, storage.BoltFile), 0))
		}, storage.BoltFile, "empty (0 bytes), but this data directory has held Raft state"},
		{"raft.db removed", func(t *testing.T, dir string, _ []byte) {
			require.NoError(t, os.Remove(filepath.Join(dir, storage.BoltFile)))
		}, storage.BoltFile, "missing, but this data directory has held Raft state"},
		{"raft.db cut to half", func(t *testing.T, dir string, _ []byte) {
			fi, err := os.Stat(filepath.Join(dir, storage.BoltFile))
			require.NoError(t, err)
			require.NoError(t, os.Truncate(filepath.Join(dir, storage.BoltFile), fi.Size()/2))
		}, storage.BoltFile, "corrupt bolt file"},
		{"raft.db replaced by an older copy", func(t *testing.T, dir string, old []byte) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, storage.BoltFile), old, 0o600))
		}, storage.BoltFile, "behind the newest snapshot's term"},
		{"raft.db and its marker removed, snapshots kept", func(t *testing.T, dir string, _ []byte) {
			require.NoError(t, os.Remove(filepath.Join(dir, storage.BoltFile)))
			require.NoError(t, os.Remove(filepath.Join(dir, storage.MarkerFile)))
		}, storage.BoltFile, "missing, but snapshots exist"},
		{"a byte of the newest snapshot flipped", func(t *testing.T, dir string, _ []byte) {
			snaps := snapshotDirs(t, dir)
			state := filepath.Join(snaps[len(snaps)-1], "state.bin")
			b, err := os.ReadFile(state)
			require.NoError(t, err)
			b[len(b)/2] ^= 0x40
			require.NoError(t, os.WriteFile(state, b, 0o600))
		}, "state.bin", "fails its checksum"},
		{"newest snapshot's metadata unreadable", func(t *testing.T, dir string, _ []byte) {
			snaps := snapshotDirs(t, dir)
			require.NoError(t, os.WriteFile(filepath.Join(snaps[len(snaps)-1], "meta.json"), []byte("{"), 0o600))
		}, "meta.json", "unreadable snapshot metadata"},
		{"snapshots directory deleted", func(t *testing.T, dir string, _ []byte) {
			require.NoError(t, os.RemoveAll(filepath.Join(dir, storage.SnapDir)))
		}, storage.SnapDir, "no snapshot holds the entries before it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, old := damagedDir(t)
			c.damage(t, cfg.DataDir, old)
			requireStartRefused(t, cfg, c.path, c.says)
		})
	}
}

// requireStartRefused opens a node on cfg and requires a storage.Error that
// names path and says says, and the way out.
func requireStartRefused(t *testing.T, cfg Config, path, says string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := Open(ctx, cfg)
	if err == nil {
		n.Close()
	}
	require.ErrorIs(t, err, ErrStorage, "Open = %v, want a storage.Error", err)
	var se *storage.Error
	require.ErrorAs(t, err, &se)
	assert.Contains(t, se.Path, path, "%v", err)
	assert.Contains(t, se.Problem, says)
	assert.Contains(t, err.Error(), "refusing to start")
	assert.Contains(t, err.Error(), "--join", "the message gives the way out")
}

func TestStorageHealthyRestart(t *testing.T) {
	cfg, _ := damagedDir(t)
	// What a crash leaves behind: an unfinished snapshot and restore upload.
	tmpSnap := filepath.Join(cfg.DataDir, storage.SnapDir, "9-99-123.tmp")
	require.NoError(t, os.MkdirAll(tmpSnap, 0o755))
	tmpRestore := filepath.Join(cfg.DataDir, "restore-42.tmp")
	require.NoError(t, os.WriteFile(tmpRestore, []byte("x"), 0o600))
	halfReaped := filepath.Join(cfg.DataDir, storage.SnapDir, "1-2-3") // an old snapshot whose meta.json went first
	require.NoError(t, os.MkdirAll(halfReaped, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(halfReaped, "state.bin"), []byte("x"), 0o600))
	n := openReady(t, cfg)
	got, _, err := n.List(context.Background(), Linearizable, "nodeport", "", "", 100)
	require.NoError(t, err)
	assert.Len(t, got, 25, "every allocation of both terms is there")
	assert.NoDirExists(t, tmpSnap, "an unfinished snapshot is removed at start")
	assert.NoFileExists(t, tmpRestore, "an unfinished restore upload is removed at start")
	assert.NoDirExists(t, halfReaped, "so is an old snapshot left half deleted")
}

func TestStorageMarkerBeforeFirstWrite(t *testing.T) {
	for _, store := range []string{LogStoreBolt, storage.LogStoreWAL} {
		t.Run(store, func(t *testing.T) { testStorageMarkerBeforeFirstWrite(t, store) })
	}
}

func testStorageMarkerBeforeFirstWrite(t *testing.T, store string) {
	cfg := testConfig(t, t.TempDir())
	cfg.LogStore = store
	cfg.Join = []string{freeAddr(t)} // never answers: the node stays without state
	// A founding marker left by a bootstrap that never reached the disk
	// is no founding of this node's: a node without state drops it.
	require.NoError(t, os.MkdirAll(cfg.DataDir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(cfg.DataDir, unfinishedFile), []byte(unfinishedText), 0o600))
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := Open(ctx, cfg)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "Open waits to be joined until its context ends")
		require.NotErrorIs(t, err, ErrStorage, "a node that never held state is no storage loss")
		assert.NoFileExists(t, filepath.Join(cfg.DataDir, storage.MarkerFile), "no state, no marker")
		assert.NoFileExists(t, filepath.Join(cfg.DataDir, unfinishedFile), "no state, no unfinished founding")
	}

	cfg = testConfig(t, t.TempDir())
	cfg.LogStore = store
	openReady(t, cfg)
	assert.FileExists(t, filepath.Join(cfg.DataDir, storage.MarkerFile), "bootstrapping wrote state, and the marker before it")
}

// TestStorageMarkerPending: the marker is pending from before the first
// write to the store until that write returns, and final after. A pending
// marker beside a store that holds nothing (the first write never
// completed: a power cut during it) makes a new directory, not a refusal;
// a final marker there is refused; a pending marker beside state becomes
// final.
func TestStorageMarkerPending(t *testing.T) {
	for _, store := range []string{LogStoreBolt, storage.LogStoreWAL} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			s, err := storage.Open(dir, store, 0, hclog.NewNullLogger())
			require.NoError(t, err)
			marker := filepath.Join(dir, storage.MarkerFile)
			var during []byte
			m := storage.NewStore(peekStore{s, func() { during, _ = os.ReadFile(marker) }}, dir, false, nil, nil)
			require.NoError(t, m.SetUint64(storage.KeyCurrentTerm, 1))
			assert.Equal(t, storage.PendingMarkerText, string(during), "pending while the first write runs")
			after, err := os.ReadFile(marker)
			require.NoError(t, err)
			assert.Equal(t, storage.MarkerText, string(after), "final once it returned")
			require.NoError(t, m.Close())

			empty := t.TempDir()
			e, err := storage.Open(empty, store, 0, hclog.NewNullLogger())
			require.NoError(t, err)
			require.NoError(t, e.Close())
			for _, c := range []struct {
				text   string
				refuse bool
			}{{storage.PendingMarkerText, false}, {storage.MarkerText, true}} {
				require.NoError(t, os.WriteFile(filepath.Join(empty, storage.MarkerFile), []byte(c.text), 0o600))
				st, err := storage.Check(empty, store, hclog.NewNullLogger())
				if c.refuse {
					require.ErrorIs(t, err, ErrStorage, "a final marker without state")
					continue
				}
				require.NoError(t, err, "a pending marker without state")
				assert.False(t, st.Marked)
				assert.NoFileExists(t, filepath.Join(empty, storage.MarkerFile), "the pending marker is removed")
			}

			require.NoError(t, os.WriteFile(marker, []byte(storage.PendingMarkerText), 0o600))
			st, err := storage.Check(dir, store, hclog.NewNullLogger())
			require.NoError(t, err)
			assert.True(t, st.Marked && st.HasState)
			after, err = os.ReadFile(marker)
			require.NoError(t, err)
			assert.Equal(t, storage.MarkerText, string(after), "a pending marker beside state becomes final")
		})
	}
}

// TestBoltPagesZeroed zeroes each page of a real raft.db in turn. Where
// checkBoltPages finds nothing wrong, bbolt must open the file, pass its
// own check and read every log entry without panicking (a panic on one of
// bbolt's goroutines would kill this test binary, as it would a node).
func TestBoltPagesZeroed(t *testing.T) {
	cfg, _ := damagedDir(t)
	orig, err := os.ReadFile(filepath.Join(cfg.DataDir, storage.BoltFile))
	require.NoError(t, err)
	ps := os.Getpagesize()
	pages := len(orig) / ps
	require.Greater(t, pages, 4)
	caught := 0
	for p := 0; p < pages; p++ {
		b := append([]byte(nil), orig...)
		clear(b[p*ps : (p+1)*ps])
		dir := t.TempDir()
		path := filepath.Join(dir, storage.BoltFile)
		require.NoError(t, os.WriteFile(path, b, 0o600))
		if err := storage.CheckBolt(path); err != nil {
			require.ErrorIs(t, err, ErrStorage, "page %d", p)
			caught++
			continue
		}
		s, err := storage.OpenBolt(dir)
		require.NoError(t, err, "page %d: passed the check, so bolt opens it", p)
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		for i := first; i <= last && i > 0; i++ {
			var l raft.Log
			require.NoError(t, s.GetLog(i, &l), "page %d: log %d", p, i)
		}
		require.NoError(t, s.Close())
	}
	t.Logf("%d of %d zeroed pages refused; the others were free or one meta page of two", caught, pages)
	assert.Greater(t, caught, 0)
}

// peekStore calls peek before each SetUint64 reaches the store.
type peekStore struct {
	storage.RaftStore
	peek func()
}

func (p peekStore) SetUint64(k []byte, v uint64) error {
	p.peek()
	return p.RaftStore.SetUint64(k, v)
}
