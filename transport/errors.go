package transport

import "errors"

// Errors returned by this package. Match them with errors.Is: they are
// wrapped with the addresses involved.
var (
	// ErrUnspecifiedAdvertise is returned by Listen when the address other
	// nodes would dial has no specific host (0.0.0.0, ::, or none): bind to
	// a specific IP or give an advertise address.
	ErrUnspecifiedAdvertise = errors.New("transport: advertise address has no specific IP")

	// ErrCut is returned for a call whose request or response was held by a
	// Cut until the call timed out (the error then also matches
	// os.ErrDeadlineExceeded, as a real I/O timeout does), or at once when
	// the table's timeout is zero.
	ErrCut = errors.New("transport: link cut by fault injection")

	// ErrDropped is returned for a call whose request or response was lost
	// to Drop.
	ErrDropped = errors.New("transport: message dropped by fault injection")
)
