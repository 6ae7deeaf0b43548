package storage

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStoreAfterCloseWAL is TestStoreAfterClose over the wal.
func TestStoreAfterCloseWAL(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenWAL(dir, 0, hclog.NewNullLogger())
	require.NoError(t, err)
	s := NewStore(w, dir, false, nil, nil)
	require.NoError(t, s.SetUint64(KeyCurrentTerm, 3))
	assert.FileExists(t, filepath.Join(dir, MarkerFile), "marked before the first write")
	require.NoError(t, s.Close())
	assert.NoError(t, s.SetUint64(KeyCurrentTerm, 4), "a term after Close is dropped")
	assert.ErrorIs(t, s.StoreLog(&raft.Log{Index: 1, Term: 4}), ErrStoreClosed, "a log entry after Close fails")
	w, err = OpenWAL(dir, 0, hclog.NewNullLogger())
	require.NoError(t, err)
	defer w.Close()
	term, err := w.GetUint64(KeyCurrentTerm)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), term, "nothing was written after Close")
}

// TestWALMonotonic: raft-wal refuses a gap in the log, so Raft must know
// it (raft.MonotonicLogStore) through the marker wrapper and the log
// cache, and delete the whole log after installing a snapshot instead of
// leaving a gap that the next append would hit.
func TestWALMonotonic(t *testing.T) {
	dir := t.TempDir()
	w, err := OpenWAL(dir, 0, hclog.NewNullLogger())
	require.NoError(t, err)
	s := NewStore(w, dir, false, nil, nil)
	defer s.Close()
	cache, err := raft.NewLogCache(16, s)
	require.NoError(t, err)
	assert.True(t, cache.IsMonotonic(), "the wal is monotonic, seen through the cache")
	require.NoError(t, s.StoreLogs([]*raft.Log{{Index: 1, Term: 1}, {Index: 2, Term: 1}}))
	assert.Error(t, s.StoreLog(&raft.Log{Index: 5, Term: 1}), "raft-wal refuses a gap")

	b, err := OpenBolt(t.TempDir())
	require.NoError(t, err)
	bs := NewStore(b, t.TempDir(), false, nil, nil)
	defer bs.Close()
	assert.False(t, bs.IsMonotonic(), "raft.db takes a gap")
}
