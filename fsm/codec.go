package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// errShort is returned by a decoder that ran out of bytes.
var errShort = errors.New("truncated")

// encoder appends rangealloc's compact binary form: uvarints, fixed 8-byte
// seeds, and length-prefixed strings.
type encoder struct{ b []byte }

func (e *encoder) u8(v byte)        { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) u64(v uint64)     { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }

// value writes the value at off as str writes a string, formatting it in
// place.
func (e *encoder) value(f *valueFormatter, off int) {
	at := len(e.b)
	e.b = f.appendValue(append(e.b, 0), off)
	if n := len(e.b) - at - 1; n < 0x80 {
		e.b[at] = byte(n) // a one-byte uvarint
		return
	}
	v := string(e.b[at+1:])
	e.b = e.b[:at]
	e.str(v)
}

func (e *encoder) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// decoder reads what encoder wrote. The first failure sticks in err and
// every later read returns zero values, so callers check err once.
type decoder struct {
	b   []byte
	err error
	// check makes str skip its bytes instead of copying them: for passes
	// that only validate.
	check bool
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) u8() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail("%w: want a byte", errShort)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("%w: bad uvarint", errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.err != nil || len(d.b) < 8 {
		d.fail("%w: want 8 bytes", errShort)
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// raw reads a string's bytes, at most max of them. ok is false on a
// failure, and when the decoder only checks (no string is made then).
func (d *decoder) raw(max int) (b []byte, ok bool) {
	n := d.uvarint()
	if d.err != nil {
		return nil, false
	}
	if n > uint64(max) || n > uint64(len(d.b)) {
		d.fail("string of %d bytes (limit %d, %d left)", n, max, len(d.b))
		return nil, false
	}
	b, d.b = d.b[:n], d.b[n:]
	return b, !d.check
}

// str reads a string of at most max bytes.
func (d *decoder) str(max int) string {
	b, ok := d.raw(max)
	if !ok {
		return ""
	}
	return string(b)
}

// strLike is str, returning prev itself when the string equals it.
func (d *decoder) strLike(max int, prev string) string {
	b, ok := d.raw(max)
	if !ok {
		return ""
	}
	if string(b) == prev {
		return prev
	}
	return string(b)
}

// sharedValuesFrom is the number of operations from which a transaction's
// values are parts of one string (strShared).
const sharedValuesFrom = 16

// strShared is str for a decoder reading data: the string is a part of
// *shared, data as a string, made on first use, instead of a copy of its
// own.
func (d *decoder) strShared(max int, data []byte, shared *string) string {
	b, ok := d.raw(max)
	if !ok || len(b) == 0 {
		return ""
	}
	if *shared == "" {
		*shared = string(data)
	}
	end := len(data) - len(d.b)
	return (*shared)[end-len(b) : end]
}

func (d *decoder) bool() bool { return d.u8() != 0 }

// count reads a count of items, each at least minSize bytes, bounded by max
// and by what is left, so a corrupt count cannot make the caller allocate.
func (d *decoder) count(max, minSize int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(max) || n*uint64(minSize) > uint64(len(d.b)) {
		d.fail("count %d (limit %d, %d bytes left)", n, max, len(d.b))
		return 0
	}
	return int(n)
}

// done fails unless every byte was read.
func (d *decoder) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}
