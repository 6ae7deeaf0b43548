package fsm

import (
	"fmt"
	"io"
	"sort"

	"github.com/rangealloc/rangealloc/snapshot"
)

// Backup is a backup decoded and checked for a restore (ReadBackup). A
// restore replaces pools, allocations, owners and request IDs, and keeps
// the running cluster's member table and cluster ID: Write puts them in
// place of the backup's, which belong to the cluster it was taken from.
type Backup struct {
	s *snapshot.State
}

// ReadBackup decodes a backup from r and checks everything a restore
// would: the format (package snapshot checks the magic and the version
// first, from the first bytes, so a stream of something else fails before
// more is read; then each section as it streams, and the checksum at the
// end) and what the state machine adds (ranges parse, bitmaps fit their
// ranges, remembered results decode). It holds the decoded state, never
// the stream's bytes.
func ReadBackup(r io.Reader) (*Backup, error) {
	ss, err := snapshot.Read(r)
	if err != nil {
		return nil, err
	}
	if _, err := importState(ss); err != nil {
		return nil, err
	}
	return &Backup{s: ss}, nil
}

// Index returns the log index the backup was taken at.
func (b *Backup) Index() uint64 { return b.s.Index }

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
