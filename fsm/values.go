package fsm

import (
	"encoding/binary"
	"net/netip"
	"strconv"

	"github.com/rangealloc/rangealloc/allocator"
)

// valueFormatter writes the values of one pool's range as Range.Value
// does, but appended to a buffer, so that a count allocation formats its
// values into one buffer and one string instead of a string each.
type valueFormatter struct {
	r     allocator.Range
	kind  byte // 4, 16 (IP ranges), 'p' (port ranges), 0 (any other: Range.Value)
	addr  [16]byte
	first int
}

func newValueFormatter(r allocator.Range) valueFormatter {
	f := valueFormatter{r: r}
	switch r := r.(type) {
	case *allocator.IPRange:
		a := r.Prefix().Addr()
		if a.Is4() {
			b := a.As4()
			copy(f.addr[:], b[:])
			f.kind = 4
		} else {
			f.addr = a.As16()
			f.kind = 16
		}
	case *allocator.PortRange:
		if first, err := strconv.Atoi(r.Value(0)); err == nil {
			f.first, f.kind = first, 'p'
		}
	}
	return f
}

// appendValue appends r.Value(off).
func (f *valueFormatter) appendValue(dst []byte, off int) []byte {
	switch f.kind {
	case 4:
		var b [4]byte
		copy(b[:], f.addr[:4])
		binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])|uint32(off+1))
		return netip.AddrFrom4(b).AppendTo(dst)
	case 16:
		b := f.addr
		binary.BigEndian.PutUint32(b[12:], binary.BigEndian.Uint32(b[12:])|uint32(off+1))
		return netip.AddrFrom16(b).AppendTo(dst)
	case 'p':
		return strconv.AppendInt(dst, int64(f.first+off), 10)
	}
	return append(dst, f.r.Value(off)...)
}

// maxLen is the longest value appendValue writes for an IP or port range
// (an IPv6 address is at most 39 bytes): a first size for buffers, not a
// limit.
func (f *valueFormatter) maxLen() int {
	switch f.kind {
	case 4:
		return len("255.255.255.255")
	case 'p':
		return len("65535")
	}
	return len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
}

// value returns r.Value(off), or same when it is that value already (a
// release names the value it frees), without formatting a new string.
func (f *valueFormatter) value(off int, same string) string {
	var buf [64]byte
	b := f.appendValue(buf[:0], off)
	if string(b) == same {
		return same
	}
	return string(b)
}
