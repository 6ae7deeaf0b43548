package snapshot

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// Write encodes s to w in the current format version. It first checks s
// against every rule Read checks and writes nothing if one fails (the error
// matches ErrInvalid). The encoding streams through a 64 KiB buffer; the
// checksum is computed as the buffer drains. An error of w is returned
// wrapped; the bytes written so far are then a truncated snapshot, which
// Read refuses.
func Write(w io.Writer, s *State) error {
	if err := validate(s); err != nil {
		return err
	}
	return encode(w, s)
}

// encode writes s without checking it: Write after validate, and tests
// that need a well-sealed snapshot of an invalid State.
func encode(w io.Writer, s *State) error {
	h := crc32.New(castagnoli)
	e := &encoder{w: bufio.NewWriterSize(io.MultiWriter(w, h), bufSize)}
	e.header(s)
	e.pools(s.Pools)
	e.requests(s.Requests)
	e.members(s.Members, formatOf(s) >= 4)
	e.byte(tagCluster)
	e.str(s.ClusterID)
	var flags byte
	if s.FromBackup {
		flags |= flagBackup
	}
	e.byte(flags)
	e.services(s.Network, s.Services)
	e.uvarint(s.ServicesFreed)
	if formatOf(s) >= 4 {
		e.byte(tagFeature)
		e.uvarint(s.FeatureLevel)
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	if e.err != nil {
		return fmt.Errorf("snapshot: write: %w", e.err)
	}
	var trailer [4]byte
	binary.BigEndian.PutUint32(trailer[:], h.Sum32())
	if _, err := w.Write(trailer[:]); err != nil {
		return fmt.Errorf("snapshot: write checksum: %w", err)
	}
	return nil
}

// formatOf is the format version Write uses for s: the oldest that holds
// it, so that every member of a cluster at s's feature level reads it.
func formatOf(s *State) uint32 {
	if s.FeatureLevel <= 1 {
		return versionLevel1
	}
	return version
}

// encoder appends fields to a buffered writer. The first error sticks and
// stops the loops early; every method is a no-op after it.
type encoder struct {
	w       *bufio.Writer
	err     error
	scratch [binary.MaxVarintLen64]byte
}

func (e *encoder) write(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}

func (e *encoder) uvarint(x uint64) {
	e.write(binary.AppendUvarint(e.scratch[:0], x))
}

func (e *encoder) u64(x uint64) {
	e.write(binary.BigEndian.AppendUint64(e.scratch[:0], x))
}

func (e *encoder) byte(c byte) {
	if e.err == nil {
		e.err = e.w.WriteByte(c)
	}
}

func (e *encoder) bytes(p []byte) {
	e.uvarint(uint64(len(p)))
	e.write(p)
}

func (e *encoder) str(s string) {
	e.uvarint(uint64(len(s)))
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
}

func (e *encoder) header(s *State) {
	if e.err == nil {
		_, e.err = e.w.WriteString(magic)
	}
	e.write(binary.BigEndian.AppendUint32(e.scratch[:0], formatOf(s)))
	e.u64(s.Index)
	e.u64(s.Term)
}

func (e *encoder) pools(pools []Pool) {
	e.byte(tagPools)
	e.uvarint(uint64(len(pools)))
	for i := 0; i < len(pools) && e.err == nil; i++ {
		p := &pools[i]
		e.str(p.Name)
		e.str(p.Range)
		e.bytes(p.Data)
		e.uvarint(uint64(len(p.Allocations)))
		for _, a := range p.Allocations {
			e.str(a.Owner)
			var flags byte
			if a.Static {
				flags |= flagStatic
			}
			e.byte(flags)
			e.uvarint(a.Revision)
		}
	}
}

func (e *encoder) requests(reqs []Request) {
	e.byte(tagReqs)
	e.uvarint(uint64(len(reqs)))
	for i := 0; i < len(reqs) && e.err == nil; i++ {
		r := &reqs[i]
		e.str(r.ID)
		e.uvarint(r.Index)
		e.u64(r.Fingerprint)
		e.bytes(r.Result)
	}
}

func (e *encoder) members(members []Member, flags bool) {
	e.byte(tagMembers)
	e.uvarint(uint64(len(members)))
	for i := 0; i < len(members) && e.err == nil; i++ {
		m := &members[i]
		e.str(m.ID)
		e.str(m.RaftAddr)
		e.str(m.APIAddr)
		if flags {
			var f byte
			if m.Nonvoter {
				f |= flagNonvoter
			}
			e.byte(f)
		}
	}
}

func (e *encoder) services(n *Network, svcs []Service) {
	e.byte(tagSvc)
	if n == nil {
		e.byte(0)
	} else {
		e.byte(1)
		e.uvarint(uint64(len(n.Families)))
		for _, f := range n.Families {
			e.str(f)
		}
		e.str(n.IPv4Pool)
		e.str(n.IPv6Pool)
		e.str(n.NodePortPool)
	}
	e.uvarint(uint64(len(svcs)))
	for i := 0; i < len(svcs) && e.err == nil; i++ {
		e.str(svcs[i].Key)
		e.uvarint(svcs[i].Revision)
		e.bytes(svcs[i].Spec)
	}
}
