package fsm

import (
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"sort"

	"github.com/rangealloc/rangealloc/snapshot"
)

// Backup is a backup decoded and checked for a restore (ReadBackup). A
// restore replaces pools, allocations, owners and request IDs, and keeps
// the running cluster's member table and cluster ID: Write puts them in
// place of the backup's, which belong to the cluster it was taken from.
type Backup struct {
	s  *snapshot.State
	fp uint64
}

// ReadBackup decodes a backup from r and checks everything a restore
// would: the format (package snapshot checks the magic and the version
// first, from the first bytes, so a stream of something else fails before
// more is read; then each section as it streams, and the checksum at the
// end) and what the state machine adds (ranges parse, bitmaps fit their
// ranges, remembered results decode). It holds the decoded state, never
// the stream's bytes. Its Fingerprint hashes the bytes it read.
func ReadBackup(r io.Reader) (*Backup, error) {
	h := fnv.New64a()
	h.Write([]byte{restoreTag})
	ss, err := snapshot.Read(hashReader{r, h})
	if err != nil {
		return nil, err
	}
	if _, err := importState(ss); err != nil {
		return nil, err
	}
	return &Backup{s: ss, fp: h.Sum64()}, nil
}

// restoreTag starts what a backup's fingerprint hashes, where a request's
// has its Kind: a restore and a write under one request ID never share a
// fingerprint.
const restoreTag = 0xff

type hashReader struct {
	r io.Reader
	h hash.Hash64
}

func (hr hashReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.h.Write(p[:n])
	return n, err
}

// Index returns the log index the backup was taken at.
func (b *Backup) Index() uint64 { return b.s.Index }

// ClusterID returns the ID of the cluster the backup was taken of.
func (b *Backup) ClusterID() string { return b.s.ClusterID }

// Fingerprint identifies the backup's bytes, as a request's fingerprint
// identifies a write: a restore retried with the same backup under the
// same request ID is the same request.
func (b *Backup) Fingerprint() uint64 { return b.fp }

// MemberIDs returns the IDs of the member table the backup holds (that
// of the cluster it was taken of; a restore keeps the restoring one's).
func (b *Backup) MemberIDs() []string {
	ids := make([]string, len(b.s.Members))
	for i, m := range b.s.Members {
		ids[i] = m.ID
	}
	return ids
}

// Remember returns the backup with request id, of fingerprint fp,
// remembered as its newest request (in place of one of the same ID the
// backup holds): a restore of it records its own request ID in the very
// state it installs, so that no retry can find the state restored and the
// ID unknown. Its remembered answer is a success.
func (b *Backup) Remember(id string, fp uint64) *Backup {
	out := *b.s
	out.Requests = make([]snapshot.Request, 0, len(b.s.Requests)+1)
	for _, r := range b.s.Requests {
		if r.ID != id {
			out.Requests = append(out.Requests, r)
		}
	}
	out.Requests = append(out.Requests, snapshot.Request{ID: id, Index: b.s.Index, Fingerprint: fp,
		Result: EncodeResult(&Result{Index: b.s.Index})})
	return &Backup{s: &out, fp: b.fp}
}

// Write writes the backup in the snapshot format with members as its
// member table, clusterID as its cluster ID and level as its feature level:
// the running cluster's, so that the format is one every member reads. The
// backup itself is left as it was.
func (b *Backup) Write(w io.Writer, members []Member, clusterID string, level int) error {
	out := *b.s
	out.ClusterID, out.FromBackup, out.FeatureLevel = clusterID, true, uint64(level)
	out.Members = make([]snapshot.Member, 0, len(members))
	for _, m := range members {
		out.Members = append(out.Members, snapshot.Member{ID: m.ID, RaftAddr: m.RaftAddr, APIAddr: m.APIAddr, Nonvoter: m.Nonvoter})
	}
	sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].ID < out.Members[j].ID })
	if err := snapshot.Write(w, &out); err != nil {
		return fmt.Errorf("write backup: %w", err)
	}
	return nil
}
