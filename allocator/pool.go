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

// The offset methods below are the value methods' counterparts for a
// caller that keeps its own data per offset (the Raft state machine keeps a
// record per allocated offset): it translates a value once (Range().Offset)
// and works in offsets from there, as Kubernetes' ipallocator works on its
// bitmap. They keep the pool consistent as the value methods do; callers
// need not reach into the Bitmap.

// Used returns the number of allocated offsets.
func (p *Pool) Used() int { return p.b.Used() }

// UsedStatic returns the number of allocated offsets in the static band.
func (p *Pool) UsedStatic() int { return p.b.UsedStatic() }

// UsedDynamic returns the number of allocated offsets in the dynamic band.
func (p *Pool) UsedDynamic() int { return p.b.UsedDynamic() }

// Free returns the number of free offsets.
func (p *Pool) Free() int { return p.b.Free() }

// HasOffset reports whether offset off is allocated; an offset outside
// [0, Size()) never is.
func (p *Pool) HasOffset(off int) bool { return p.b.Has(off) }

// AllocateOffset takes offset off. It fails, changing nothing, with
// ErrAllocated (the Kubernetes text for the range's kind, as Allocate)
// when off is held, and with ErrNotInRange when off is outside
// [0, Size()).
func (p *Pool) AllocateOffset(off int) error {
	if off < 0 || off >= p.b.Size() {
		return p.offsetOutside(off)
	}
	if !p.b.Allocate(off) {
		return AllocatedError(p.r.Kind())
	}
	return nil
}

// AllocateNextN takes n offsets, one at a time as AllocateNext does, the
// i-th from the random number rnd's i-th call returns, and returns them in
// the order taken. When fewer than n are free it fails with ErrFull,
// changing nothing and calling rnd never.
func (p *Pool) AllocateNextN(n int, rnd func() uint64) ([]int, error) {
	if p.b.Free() < n {
		return nil, ErrFull
	}
	offs := make([]int, n)
	for i := range offs {
		offs[i], _ = p.b.AllocateNext(rnd())
	}
	return offs, nil
}

// ReleaseOffset frees offset off. It fails, changing nothing, with
// ErrNotAllocated when off is free, and with ErrNotInRange when off is
// outside [0, Size()).
func (p *Pool) ReleaseOffset(off int) error {
	if off < 0 || off >= p.b.Size() {
		return p.offsetOutside(off)
	}
	if !p.b.Release(off) {
		return fmt.Errorf("%w: offset %d", ErrNotAllocated, off)
	}
	return nil
}

func (p *Pool) offsetOutside(off int) error {
	return fmt.Errorf("%w: offset %d of a range of %d", ErrNotInRange, off, p.b.Size())
}

// ForEachUsed calls fn for every allocated offset in ascending order until
// fn returns false.
func (p *Pool) ForEachUsed(fn func(off int) bool) { p.b.ForEach(fn) }

// NextUsed returns the lowest allocated offset at or after from, or -1.
func (p *Pool) NextUsed(from int) int { return p.b.NextSet(from) }

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
