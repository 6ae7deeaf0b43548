package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Read decodes a snapshot from r and checks it completely: magic, version,
// every length against its limit, every structural rule, the checksum, and
// that nothing follows the trailer. It returns a State only if all of it
// holds; otherwise the error matches ErrMagic, ErrVersion or ErrCorrupt and
// says what is wrong and at which byte, or wraps the I/O error of r.
//
// Read streams through a 64 KiB buffer. It never panics, whatever the bytes.
func Read(r io.Reader) (*State, error) {
	d := &decoder{src: r, buf: make([]byte, bufSize)}
	s, err := d.state()
	if err != nil {
		return nil, err
	}
	return s, nil
}

// decoder is a buffered reader that checksums what it consumes. Bytes are
// hashed in bulk, when the buffer is compacted and before the trailer, so
// the checksum costs no per-field call.
//
//	buf:  [ hashed, gone | consumed, not hashed | unread   | free ]
//	      0              h                      r          w      len(buf)
type decoder struct {
	src  io.Reader
	buf  []byte
	h    int    // buf[h:r] is consumed but not yet hashed
	r    int    // buf[r:w] is unread
	w    int    //
	base int64  // the stream offset of buf[0]
	crc  uint32 // CRC-32C of the stream up to buf[h]
	err  error  // the first error of src (io.EOF at its end); sticks
	// version is the format version read from the header.
	version uint32
}

// off is the stream offset of the next unread byte.
func (d *decoder) off() int64 { return d.base + int64(d.r) }

// fill makes at least n ≤ len(buf) unread bytes available, or returns the
// error of src that prevents it.
func (d *decoder) fill(n int) error {
	if d.w-d.r >= n {
		return nil
	}
	if len(d.buf)-d.r < n {
		d.crc = crc32.Update(d.crc, castagnoli, d.buf[d.h:d.r])
		d.w = copy(d.buf, d.buf[d.r:d.w])
		d.base += int64(d.r)
		d.h, d.r = 0, 0
	}
	for empty := 0; d.w-d.r < n && d.err == nil; {
		m, err := d.src.Read(d.buf[d.w:])
		switch {
		case m < 0 || m > len(d.buf)-d.w:
			d.err = fmt.Errorf("reader returned an impossible count %d", m)
		case err != nil:
			d.w += m
			d.err = err
		case m == 0:
			if empty++; empty == 100 {
				d.err = io.ErrNoProgress
			}
		default:
			d.w += m
			empty = 0
		}
	}
	if d.w-d.r >= n {
		return nil
	}
	return d.err
}

// short reports that what could not be read because the stream ended or
// failed.
func (d *decoder) short(what string) error {
	at := d.base + int64(d.w)
	if d.err == io.EOF || d.err == nil { // nil cannot happen; it is not an I/O error either
		return fmt.Errorf("%w: truncated at byte %d, in %s", ErrCorrupt, at, what)
	}
	return fmt.Errorf("snapshot: read at byte %d, in %s: %w", at, what, d.err)
}

// corrupt reports err, a broken rule, at the field starting at byte start.
func corrupt(start int64, err error) error {
	return fmt.Errorf("%w: at byte %d: %w", ErrCorrupt, start, err)
}

// next consumes n ≤ len(buf) bytes and returns them; they are valid until
// the next call.
func (d *decoder) next(what string, n int) ([]byte, error) {
	if d.fill(n) != nil {
		return nil, d.short(what)
	}
	p := d.buf[d.r : d.r+n]
	d.r += n
	return p, nil
}

// uvarint consumes a minimal-length unsigned varint.
func (d *decoder) uvarint(what string) (uint64, error) {
	if d.w-d.r < binary.MaxVarintLen64 {
		_ = d.fill(binary.MaxVarintLen64) // a short stream is judged below
	}
	x, n := binary.Uvarint(d.buf[d.r:d.w])
	switch {
	case n == 0 && d.w-d.r < binary.MaxVarintLen64:
		return 0, d.short(what)
	case n <= 0: // n == 0: ten bytes, all with the continuation bit
		return 0, corrupt(d.off(), fmt.Errorf("%s overflows 64 bits", what))
	case n > 1 && d.buf[d.r+n-1] == 0:
		return 0, corrupt(d.off(), fmt.Errorf("%s is a varint longer than needed", what))
	}
	d.r += n
	return x, nil
}

// length consumes a length and checks it against [lo, hi].
func (d *decoder) length(what string, lo, hi uint64) (int, error) {
	start := d.off()
	n, err := d.uvarint(what)
	if err != nil {
		return 0, err
	}
	if err := checkLen(what, n, lo, hi); err != nil {
		return 0, corrupt(start, err)
	}
	return int(n), nil
}

// str consumes a string of lo to hi ≤ len(buf) bytes.
func (d *decoder) str(what string, lo, hi uint64) (string, error) {
	n, err := d.length(what, lo, hi)
	if err != nil {
		return "", err
	}
	p, err := d.next(what, n)
	return string(p), err
}

// bytes consumes a byte string of at most hi bytes; empty is nil. hi may
// exceed the buffer: the bytes are copied through it.
func (d *decoder) bytes(what string, hi uint64) ([]byte, error) {
	n, err := d.length(what, 0, hi)
	if err != nil || n == 0 {
		return nil, err
	}
	out := make([]byte, n)
	for k := 0; k < n; {
		if d.fill(1) != nil {
			return nil, d.short(what)
		}
		c := copy(out[k:], d.buf[d.r:d.w])
		d.r += c
		k += c
	}
	return out, nil
}

// tag consumes a section tag.
func (d *decoder) tag(want byte, section string) error {
	start := d.off()
	p, err := d.next(section+" section tag", 1)
	if err != nil {
		return err
	}
	if p[0] != want {
		return corrupt(start, fmt.Errorf("found 0x%02x where the %s section tag %q belongs", p[0], section, want))
	}
	return nil
}

func (d *decoder) state() (*State, error) {
	s := new(State)
	var err error
	if err = d.header(s); err != nil {
		return nil, err
	}
	if s.Pools, err = d.pools(); err != nil {
		return nil, err
	}
	if s.Requests, err = d.requests(); err != nil {
		return nil, err
	}
	if s.Members, err = d.members(); err != nil {
		return nil, err
	}
	if d.version >= 2 {
		if err := d.tag(tagCluster, "cluster"); err != nil {
			return nil, err
		}
		start := d.off()
		if s.ClusterID, err = d.str("cluster ID", 0, maxCluster); err != nil {
			return nil, err
		}
		if err := checkClusterID(s.ClusterID); err != nil {
			return nil, corrupt(start, err)
		}
		start = d.off()
		p, err := d.next("cluster flags", 1)
		if err != nil {
			return nil, err
		}
		if p[0]&^flagBackup != 0 {
			return nil, corrupt(start, fmt.Errorf("cluster flags 0x%02x: unknown bits", p[0]))
		}
		s.FromBackup = p[0]&flagBackup != 0
	}
	if d.version >= 3 {
		if err := d.services(s); err != nil {
			return nil, err
		}
	}
	if d.version >= 4 {
		if err := d.tag(tagFeature, "feature level"); err != nil {
			return nil, err
		}
		start := d.off()
		if s.FeatureLevel, err = d.uvarint("feature level"); err != nil {
			return nil, err
		}
		if s.FeatureLevel < 2 || s.FeatureLevel > maxFeature {
			return nil, corrupt(start, fmt.Errorf("feature level %d: a version 4 snapshot holds 2 to %d", s.FeatureLevel, maxFeature))
		}
	}
	return s, d.trailer()
}

func (d *decoder) header(s *State) error {
	if err := d.fill(len(magic)); err != nil {
		got := d.buf[d.r:d.w]
		if !errors.Is(err, io.EOF) || string(got) != magic[:len(got)] {
			return d.badMagic(got)
		}
		return d.short("magic")
	}
	if got := d.buf[:len(magic)]; string(got) != magic {
		return d.badMagic(got)
	}
	d.r += len(magic)
	p, err := d.next("version", 4)
	if err != nil {
		return err
	}
	if v := binary.BigEndian.Uint32(p); v < 1 || v > version {
		return fmt.Errorf("%w %d: this build reads versions 1 to %d", ErrVersion, v, version)
	} else {
		d.version = v
	}
	if p, err = d.next("index", 8); err != nil {
		return err
	}
	s.Index = binary.BigEndian.Uint64(p)
	if p, err = d.next("term", 8); err != nil {
		return err
	}
	s.Term = binary.BigEndian.Uint64(p)
	return nil
}

func (d *decoder) badMagic(got []byte) error {
	if d.err != nil && !errors.Is(d.err, io.EOF) {
		return d.short("magic")
	}
	return fmt.Errorf("%w: starts with % x, want % x", ErrMagic, got, magic)
}

// trailer checks the checksum and that the stream ends right after it.
func (d *decoder) trailer() error {
	d.crc = crc32.Update(d.crc, castagnoli, d.buf[d.h:d.r])
	d.h = d.r
	computed := d.crc
	start := d.off()
	p, err := d.next("checksum", 4)
	if err != nil {
		return err
	}
	d.h = d.r // the trailer is not part of what it covers
	if stored := binary.BigEndian.Uint32(p); stored != computed {
		return fmt.Errorf("%w: checksum mismatch: stored 0x%08x, computed 0x%08x (trailer at byte %d)",
			ErrCorrupt, stored, computed, start)
	}
	switch err := d.fill(1); {
	case err == nil:
		return fmt.Errorf("%w: trailing data after the checksum, from byte %d", ErrCorrupt, d.off())
	case err != io.EOF:
		return d.short("end of stream")
	}
	return nil
}
