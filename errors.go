package rangealloc

import (
	"errors"

	"github.com/rangealloc/rangealloc/api/types"
)

// Error is every failed call's error, in process and over HTTP: Code (one
// of the Err values below names each), Message, and Details such as
// "owner", the holder of a value asked for. Match a kind of failure with
// errors.Is(err, ErrRangeFull); read the fields with errors.As. In process,
// errors.Unwrap gives the cause, a context's error for example.
type Error = types.Error

// The errors calls fail with, one per code. docs/API.md gives each code's
// HTTP status.
var (
	// ErrInvalidArgument: the request is malformed. Nothing was applied.
	ErrInvalidArgument = types.ErrInvalidArgument
	// ErrPoolNotFound: no pool has that name.
	ErrPoolNotFound = types.ErrPoolNotFound
	// ErrNotAllocated: the value is free.
	ErrNotAllocated = types.ErrNotAllocated
	// ErrAlreadyAllocated: another owner holds the value.
	// Details["owner"] names it.
	ErrAlreadyAllocated = types.ErrAlreadyAllocated
	// ErrRangeFull: no free value is left.
	ErrRangeFull = types.ErrRangeFull
	// ErrNotInRange: the value lies outside the pool's range.
	ErrNotInRange = types.ErrNotInRange
	// ErrOwnerMismatch: the value is held by another owner.
	ErrOwnerMismatch = types.ErrOwnerMismatch
	// ErrOwnedByService: a Service holds the value; delete the Service.
	ErrOwnedByService = types.ErrOwnedByService
	// ErrIdempotencyKeyReused: the key named another request.
	ErrIdempotencyKeyReused = types.ErrIdempotencyKeyReused
	// ErrPoolExists: a pool of that name has another range.
	ErrPoolExists = types.ErrPoolExists
	// ErrPoolNotEmpty: the pool still holds allocations.
	ErrPoolNotEmpty = types.ErrPoolNotEmpty
	// ErrPoolOverlap: the range shares values with Details["pool"].
	ErrPoolOverlap = types.ErrPoolOverlap
	// ErrServiceNotFound: no Service has that namespace and name.
	ErrServiceNotFound = types.ErrServiceNotFound
	// ErrInvalid: Kubernetes would reject the Service; Details["field"]
	// names the field.
	ErrInvalid = types.ErrInvalid
	// ErrMemberNotFound: no member has that ID.
	ErrMemberNotFound = types.ErrMemberNotFound
	// ErrLastVoter: the change would leave the cluster without a voter.
	ErrLastVoter = types.ErrLastVoter
	// ErrNodeNotEmpty: a joining node holds another cluster's state.
	ErrNodeNotEmpty = types.ErrNodeNotEmpty
	// ErrMemberDataLost: a joining node lost the state it voted with.
	ErrMemberDataLost = types.ErrMemberDataLost
	// ErrVersionMismatch: a member's release cannot take part.
	ErrVersionMismatch = types.ErrVersionMismatch
	// ErrPermissionDenied: the caller may not do this.
	ErrPermissionDenied = types.ErrPermissionDenied
	// ErrUnauthenticated: over HTTP, the call carried no valid token.
	ErrUnauthenticated = types.ErrUnauthenticated
	// ErrNoLeader: no leader was reachable in time. Nothing was applied;
	// retrying is safe.
	ErrNoLeader = types.ErrNoLeader
	// ErrInsufficientStorage: a node is below its disk floor. Nothing was
	// applied.
	ErrInsufficientStorage = types.ErrInsufficientStorage
	// ErrUnavailable: the node closed, or the call's context ended.
	ErrUnavailable = types.ErrUnavailable
	// ErrOutcomeUnknown: the write may or may not have been applied.
	// Retry it with the key in Details["idempotencyKey"] to learn which.
	// It also matches ErrUnavailable.
	ErrOutcomeUnknown = types.ErrOutcomeUnknown
	// ErrInternal: a bug. The message says what.
	ErrInternal = types.ErrInternal
)

// Errors of Open.
var (
	// ErrConfig: the Config is invalid. The message names the field.
	ErrConfig = errors.New("rangealloc: invalid config")
	// ErrStorage: the data directory is damaged, or lost beside what
	// says it held state. The message says what was found and what to
	// do; docs/OPERATIONS.md has the steps.
	ErrStorage = errors.New("rangealloc: storage lost or damaged")
)
