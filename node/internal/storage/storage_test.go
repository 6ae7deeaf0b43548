package storage

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func FuzzCheckBoltPages(f *testing.F) {
	f.Add(make([]byte, 8192))
	f.Add([]byte("not a bolt file"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = checkBoltPages(bytes.NewReader(b), int64(len(b))) // must not panic
	})
}

// TestBoltKeyFlipped: a flipped byte in a key of a leaf page passes the
// page walk (it reads no keys), but breaks the key order bbolt asserts with
// a panic when it opens the file for writing. The check must report it.
func TestBoltKeyFlipped(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBolt(dir)
	require.NoError(t, err)
	for i := uint64(1); i <= 200; i++ {
		require.NoError(t, s.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("entry")}))
	}
	require.NoError(t, s.Close())
	path := filepath.Join(dir, BoltFile)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	m, err := boltMeta(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	w := &pageWalk{f: bytes.NewReader(b), m: m, seen: map[uint64]bool{}}
	require.NoError(t, w.walk(m.root, 0, nil, nil))
	ps := int(m.pageSize)
	var leaves []int
	for p := range w.seen { // pages in use only: a free page's keys are nobody's
		page := b[int(p)*ps:]
		if binary.LittleEndian.Uint16(page[8:]) == leafPage && binary.LittleEndian.Uint16(page[10:]) >= 3 {
			leaves = append(leaves, int(p))
		}
	}
	sort.Ints(leaves)
	require.NotEmpty(t, leaves, "a leaf page with keys")
	for _, p := range leaves {
		d := append([]byte(nil), b...)
		e := d[p*ps+pageHeader+elemSize:] // the second element
		pos, ksize := binary.LittleEndian.Uint32(e[4:]), binary.LittleEndian.Uint32(e[8:])
		require.NotZero(t, ksize)
		d[p*ps+pageHeader+elemSize+int(pos)] = 0xff // now it sorts after the third key
		require.NoError(t, os.WriteFile(path, d, 0o600))
		err := CheckBolt(path)
		require.ErrorIs(t, err, ErrStorage, "leaf page %d", p)
		assert.Regexp(t, `key [12] (is out of order|lies outside the range its parent gives it)`, err.Error())
	}
}

// TestStoreAfterClose: Raft may still write a term from a heartbeat while
// the node closes; the write after Close is dropped, not a panic, and a
// log entry fails.
func TestStoreAfterClose(t *testing.T) {
	dir := t.TempDir()
	b, err := OpenBolt(dir)
	require.NoError(t, err)
	s := NewStore(b, dir, false, nil, nil)
	require.NoError(t, s.SetUint64(KeyCurrentTerm, 3))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	assert.NoError(t, s.SetUint64(KeyCurrentTerm, 4), "a term after Close is dropped")
	assert.NoError(t, s.Set([]byte("LastVoteCand"), []byte("n2")))
	assert.ErrorIs(t, s.StoreLog(&raft.Log{Index: 1, Term: 4}), ErrStoreClosed, "a log entry after Close fails")
	b, err = OpenBolt(dir)
	require.NoError(t, err)
	defer b.Close()
	term, err := b.GetUint64(KeyCurrentTerm)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), term, "nothing was written after Close")
}
