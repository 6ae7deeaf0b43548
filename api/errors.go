package api

import (
	"errors"
	"net/http"

	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/internal/convert"
)

// Error codes of the API beyond the state machine's (SPEC §5.6). The
// whole list, with each code's status, is in api/types.
const (
	CodeInvalidArgument      = types.CodeInvalidArgument
	CodePayloadTooLarge      = types.CodePayloadTooLarge
	CodeNoLeader             = types.CodeNoLeader
	CodeUnavailable          = types.CodeUnavailable
	CodeNotFound             = types.CodeNotFound
	CodeMethodNotAllowed     = types.CodeMethodNotAllowed
	CodeUnsupportedMediaType = types.CodeUnsupportedMedia
	CodeInternal             = types.CodeInternal
	CodeUnauthenticated      = types.CodeUnauthenticated
	CodePermissionDenied     = types.CodePermissionDenied
)

// statusOf maps each code to its HTTP status.
var statusOf = map[string]int{
	types.CodeInvalidArgument:      http.StatusBadRequest,
	types.CodeUnauthenticated:      http.StatusUnauthorized,
	types.CodePermissionDenied:     http.StatusForbidden,
	types.CodePoolNotFound:         http.StatusNotFound,
	types.CodeNotAllocated:         http.StatusNotFound,
	types.CodeMemberNotFound:       http.StatusNotFound,
	types.CodeServiceNotFound:      http.StatusNotFound,
	types.CodeNotFound:             http.StatusNotFound,
	types.CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	types.CodePoolExists:           http.StatusConflict,
	types.CodePoolNotEmpty:         http.StatusConflict,
	types.CodeAlreadyAllocated:     http.StatusConflict,
	types.CodeRangeFull:            http.StatusConflict,
	types.CodeOwnerMismatch:        http.StatusConflict,
	types.CodePoolOverlap:          http.StatusConflict,
	types.CodeNodeNotEmpty:         http.StatusConflict,
	types.CodeLastVoter:            http.StatusConflict,
	types.CodeMemberDataLost:       http.StatusConflict,
	types.CodeOwnedByService:       http.StatusConflict,
	types.CodeVersionMismatch:      http.StatusConflict,
	types.CodePayloadTooLarge:      http.StatusRequestEntityTooLarge,
	types.CodeUnsupportedMedia:     http.StatusUnsupportedMediaType,
	types.CodeNotInRange:           http.StatusUnprocessableEntity,
	types.CodeIdempotencyKeyReused: http.StatusUnprocessableEntity,
	types.CodeInvalid:              http.StatusUnprocessableEntity,
	types.CodeInternal:             http.StatusInternalServerError,
	types.CodeNoLeader:             http.StatusServiceUnavailable,
	types.CodeUnavailable:          http.StatusServiceUnavailable,
	types.CodeInsufficientStorage:  http.StatusInsufficientStorage,
}

// apiError is a failure found by this package (bad input), before the node.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(msg string) error { return &apiError{http.StatusBadRequest, CodeInvalidArgument, msg} }

// writeError is the one place that turns an error into a status and body.
func writeError(w http.ResponseWriter, err error) { writeErrorOp(w, err, false) }

// writeErrorOp is writeError for transactions: withOp adds details.op, the
// index of the failing operation.
func writeErrorOp(w http.ResponseWriter, err error, withOp bool) {
	var (
		ae  *apiError
		mbe *http.MaxBytesError
	)
	var body ErrorDetail
	switch {
	case errors.As(err, &ae):
		body = ErrorDetail{Code: ae.code, Message: ae.msg}
	case errors.As(err, &mbe):
		body = ErrorDetail{Code: CodePayloadTooLarge, Message: err.Error()}
	default:
		e := convert.Error(err, withOp)
		body = ErrorDetail{Code: e.Code, Message: e.Message, Details: e.Details}
	}
	status := statusOf[body.Code]
	if ae != nil {
		status = ae.status
	}
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, ErrorBody{Error: body})
}
