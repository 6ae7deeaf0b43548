package allocator

import "fmt"

// Band names where an offset lies.
type Band uint8

// The bands of a pool.
const (
	BandStatic  Band = 1
	BandDynamic Band = 2
)

func (b Band) String() string {
	if b == BandStatic {
		return "static"
	}
	return "dynamic"
}

// Pool is a Range with the Bitmap of its allocated offsets. Like Bitmap it
// is not safe for concurrent use.
type Pool struct {
	r Range
	b *Bitmap
}

// NewPool returns an empty pool over r.
func NewPool(r Range) *Pool {
	return &Pool{r: r, b: NewBitmap(r.Size(), r.StaticSize())}
}

// Range returns the pool's range.
func (p *Pool) Range() Range { return p.r }

// Bitmap returns the pool's bitmap. Callers that change it directly keep the
// pool consistent, as it holds no other state.
func (p *Pool) Bitmap() *Bitmap { return p.b }

// Band returns the band of offset off.
func (p *Pool) Band(off int) Band {
	if off < p.b.StaticSize() {
		return BandStatic
	}
	return BandDynamic
}

// Allocate takes the named value. Checks run in Kubernetes' order: parse
// (ErrInvalidValue), range (NotInRangeError), free (ErrAllocated, with
// "provided IP is already allocated" or "provided port is already
// allocated").
func (p *Pool) Allocate(value string) (int, error) {
	off, err := p.r.Offset(value)
	if err != nil {
		return 0, err
	}
	if !p.b.Allocate(off) {
		return 0, AllocatedError(p.r.Kind())
	}
	return off, nil
}

// AllocateNext takes a value chosen from the random number rnd (see
// Bitmap.AllocateNext), or fails with ErrFull.
func (p *Pool) AllocateNext(rnd uint64) (int, error) {
	off, ok := p.b.AllocateNext(rnd)
	if !ok {
		return 0, ErrFull
	}
	return off, nil
}

// Release frees the named value. Errors: ErrInvalidValue, NotInRangeError,
// ErrNotAllocated.
func (p *Pool) Release(value string) (int, error) {
	off, err := p.r.Offset(value)
	if err != nil {
		return 0, err
	}
	if !p.b.Release(off) {
		return 0, fmt.Errorf("%w: %s", ErrNotAllocated, value)
	}
	return off, nil
}

// Has reports whether the named value is allocated; a value that does not
// parse or lies outside the range is not.
func (p *Pool) Has(value string) bool {
	off, err := p.r.Offset(value)
	return err == nil && p.b.Has(off)
}

// Snapshot returns the RangeAllocation record of the pool: its canonical
// range string and its bitmap bytes (see Bitmap.Bytes).
func (p *Pool) Snapshot() (rng string, data []byte) {
	return p.r.String(), p.b.Bytes()
}

// Restore replaces the pool's allocations with a RangeAllocation record. It
// refuses, changing nothing, a record of another range (ErrRangeMismatch) or
// with offsets beyond the pool's size (ErrCorruptData).
func (p *Pool) Restore(rng string, data []byte) error {
	if rng != p.r.String() {
		return fmt.Errorf("%w: record is for %q, pool is %q", ErrRangeMismatch, rng, p.r.String())
	}
	return p.b.SetBytes(data)
}

// Clone returns an independent copy of the pool.
func (p *Pool) Clone() *Pool { return &Pool{r: p.r, b: p.b.Clone()} }
