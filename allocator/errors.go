package allocator

import (
	"errors"
	"fmt"
)

// Errors returned by this package. Match them with errors.Is; the texts of
// ErrAllocated, ErrFull and NotInRangeError are Kubernetes' own.
var (
	// ErrFull means no free value is left in either band.
	ErrFull = errors.New("range is full")
	// ErrAllocated means the named value is held already. The error returned
	// by a Pool reads "provided IP is already allocated" or "provided port is
	// already allocated" and matches ErrAllocated.
	ErrAllocated = errors.New("provided value is already allocated")
	// ErrNotAllocated means a release named a value that is free.
	ErrNotAllocated = errors.New("value is not allocated")
	// ErrNotInRange is matched by every NotInRangeError.
	ErrNotInRange = errors.New("value is not in the valid range")
	// ErrInvalidValue means a value does not parse as an IP or a port.
	ErrInvalidValue = errors.New("invalid value")
	// ErrInvalidRange means a range string does not parse, or describes a
	// range rangealloc does not serve (empty, or larger than MaxSize).
	ErrInvalidRange = errors.New("invalid range")
	// ErrRangeMismatch means restored data belongs to another range.
	ErrRangeMismatch = errors.New("range mismatch")
	// ErrCorruptData means restored bitmap bytes set offsets at or beyond the
	// size of the range.
	ErrCorruptData = errors.New("bitmap data out of range")
)

// NotInRangeError reports a value outside a range, with Kubernetes' texts
// (ErrNotInRange{IP, ValidRange} in pkg/registry/core/service/ipallocator).
type NotInRangeError struct {
	Kind  Kind   // the kind of the range
	Value string // the value as given
	Range string // the canonical range string
}

func (e *NotInRangeError) Error() string {
	if e.Kind == KindPort {
		return fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %s", e.Range)
	}
	return fmt.Sprintf("the provided IP (%s) is not in the valid range. The range of valid IPs is %s", e.Value, e.Range)
}

// Is makes errors.Is(err, ErrNotInRange) hold.
func (e *NotInRangeError) Is(target error) bool { return target == ErrNotInRange }

// kindError carries a kind-specific text for a kind-agnostic sentinel.
type kindError struct {
	sentinel error
	text     string
}

func (e *kindError) Error() string        { return e.text }
func (e *kindError) Is(target error) bool { return target == e.sentinel }

var (
	errIPAllocated   = &kindError{ErrAllocated, "provided IP is already allocated"}
	errPortAllocated = &kindError{ErrAllocated, "provided port is already allocated"}
)

// AllocatedError returns ErrAllocated with the Kubernetes text for the kind:
// "provided IP is already allocated" or "provided port is already allocated".
func AllocatedError(k Kind) error {
	if k == KindPort {
		return errPortAllocated
	}
	return errIPAllocated
}
