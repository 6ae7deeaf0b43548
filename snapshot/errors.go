package snapshot

import "errors"

// Errors returned by this package. Match them with errors.Is; the error
// returned wraps one of them and says what is wrong and at which byte.
// An I/O error of the underlying reader or writer is wrapped as is and
// matches none of them.
var (
	// ErrMagic means the stream does not start with the snapshot magic: it
	// is not a rangealloc snapshot at all.
	ErrMagic = errors.New("snapshot: not a rangealloc snapshot (bad magic)")
	// ErrVersion means the stream is a snapshot in a format version this
	// build does not read.
	ErrVersion = errors.New("snapshot: unsupported format version")
	// ErrCorrupt means the stream is damaged: a checksum mismatch, a
	// truncation, trailing bytes after the trailer, a length over its limit
	// or a broken structural rule (order, uniqueness, bit count).
	ErrCorrupt = errors.New("snapshot: corrupt")
	// ErrInvalid means Write was given a State that breaks a rule Read
	// checks; nothing was written.
	ErrInvalid = errors.New("snapshot: invalid state")
)
