package allocator

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Bitmap is a set of offsets [0, size), split into a static band [0, static)
// and a dynamic band [static, size). Bit i of the set is bit i%64 of
// words[i/64]. A Bitmap is not safe for concurrent use; the state machine
// that owns it holds a lock.
type Bitmap struct {
	words  []uint64
	size   int
	static int // B: the size of the static band; 0 means no static band
	// usedStatic and usedDynamic always equal the number of set bits in
	// [0, static) and [static, size).
	usedStatic, usedDynamic int
}

// NewBitmap returns an empty bitmap of size offsets whose first static
// offsets form the static band. It panics on a negative size or a static
// band larger than size: both are programming errors, as Range never
// produces them.
func NewBitmap(size, static int) *Bitmap {
	if size < 0 || static < 0 || static > size {
		panic(fmt.Sprintf("allocator: NewBitmap(%d, %d): bad sizes", size, static))
	}
	return &Bitmap{words: make([]uint64, (size+63)/64), size: size, static: static}
}

// Size returns the number of offsets.
func (b *Bitmap) Size() int { return b.size }

// StaticSize returns B, the size of the static band.
func (b *Bitmap) StaticSize() int { return b.static }

// Used returns the number of set offsets.
func (b *Bitmap) Used() int { return b.usedStatic + b.usedDynamic }

// Free returns the number of free offsets.
func (b *Bitmap) Free() int { return b.size - b.Used() }

// UsedStatic returns the number of set offsets in the static band.
func (b *Bitmap) UsedStatic() int { return b.usedStatic }

// UsedDynamic returns the number of set offsets in the dynamic band.
func (b *Bitmap) UsedDynamic() int { return b.usedDynamic }

// Has reports whether offset off is set. Offsets outside [0, size) are never set.
func (b *Bitmap) Has(off int) bool {
	if off < 0 || off >= b.size {
		return false
	}
	return b.words[off>>6]&(1<<(uint(off)&63)) != 0
}

// Allocate sets offset off. It returns false, changing nothing, when off is
// outside [0, size) or already set.
func (b *Bitmap) Allocate(off int) bool {
	if off < 0 || off >= b.size {
		return false
	}
	w, m := off>>6, uint64(1)<<(uint(off)&63)
	if b.words[w]&m != 0 {
		return false
	}
	b.words[w] |= m
	b.count(off, 1)
	return true
}

// Release clears offset off. It returns false, changing nothing, when off is
// outside [0, size) or not set.
func (b *Bitmap) Release(off int) bool {
	if off < 0 || off >= b.size {
		return false
	}
	w, m := off>>6, uint64(1)<<(uint(off)&63)
	if b.words[w]&m == 0 {
		return false
	}
	b.words[w] &^= m
	b.count(off, -1)
	return true
}

func (b *Bitmap) count(off, delta int) {
	if off < b.static {
		b.usedStatic += delta
	} else {
		b.usedDynamic += delta
	}
}

// AllocateNext sets and returns a free offset chosen the Kubernetes way from
// the caller's random number rnd: start at dynamic-band offset rnd mod (size
// of the dynamic band) and scan upward, wrapping around inside the dynamic
// band; only when that band is full, do the same in the static band with
// start rnd mod B. It returns false when every offset is set.
func (b *Bitmap) AllocateNext(rnd uint64) (int, bool) {
	if b.usedDynamic < b.size-b.static {
		off := b.scan(b.static, b.size, rnd)
		b.words[off>>6] |= 1 << (uint(off) & 63)
		b.usedDynamic++
		return off, true
	}
	if b.usedStatic < b.static {
		off := b.scan(0, b.static, rnd)
		b.words[off>>6] |= 1 << (uint(off) & 63)
		b.usedStatic++
		return off, true
	}
	return 0, false
}

// scan returns the first clear offset in [lo, hi) at or after lo+rnd%(hi-lo),
// wrapping around to lo. The caller guarantees that [lo, hi) has one.
func (b *Bitmap) scan(lo, hi int, rnd uint64) int {
	start := lo + int(rnd%uint64(hi-lo))
	if off := b.firstClear(start, hi); off >= 0 {
		return off
	}
	if off := b.firstClear(lo, start); off >= 0 {
		return off
	}
	panic("allocator: band counts disagree with the bitmap") // unreachable while the invariants hold
}

// firstClear returns the lowest clear offset in [from, to), or -1, reading
// 64 offsets per step.
func (b *Bitmap) firstClear(from, to int) int {
	if from >= to {
		return -1
	}
	w := from >> 6
	// Treat the offsets below from in the first word as set.
	word := b.words[w] | (uint64(1)<<(uint(from)&63) - 1)
	last := (to - 1) >> 6
	for {
		if word != ^uint64(0) {
			off := w<<6 + bits.TrailingZeros64(^word)
			if off < to {
				return off
			}
			return -1
		}
		if w == last {
			return -1
		}
		w++
		word = b.words[w]
	}
}

// ForEach calls fn for every set offset in ascending order until fn returns false.
func (b *Bitmap) ForEach(fn func(off int) bool) {
	for w, word := range b.words {
		for word != 0 {
			t := bits.TrailingZeros64(word)
			if !fn(w<<6 + t) {
				return
			}
			word &= word - 1
		}
	}
}

// NextSet returns the lowest set offset at or after from, or -1.
func (b *Bitmap) NextSet(from int) int {
	if from < 0 {
		from = 0
	}
	if from >= b.size {
		return -1
	}
	w := from >> 6
	word := b.words[w] &^ (uint64(1)<<(uint(from)&63) - 1)
	for {
		if word != 0 {
			return w<<6 + bits.TrailingZeros64(word)
		}
		w++
		if w == len(b.words) {
			return -1
		}
		word = b.words[w]
	}
}

// Clone returns an independent copy.
func (b *Bitmap) Clone() *Bitmap {
	c := *b
	c.words = append([]uint64(nil), b.words...)
	return &c
}

// Equal reports whether two bitmaps hold the same offsets with the same size and bands.
func (b *Bitmap) Equal(o *Bitmap) bool {
	if b.size != o.size || b.static != o.static || b.Used() != o.Used() {
		return false
	}
	for i := range b.words {
		if b.words[i] != o.words[i] {
			return false
		}
	}
	return true
}

// Bytes returns the set as Kubernetes stores it in RangeAllocation.Data:
// the big-endian bytes, without leading zeros, of the integer whose bit i is
// offset i (what math/big.Int.Bytes returns). The empty set is empty.
//
//	offsets {0} -> 01    {8} -> 01 00    {0, 9} -> 02 01
func (b *Bitmap) Bytes() []byte {
	n := len(b.words)
	for n > 0 && b.words[n-1] == 0 {
		n--
	}
	if n == 0 {
		return []byte{}
	}
	buf := make([]byte, 8*n)
	for i := 0; i < n; i++ {
		binary.BigEndian.PutUint64(buf[8*(n-1-i):], b.words[i])
	}
	lead := bits.LeadingZeros64(b.words[n-1]) / 8
	return buf[lead:]
}

// SetBytes replaces the set with the one encoded in data (the layout of
// Bytes; leading zero bytes are accepted). When data sets an offset at or
// beyond Size it returns an error matching ErrCorruptData and changes nothing.
func (b *Bitmap) SetBytes(data []byte) error {
	for len(data) > 0 && data[0] == 0 {
		data = data[1:]
	}
	if len(data) > 0 {
		bitLen := 8*len(data) - bits.LeadingZeros8(data[0])
		if bitLen > b.size {
			return fmt.Errorf("%w: highest offset %d, size %d", ErrCorruptData, bitLen-1, b.size)
		}
	}
	// Validated: from here on nothing can fail, so decode in place.
	i := 0
	for ; len(data) >= 8; i++ {
		b.words[i] = binary.BigEndian.Uint64(data[len(data)-8:])
		data = data[:len(data)-8]
	}
	if len(data) > 0 {
		var w uint64
		for _, c := range data {
			w = w<<8 | uint64(c)
		}
		b.words[i] = w
		i++
	}
	clear(b.words[i:])
	b.usedStatic, b.usedDynamic = b.countRange(0, b.static), b.countRange(b.static, b.size)
	return nil
}

// countRange returns the number of set offsets in [lo, hi).
func (b *Bitmap) countRange(lo, hi int) int {
	if lo >= hi {
		return 0
	}
	n := 0
	first, last := lo>>6, (hi-1)>>6
	for w := first; w <= last; w++ {
		word := b.words[w]
		if w == first {
			word &^= uint64(1)<<(uint(lo)&63) - 1
		}
		if w == last && hi&63 != 0 {
			word &= uint64(1)<<(uint(hi)&63) - 1
		}
		n += bits.OnesCount64(word)
	}
	return n
}
