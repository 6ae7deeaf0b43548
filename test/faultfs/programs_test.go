package faultfs

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

var bucket = []byte("b")

func boltPut(t *testing.T, db *bolt.DB, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		require.NoError(t, db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(bucket)
			if err != nil {
				return err
			}
			return b.Put([]byte(fmt.Sprintf("k%05d", i)), bytes.Repeat([]byte{byte(i)}, 100+i))
		}))
	}
}

func boltCheck(t *testing.T, db *bolt.DB, n int) {
	t.Helper()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		require.NotNil(t, b)
		assert.Equal(t, n, b.Stats().KeyN)
		for i := 0; i < n; i++ {
			require.Equal(t, bytes.Repeat([]byte{byte(i)}, 100+i), b.Get([]byte(fmt.Sprintf("k%05d", i))), "key %d", i)
		}
		return nil
	}))
}

// TestBboltOnMount: bbolt (flock, read-only shared mmap, pwrite +
// fdatasync) works on the mount: a child process writes, closes, another
// reopens and checks; then a child commits more and is killed with the DB
// open, the power is cut, and every committed transaction is there. (The
// children are this test binary: see TestHelperProcess for why.)
func TestBboltOnMount(t *testing.T) {
	f := mount(t)
	p := f.Path("bolt.db")
	helper(t, "bolt-put", p, "0", "150")
	fsync(t, f, "") // bbolt never fsyncs its directory; without this the file dies in a crash
	helper(t, "bolt-check", p, "150")
	killHelper(t, "bolt-put", p, "150", "300")
	require.NoError(t, f.Crash())
	helper(t, "bolt-check", p, "300")
}

// TestMmapOnMount: a child maps a file of the mount read-only and shared,
// and sees writes made through a descriptor (bbolt relies on it).
func TestMmapOnMount(t *testing.T) {
	f := mount(t)
	helper(t, "mmap", f.Path("m"))
}

func mmapCheck(t *testing.T, p string) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 3*pageSize/16)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	fh, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	defer fh.Close()
	m, err := syscall.Mmap(int(fh.Fd()), 0, len(data), syscall.PROT_READ, syscall.MAP_SHARED)
	require.NoError(t, err)
	defer syscall.Munmap(m)
	require.Equal(t, data, m)
	_, err = fh.WriteAt([]byte("MAPPED"), pageSize+10)
	require.NoError(t, err)
	assert.Equal(t, []byte("MAPPED"), m[pageSize+10:pageSize+16])
}

// TestRaftFileSnapshotStore runs hashicorp/raft's FileSnapshotStore on the
// mount. It never fsyncs the snapshot directory itself, only its parent
// after the rename, so under the strict model a crash keeps the snapshot
// directory but loses state.bin and meta.json: the store then lists no
// snapshot. This is the failure the product must guard against.
func TestRaftFileSnapshotStore(t *testing.T) {
	f := mount(t)
	store, err := raft.NewFileSnapshotStore(f.Path("raft"), 2, io.Discard)
	require.NoError(t, err)
	fsync(t, f, "raft")
	fsync(t, f, "")

	sink, err := store.Create(raft.SnapshotVersionMax, 10, 2, raft.Configuration{}, 1, nil)
	require.NoError(t, err)
	_, err = sink.Write([]byte("the state"))
	require.NoError(t, err)
	require.NoError(t, sink.Close())
	metas, err := store.List()
	require.NoError(t, err)
	require.Len(t, metas, 1)
	_, rc, err := store.Open(metas[0].ID)
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, "the state", string(got))

	require.NoError(t, f.Crash())
	ents, err := os.ReadDir(f.Path("raft", "snapshots", metas[0].ID))
	require.NoError(t, err, "the renamed snapshot dir is durable (its parent was fsynced)")
	assert.Empty(t, ents, "its entries were never made durable")
	store, err = raft.NewFileSnapshotStore(f.Path("raft"), 2, io.Discard)
	require.NoError(t, err)
	metas, err = store.List()
	require.NoError(t, err)
	assert.Empty(t, metas, "the snapshot is lost")
}

// TestRaftWALOnMount runs hashicorp/raft-wal (segment files, bbolt meta
// store, renames, fsyncs) on the mount in children: store, close, reopen
// and check; then store more, get killed with the WAL open, cut the power,
// and find every stored log.
func TestRaftWALOnMount(t *testing.T) {
	f := mount(t)
	durableDir(t, f, "wal")
	dir := f.Path("wal")
	helper(t, "wal-store", dir, "1", "200")
	helper(t, "wal-check", dir, "200")
	killHelper(t, "wal-store", dir, "201", "400")
	require.NoError(t, f.Crash())
	helper(t, "wal-check", dir, "400")
}

func openWAL(t *testing.T, dir string) *wal.WAL {
	w, err := wal.Open(dir, wal.WithSegmentSize(64*1024))
	require.NoError(t, err)
	return w
}

func storeLogs(t *testing.T, w *wal.WAL, from, to int) {
	t.Helper()
	for i := uint64(from); i <= uint64(to); i += 10 {
		var logs []*raft.Log
		for j := i; j < i+10 && j <= uint64(to); j++ {
			logs = append(logs, &raft.Log{Index: j, Term: 1, Data: bytes.Repeat([]byte{byte(j)}, 500)})
		}
		require.NoError(t, w.StoreLogs(logs))
	}
}

func checkLogs(t *testing.T, w *wal.WAL, last int) {
	t.Helper()
	li, err := w.LastIndex()
	require.NoError(t, err)
	require.Equal(t, uint64(last), li)
	for i := uint64(1); i <= uint64(last); i++ {
		var l raft.Log
		require.NoError(t, w.GetLog(i, &l), "log %d", i)
		require.Equal(t, bytes.Repeat([]byte{byte(i)}, 500), l.Data, "log %d", i)
	}
}
