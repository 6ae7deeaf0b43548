package fsm

import (
	"bytes"
	"io"
	"testing"

	"github.com/rangealloc/rangealloc/snapshot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackupKeepsMembers: a backup written for a restore carries the
// given member table and everything else of the original.
func TestBackupKeepsMembers(t *testing.T) {
	src := newHarness(t)
	src.pool("ports", "30000-30099")
	keyed := txn(alloc("ports", "30001", "a"))
	keyed.ID = "key-1"
	require.Nil(t, src.one(keyed).Err)
	src.one(&Request{Kind: KindSetMember, Member: Member{ID: "old-1", RaftAddr: "10.0.0.1:7081", APIAddr: "10.0.0.1:7080"}})
	src.one(&Request{Kind: KindSetClusterID, ClusterID: "cluster-of-the-backup"})
	var backup bytes.Buffer
	require.NoError(t, src.f.WriteBackup(&backup))

	b, err := ReadBackup(bytes.NewReader(backup.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, src.index, b.Index())
	here := []Member{{ID: "n2", RaftAddr: "127.0.0.1:2", APIAddr: "127.0.0.1:12"}, {ID: "n1", RaftAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:11"}}
	var out bytes.Buffer
	require.NoError(t, b.Write(&out, here, "this-cluster", 1))

	dst := New(nil)
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(out.Bytes()))))
	assert.Equal(t, []Member{here[1], here[0]}, dst.Members(), "this cluster's members, not the backup's")
	assert.Equal(t, "this-cluster", dst.ClusterID(), "and this cluster's ID")
	assert.Equal(t, dump(src.f), dump(dst), "the pools and allocations of the backup")
	_, ok := dst.RequestResult("key-1")
	assert.True(t, ok, "and its request IDs")

	var again bytes.Buffer
	require.NoError(t, b.Write(&again, src.f.Members(), src.f.ClusterID(), src.f.FeatureLevel()))
	want, err := snapshot.Read(bytes.NewReader(backup.Bytes()))
	require.NoError(t, err)
	got, err := snapshot.Read(bytes.NewReader(again.Bytes()))
	require.NoError(t, err)
	assert.False(t, want.FromBackup)
	want.FromBackup = true
	assert.Equal(t, want, got, "with its own members and ID, the backup as it was, marked as restored")
}

// TestRestoreRefusesStaleSnapshot: a snapshot older than the applied state
// is refused and changes nothing; the same state restored from a backup is
// taken whatever its index.
func TestRestoreRefusesStaleSnapshot(t *testing.T) {
	h := newHarness(t)
	h.pool("ports", "30000-30099")
	require.Nil(t, h.one(txn(alloc("ports", "30001", "early"))).Err)
	var old bytes.Buffer
	require.NoError(t, h.f.WriteBackup(&old))
	require.Nil(t, h.one(txn(alloc("ports", "30002", "later"))).Err)
	before := dump(h.f)

	err := h.f.Restore(io.NopCloser(bytes.NewReader(old.Bytes())))
	require.ErrorIs(t, err, ErrStaleSnapshot)
	assert.Equal(t, before, dump(h.f), "a refused snapshot changes nothing")
	assert.Equal(t, h.index, h.f.AppliedIndex())

	b, err := ReadBackup(bytes.NewReader(old.Bytes()))
	require.NoError(t, err)
	var restored bytes.Buffer
	require.NoError(t, b.Write(&restored, h.f.Members(), h.f.ClusterID(), h.f.FeatureLevel()))
	require.NoError(t, h.f.Restore(io.NopCloser(bytes.NewReader(restored.Bytes()))), "a restore from a backup replaces the state")
	_, err = h.f.Get("ports", "30002")
	assert.ErrorIs(t, err, &Error{Code: CodeNotAllocated}, "the backup's state, without the later allocation")
}

// TestReadBackupRejects: what is not a backup fails with the snapshot
// package's error, from its first bytes when it is not a snapshot at all.
func TestReadBackupRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, snapshot.ErrCorrupt},
		{"zeros", make([]byte, 1<<20), snapshot.ErrMagic},
		{"another version", []byte("\x89RAS\r\n\x1a\n\x00\x00\x00\x09"), snapshot.ErrVersion},
		{"a header then zeros", append([]byte("\x89RAS\r\n\x1a\n\x00\x00\x00\x01"), make([]byte, 1<<20)...), snapshot.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &countingReader{r: bytes.NewReader(tc.in)}
			_, err := ReadBackup(r)
			require.ErrorIs(t, err, tc.want)
			assert.LessOrEqual(t, r.n, 64<<10, "it stops reading at the first bad byte")
		})
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestBackupRemember: a backup's fingerprint follows its bytes, and one
// written with a remembered request restores a state that answers a
// retry under that ID as a success;
// an ID the backup held already is replaced, not doubled.
func TestBackupRemember(t *testing.T) {
	h := newHarness(t)
	h.pool("ports", "30000-30099")
	keyed := txn(alloc("ports", "30001", "a"))
	keyed.ID = "restore-1"
	require.Nil(t, h.one(keyed).Err)
	var one, two bytes.Buffer
	require.NoError(t, h.f.WriteBackup(&one))
	require.Nil(t, h.one(txn(alloc("ports", "30002", "a"))).Err)
	require.NoError(t, h.f.WriteBackup(&two))

	b1, err := ReadBackup(bytes.NewReader(one.Bytes()))
	require.NoError(t, err)
	again, err := ReadBackup(bytes.NewReader(one.Bytes()))
	require.NoError(t, err)
	b2, err := ReadBackup(bytes.NewReader(two.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, b1.Fingerprint(), again.Fingerprint(), "the same bytes")
	assert.NotEqual(t, b1.Fingerprint(), b2.Fingerprint(), "other bytes")
	assert.NotEqual(t, keyed.Fingerprint(), b1.Fingerprint())

	var out bytes.Buffer
	require.NoError(t, b1.Remember("restore-1", b1.Fingerprint()).Write(&out, nil, "c", MaxFeatureLevel))
	ss, err := snapshot.Read(bytes.NewReader(out.Bytes()))
	require.NoError(t, err)
	require.Len(t, ss.Requests, 1, "the backup's own restore-1 is replaced")
	assert.Equal(t, snapshot.Request{ID: "restore-1", Index: b1.Index(), Fingerprint: b1.Fingerprint(),
		Result: EncodeResult(&Result{Index: b1.Index()})}, ss.Requests[0])
	var plain bytes.Buffer
	require.NoError(t, b1.Write(&plain, nil, "c", MaxFeatureLevel))
	ss, err = snapshot.Read(bytes.NewReader(plain.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, keyed.Fingerprint(), ss.Requests[0].Fingerprint, "Remember leaves the backup as it was")

	dst := New(nil)
	require.NoError(t, dst.Restore(io.NopCloser(bytes.NewReader(out.Bytes()))))
	fp, ok := dst.RequestFingerprint("restore-1")
	assert.True(t, ok)
	assert.Equal(t, b1.Fingerprint(), fp)
	res, ok := dst.RequestResult("restore-1")
	require.True(t, ok)
	assert.Nil(t, res.Err, "remembered as a success")
}
