package fsm

import (
	"errors"
	"regexp"

	"github.com/rangealloc/rangealloc/allocator"
)

// record is what the state machine knows of one allocated offset besides its
// bit: the owner, the mode and the log index that made it.
type record struct {
	owner string
	rev   uint64 // the top bit holds the mode: set for static
}

const staticBit = 1 << 63

func (r record) static() bool     { return r.rev&staticBit != 0 }
func (r record) revision() uint64 { return r.rev &^ staticBit }

// pageBits sets the page size of the metadata: pages are allocated on first
// use, so a mostly empty /12 pool costs a few pages, not 24 MiB.
const pageBits = 10

// records maps offsets to records in lazily allocated pages.
type records [][]record

func (m records) get(off int) record {
	if p := off >> pageBits; p < len(m) && m[p] != nil {
		return m[p][off&(1<<pageBits-1)]
	}
	return record{}
}

func (m *records) set(off int, r record) {
	p := off >> pageBits
	for len(*m) <= p {
		*m = append(*m, nil)
	}
	if (*m)[p] == nil {
		(*m)[p] = make([]record, 1<<pageBits)
	}
	(*m)[p][off&(1<<pageBits-1)] = r
}

func (m records) clone() records {
	c := make(records, len(m))
	for i, p := range m {
		if p != nil {
			c[i] = append([]record(nil), p...)
		}
	}
	return c
}

// pool is a named allocator.Pool with the records of its allocations. The
// records of free offsets are zero.
type pool struct {
	name string
	p    *allocator.Pool
	recs records
	// vf formats the range's values; made on first use.
	vf *valueFormatter
}

func (p *pool) allocation(off int) Allocation {
	return p.allocationRecord(off, p.recs.get(off), p.p.Range().Value(off))
}

// allocationRecord is allocation with the record at off already read and
// its value formatted. It reads only the pool's name and range, which
// never change: results call it after the apply (opDone).
func (p *pool) allocationRecord(off int, r record, value string) Allocation {
	return Allocation{Pool: p.name, Value: value, Owner: r.owner, Static: r.static(),
		InStatic: off < p.p.Range().StaticSize(), Revision: r.revision()}
}

func (p *pool) formatter() *valueFormatter {
	if p.vf == nil {
		f := newValueFormatter(p.p.Range())
		p.vf = &f
	}
	return p.vf
}

// take records an allocation at off, and returns its record.
func (p *pool) take(off int, owner string, static bool, index uint64) record {
	rev := index
	if static {
		rev |= staticBit
	}
	r := record{owner: owner, rev: rev}
	p.recs.set(off, r)
	return r
}

// allocate takes offset off, whose record take writes next: it fails
// with AlreadyAllocated, naming the holder, when off is held.
func (p *pool) allocate(off int) *Error {
	if err := p.p.AllocateOffset(off); err != nil {
		e := allocError(err)
		e.Owner = p.recs.get(off).owner
		return e
	}
	return nil
}

// free clears offset off, which is held, and its record.
func (p *pool) free(off int) {
	p.p.ReleaseOffset(off)
	p.recs.set(off, record{})
}

// putBack takes offset off, which is free, again with its record r: it
// undoes a free.
func (p *pool) putBack(off int, r record) {
	p.p.AllocateOffset(off)
	p.recs.set(off, r)
}

// offset translates a value, mapping allocator errors to result codes.
func (p *pool) offset(value string) (int, *Error) {
	off, err := p.p.Range().Offset(value)
	if err != nil {
		return 0, allocError(err)
	}
	return off, nil
}

// allocError is the result error of an allocator error: its code by
// errors.Is, its message the allocator's (Kubernetes' texts).
func allocError(err error) *Error {
	code := CodeInvalidArgument
	switch {
	case errors.Is(err, allocator.ErrNotInRange):
		code = CodeNotInRange
	case errors.Is(err, allocator.ErrAllocated):
		code = CodeAlreadyAllocated
	case errors.Is(err, allocator.ErrFull):
		code = CodeRangeFull
	}
	return &Error{Code: code, Message: err.Error(), Op: -1}
}

// PoolStatus describes a pool and its use.
type PoolStatus struct {
	Name        string
	Range       allocator.Range
	Used        int
	UsedStatic  int
	UsedDynamic int
}

func (p *pool) status() PoolStatus {
	return PoolStatus{Name: p.name, Range: p.p.Range(), Used: p.p.Used(), UsedStatic: p.p.UsedStatic(), UsedDynamic: p.p.UsedDynamic()}
}

var poolNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// ValidatePoolName checks a pool name: a lowercase DNS label of at most 63 bytes.
func ValidatePoolName(name string) error {
	if len(name) > MaxPoolName || !poolNameRE.MatchString(name) {
		return errorf(CodeInvalidArgument, "invalid pool name %q: want a lowercase DNS label ([a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters)", name)
	}
	return nil
}
