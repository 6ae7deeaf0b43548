package node

import (
	"fmt"

	"github.com/rangealloc/rangealloc/node/internal/nodeerr"
	"github.com/rangealloc/rangealloc/node/internal/storage"
)

// Errors of the node. Domain failures (RangeFull, AlreadyAllocated, …) are
// *fsm.Error values; match them with errors.Is(err, &fsm.Error{Code: …}).
// The sentinels are the values of package nodeerr, where node's
// subpackages (the forwarding client) return and recognise them.
var (
	// ErrNoLeader means no leader was known or reachable before the call's
	// deadline. Definite: nothing was applied; retrying is safe.
	ErrNoLeader = nodeerr.ErrNoLeader
	// ErrNotLeader means this node cannot serve the call itself and was
	// asked not to forward it. Definite.
	ErrNotLeader = nodeerr.ErrNotLeader
	// ErrUnknownOutcome means the request was handed to Raft (or to the
	// leader) and its outcome is unknown: it may or may not have been
	// applied. Retry with the same request ID to learn it; see
	// UnknownOutcomeError.
	ErrUnknownOutcome = nodeerr.ErrUnknownOutcome
	// ErrClosed means the node was closed.
	ErrClosed = nodeerr.ErrClosed
	// ErrInvalidBackup means a backup given to Restore does not decode or
	// does not validate. Nothing was changed.
	ErrInvalidBackup = nodeerr.ErrInvalidBackup
)

// UnknownOutcomeError is returned when a write's outcome is unknown when the
// call's context ends, or when an attempt that may have been applied was
// followed by a refusal that does not say otherwise (Err). A retry with
// the same RequestID returns the request's result if it was applied, and
// applies it otherwise.
type UnknownOutcomeError struct {
	RequestID string
	Err       error // the last failure seen
}

func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("outcome unknown (retry with request ID %q): %v", e.RequestID, e.Err)
}

// Is makes errors.Is(err, ErrUnknownOutcome) hold.
func (e *UnknownOutcomeError) Is(target error) bool { return target == ErrUnknownOutcome }

// Unwrap returns the last failure seen.
func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// The data directory's errors and log stores (package storage keeps the
// data directory; these names are the node's API).
var (
	// ErrStorage matches every StorageError.
	ErrStorage = storage.ErrStorage
	// ErrLogStoreMismatch: Config.LogStore differs from the one the data
	// directory records.
	ErrLogStoreMismatch = storage.ErrLogStoreMismatch
)

// StorageError refuses to start a node whose data directory cannot be
// trusted. Path names the file at fault.
type StorageError = storage.Error

// The log stores a data directory may use (Config.LogStore).
const (
	LogStoreBolt = storage.LogStoreBolt // raft.db, a bbolt B+tree: two fsyncs per append
	LogStoreWAL  = storage.LogStoreWAL  // wal/, an append-only segmented log: one fsync per append
)
