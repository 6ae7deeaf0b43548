package types

import "fmt"

// The codes of error answers. Each names one kind of failure, the same
// whether the call went over HTTP or to a node in the same process.
const (
	CodeInvalidArgument      = "InvalidArgument"      // 400: the request is malformed
	CodePoolNotFound         = "PoolNotFound"         // 404: no pool has that name
	CodeNotAllocated         = "NotAllocated"         // 404: the value is free
	CodeMemberNotFound       = "MemberNotFound"       // 404: no member has that ID
	CodeServiceNotFound      = "ServiceNotFound"      // 404: no Service has that namespace and name
	CodeNotFound             = "NotFound"             // 404: no such route
	CodeMethodNotAllowed     = "MethodNotAllowed"     // 405: the route takes another method
	CodePoolExists           = "PoolExists"           // 409: a pool of that name has another range
	CodePoolNotEmpty         = "PoolNotEmpty"         // 409: the pool still holds allocations
	CodeAlreadyAllocated     = "AlreadyAllocated"     // 409: another owner holds the value
	CodeRangeFull            = "RangeFull"            // 409: no free value is left
	CodeOwnerMismatch        = "OwnerMismatch"        // 409: the value is held by another owner
	CodePoolOverlap          = "PoolOverlap"          // 409: the range shares values with another pool
	CodeNodeNotEmpty         = "NodeNotEmpty"         // 409: a joining node holds another cluster's state
	CodeLastVoter            = "LastVoter"            // 409: the change would leave no voter
	CodeMemberDataLost       = "MemberDataLost"       // 409: a joining node lost the state it voted with
	CodeOwnedByService       = "OwnedByService"       // 409: a Service holds the value
	CodeVersionMismatch      = "VersionMismatch"      // 409: a member's release cannot take part
	CodePayloadTooLarge      = "PayloadTooLarge"      // 413: the body is too large
	CodeUnsupportedMedia     = "UnsupportedMediaType" // 415: the body's content type is wrong
	CodeNotInRange           = "NotInRange"           // 422: the value is outside the pool's range
	CodeIdempotencyKeyReused = "IdempotencyKeyReused" // 422: the key was used for another request
	CodeInvalid              = "Invalid"              // 422: Kubernetes would reject the Service
	CodeUnauthenticated      = "Unauthenticated"      // 401: no valid bearer token
	CodePermissionDenied     = "PermissionDenied"     // 403: the caller may not do this
	CodeInternal             = "Internal"             // 500: a bug; the message says what
	CodeNoLeader             = "NoLeader"             // 503: no leader was reachable; nothing was applied
	CodeUnavailable          = "Unavailable"          // 503: closed, timed out, or outcome unknown
	CodeInsufficientStorage  = "InsufficientStorage"  // 507: a node is below its disk floor; nothing was applied
)

// Error is every failed call's error: a code from the list above, a
// message for people, and details for programs. Match a kind of failure
// with errors.Is and a sentinel (errors.Is(err, ErrRangeFull)); read the
// fields with errors.As.
type Error struct {
	Code    string
	Message string
	// Details hold what the code needs: "owner" (the holder of a value),
	// "pool" (an overlapping pool), "field" (the Service field at fault),
	// "idempotencyKey" (the key to retry an unknown outcome with), all
	// strings; "op" (an int: the failing operation of a transaction);
	// "clusterId" (a string) and "lastIndex" (a uint64) of a newcomer a
	// join refused because it holds state (NodeNotEmpty).
	Details map[string]any
	cause   error
}

// NewError returns an *Error whose Unwrap gives cause, which may be nil.
func NewError(code, message string, details map[string]any, cause error) *Error {
	return &Error{Code: code, Message: message, Details: details, cause: cause}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the error the code was derived from, in process: a
// context's error, for example. Over HTTP it is nil.
func (e *Error) Unwrap() error { return e.cause }

// Is matches a sentinel of the same code. ErrOutcomeUnknown matches an
// Unavailable error that carries the idempotency key to retry with.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	switch {
	case !ok || t == nil:
		return false
	case t == ErrOutcomeUnknown:
		return e.Code == CodeUnavailable && e.Details["idempotencyKey"] != nil
	}
	return t.Code == e.Code
}

// The sentinels, one for each code a caller acts on.
var (
	ErrInvalidArgument      = &Error{Code: CodeInvalidArgument}
	ErrPoolNotFound         = &Error{Code: CodePoolNotFound}
	ErrNotAllocated         = &Error{Code: CodeNotAllocated}
	ErrMemberNotFound       = &Error{Code: CodeMemberNotFound}
	ErrServiceNotFound      = &Error{Code: CodeServiceNotFound}
	ErrPoolExists           = &Error{Code: CodePoolExists}
	ErrPoolNotEmpty         = &Error{Code: CodePoolNotEmpty}
	ErrAlreadyAllocated     = &Error{Code: CodeAlreadyAllocated}
	ErrRangeFull            = &Error{Code: CodeRangeFull}
	ErrOwnerMismatch        = &Error{Code: CodeOwnerMismatch}
	ErrPoolOverlap          = &Error{Code: CodePoolOverlap}
	ErrNodeNotEmpty         = &Error{Code: CodeNodeNotEmpty}
	ErrLastVoter            = &Error{Code: CodeLastVoter}
	ErrMemberDataLost       = &Error{Code: CodeMemberDataLost}
	ErrOwnedByService       = &Error{Code: CodeOwnedByService}
	ErrVersionMismatch      = &Error{Code: CodeVersionMismatch}
	ErrNotInRange           = &Error{Code: CodeNotInRange}
	ErrIdempotencyKeyReused = &Error{Code: CodeIdempotencyKeyReused}
	ErrInvalid              = &Error{Code: CodeInvalid}
	ErrUnauthenticated      = &Error{Code: CodeUnauthenticated}
	ErrPermissionDenied     = &Error{Code: CodePermissionDenied}
	ErrInternal             = &Error{Code: CodeInternal}
	ErrNoLeader             = &Error{Code: CodeNoLeader}
	ErrUnavailable          = &Error{Code: CodeUnavailable}
	ErrInsufficientStorage  = &Error{Code: CodeInsufficientStorage}
	// ErrOutcomeUnknown: the write may or may not have been applied.
	// Retry it with the idempotency key in Details["idempotencyKey"].
	ErrOutcomeUnknown = &Error{Code: CodeUnavailable, Message: "outcome unknown"}
)
