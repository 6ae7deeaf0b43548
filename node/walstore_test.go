package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/storage"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStorageDamageRefusedWAL is TestStorageDamageRefused for the wal:
// each loss or damage is refused with a storage.Error naming the path.
func TestStorageDamageRefusedWAL(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, dir, old string)
		path   string
		says   string
	}{
		{"wal directory removed", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.RemoveAll(filepath.Join(dir, storage.WALDir)))
		}, storage.WALDir, "missing, but this data directory has held Raft state"},
		{"wal metadata removed", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Remove(filepath.Join(dir, storage.WALDir, metadb.FileName)))
		}, metadb.FileName, "missing, but this data directory has held Raft state"},
		{"wal metadata truncated to 0 bytes", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.Truncate(filepath.Join(dir, storage.WALDir, metadb.FileName), 0))
		}, metadb.FileName, "empty (0 bytes)"},
		{"wal metadata cut to half", func(t *testing.T, dir, _ string) {
			p := filepath.Join(dir, storage.WALDir, metadb.FileName)
			fi, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(p, fi.Size()/2))
		}, metadb.FileName, "corrupt bolt file"},
		{"wal segments removed", func(t *testing.T, dir, _ string) {
			for _, s := range walSegments(t, dir) {
				require.NoError(t, os.Remove(s))
			}
		}, storage.WALDir, "holds no segment files"},
		{"wal segment cut short", func(t *testing.T, dir, _ string) {
			segs := walSegments(t, dir)
			end, _ := walDataEnd(t, segs[len(segs)-1])
			require.NoError(t, os.Truncate(segs[len(segs)-1], end/2))
		}, storage.WALSuffix, "segment file cut short"},
		{"wal replaced by an older copy", func(t *testing.T, dir, old string) {
			require.NoError(t, os.RemoveAll(filepath.Join(dir, storage.WALDir)))
			require.NoError(t, os.CopyFS(filepath.Join(dir, storage.WALDir), os.DirFS(filepath.Join(old, storage.WALDir))))
		}, storage.WALDir, "behind the newest snapshot's term"},
		{"wal and its marker removed, snapshots kept", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.RemoveAll(filepath.Join(dir, storage.WALDir)))
			require.NoError(t, os.Remove(filepath.Join(dir, storage.MarkerFile)))
		}, storage.WALDir, "missing, but snapshots exist"},
		{"snapshots directory deleted", func(t *testing.T, dir, _ string) {
			require.NoError(t, os.RemoveAll(filepath.Join(dir, storage.SnapDir)))
		}, storage.SnapDir, "no snapshot holds the entries before it"},
		{"a wal segment's header zeroed", func(t *testing.T, dir, _ string) {
			segs := walSegments(t, dir)
			_, b := walDataEnd(t, segs[len(segs)-1])
			copy(b[:32], make([]byte, 32))
			require.NoError(t, os.WriteFile(segs[len(segs)-1], b, 0o600))
		}, storage.WALDir, "corrupt wal"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, old := damagedDirOf(t, storage.LogStoreWAL)
			c.damage(t, cfg.DataDir, old)
			requireStartRefused(t, cfg, c.path, c.says)
		})
	}
}

// TestStorageTornTailWAL: what a crash in the middle of an append leaves
// (a partial frame after the last commit) is normal: the node starts, and
// every acknowledged allocation is there.
func TestStorageTornTailWAL(t *testing.T) {
	cfg, _ := damagedDirOf(t, storage.LogStoreWAL)
	segs := walSegments(t, cfg.DataDir)
	tail := segs[len(segs)-1]
	end, b := walDataEnd(t, tail)
	at := (end + 7) / 8 * 8
	copy(b[at:], []byte{0x01, 0, 0, 0, 0x10, 0, 0, 0, 'p', 'a', 'r', 't'}) // an entry frame, cut off
	require.NoError(t, os.WriteFile(tail, b, 0o600))
	n := openReady(t, cfg)
	got, _, err := n.List(context.Background(), Linearizable, "nodeport", "", "", 100)
	require.NoError(t, err)
	assert.Len(t, got, 25, "every allocation of both terms is there")
}

func TestStorageHealthyRestartWAL(t *testing.T) {
	cfg, _ := damagedDirOf(t, storage.LogStoreWAL)
	n := openReady(t, cfg)
	got, _, err := n.List(context.Background(), Linearizable, "nodeport", "", "", 100)
	require.NoError(t, err)
	assert.Len(t, got, 25, "every allocation of both terms is there")
	assert.NoFileExists(t, filepath.Join(cfg.DataDir, storage.BoltFile), "a wal node keeps no raft.db")
}

// TestLogStoreRecorded: the first start records the store; a later one
// asking for another is refused without a change; without a choice the
// recorded one is used; a directory from before the record is bolt.
func TestLogStoreRecorded(t *testing.T) {
	for _, store := range []string{LogStoreBolt, storage.LogStoreWAL} {
		other := map[string]string{LogStoreBolt: storage.LogStoreWAL, storage.LogStoreWAL: LogStoreBolt}[store]
		t.Run(store, func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			cfg.LogStore = store
			n := openReady(t, cfg)
			require.NoError(t, n.Close())
			record := filepath.Join(cfg.DataDir, storage.LogStoreFile)
			b, err := os.ReadFile(record)
			require.NoError(t, err)
			assert.Equal(t, store+"\n", string(b))

			before := dirNames(t, cfg.DataDir)
			cfg.LogStore = other
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = Open(ctx, cfg)
			require.ErrorIs(t, err, ErrLogStoreMismatch)
			assert.Contains(t, err.Error(), "--log-store "+other)
			assert.Contains(t, err.Error(), "refusing to start")
			assert.Contains(t, err.Error(), record+" records "+store)
			assert.Equal(t, before, dirNames(t, cfg.DataDir), "a refusal changes nothing")

			cfg.LogStore = ""
			n = openReady(t, cfg)
			assert.Equal(t, store, n.logStore, "no choice: the recorded store")
		})
	}
	t.Run("from before the record", func(t *testing.T) {
		cfg := testConfig(t, t.TempDir())
		cfg.LogStore = ""
		n := openReady(t, cfg)
		require.NoError(t, n.Close())
		require.NoError(t, os.Remove(filepath.Join(cfg.DataDir, storage.LogStoreFile)))
		cfg.LogStore = storage.LogStoreWAL
		_, err := Open(context.Background(), cfg)
		require.ErrorIs(t, err, ErrLogStoreMismatch, "raft.db without a record is bolt")
		assert.NoFileExists(t, filepath.Join(cfg.DataDir, storage.LogStoreFile))
		cfg.LogStore = ""
		n = openReady(t, cfg)
		assert.Equal(t, LogStoreBolt, n.logStore)
	})
	t.Run("new directory", func(t *testing.T) {
		cfg := testConfig(t, t.TempDir())
		cfg.LogStore = ""
		n := openReady(t, cfg)
		assert.Equal(t, LogStoreBolt, n.logStore, "the default")
	})
}

func TestLogStoreValidate(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.LogStore = "rocks"
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"rocks"`)
	assert.Contains(t, err.Error(), `"bolt"`)
	assert.Contains(t, err.Error(), `"wal"`)
	for _, ok := range []string{"", LogStoreBolt, storage.LogStoreWAL} {
		cfg.LogStore = ok
		assert.NoError(t, cfg.Validate(), "LogStore %q", ok)
	}
}

// TestWALInUse: a wal a running node holds is refused at once, by Open
// and by recover's probe, instead of waiting on its lock forever.
func TestWALInUse(t *testing.T) {
	dir := t.TempDir()
	w, err := storage.OpenWAL(dir, 0, hclog.NewNullLogger())
	require.NoError(t, err)
	defer w.Close()
	_, err = storage.OpenWAL(dir, 0, hclog.NewNullLogger())
	require.ErrorIs(t, err, storage.ErrWALInUse)
	err = notInUse(dir)
	require.ErrorIs(t, err, ErrRecoverRefused)
	assert.Contains(t, err.Error(), "in use")
	assert.False(t, errors.Is(err, ErrStorage), "a running node is no damage")
}

// walSegments returns the segment files of dir's wal, oldest first.
func walSegments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, storage.WALDir, "*"+storage.WALSuffix))
	require.NoError(t, err)
	require.NotEmpty(t, m, "the wal has segments")
	return m
}

// walDataEnd is the offset after the last non-zero byte of a segment: the
// end of its last commit (the rest is preallocated zeros).
func walDataEnd(t *testing.T, path string) (int64, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	require.Positive(t, end)
	return int64(end), b
}
