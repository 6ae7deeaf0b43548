package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
)

// Error codes of the API beyond the state machine's (SPEC §5.6).
const (
	CodeInvalidArgument  = "InvalidArgument"
	CodePayloadTooLarge  = "PayloadTooLarge"
	CodeNoLeader         = "NoLeader"
	CodeUnavailable      = "Unavailable"
	CodeNotFound         = "NotFound"
	CodeMethodNotAllowed = "MethodNotAllowed"
	// CodeUnsupportedMediaType: a write's body is not application/json
	// (a restore's: application/octet-stream).
	CodeUnsupportedMediaType = "UnsupportedMediaType"
	CodeInternal             = "Internal"
	// CodeUnauthenticated (401): a request that needs a role carries no
	// bearer token, a malformed Authorization header, or a token not in
	// the token file.
	CodeUnauthenticated = "Unauthenticated"
	// CodePermissionDenied (403): the token's role is too weak for the
	// request, or (without a token file) the Host header names neither an
	// IP address, localhost nor an allowed host.
	CodePermissionDenied = "PermissionDenied"
)

// statusOf maps the state machine's codes to HTTP statuses.
var statusOf = map[fsm.Code]int{
	fsm.CodeInvalidArgument:      http.StatusBadRequest,
	fsm.CodePoolNotFound:         http.StatusNotFound,
	fsm.CodeNotAllocated:         http.StatusNotFound,
	fsm.CodeMemberNotFound:       http.StatusNotFound,
	fsm.CodePoolExists:           http.StatusConflict,
	fsm.CodePoolNotEmpty:         http.StatusConflict,
	fsm.CodeAlreadyAllocated:     http.StatusConflict,
	fsm.CodeRangeFull:            http.StatusConflict,
	fsm.CodeOwnerMismatch:        http.StatusConflict,
	fsm.CodePoolOverlap:          http.StatusConflict,
	fsm.CodeNodeNotEmpty:         http.StatusConflict,
	fsm.CodeLastVoter:            http.StatusConflict,
	fsm.CodeMemberDataLost:       http.StatusConflict,
	fsm.CodePermissionDenied:     http.StatusForbidden,
	fsm.CodeNotInRange:           http.StatusUnprocessableEntity,
	fsm.CodeIdempotencyKeyReused: http.StatusUnprocessableEntity,
	fsm.CodeInvalid:              http.StatusUnprocessableEntity,
	fsm.CodeServiceNotFound:      http.StatusNotFound,
	fsm.CodeOwnedByService:       http.StatusConflict,
	fsm.CodeVersionMismatch:      http.StatusConflict,
	fsm.CodeInsufficientStorage:  http.StatusInsufficientStorage,
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
		fe  *fsm.Error
		ue  *node.UnknownOutcomeError
		mbe *http.MaxBytesError
	)
	status, body := http.StatusInternalServerError, ErrorDetail{Code: CodeInternal, Message: err.Error()}
	switch {
	case errors.As(err, &ae):
		status, body = ae.status, ErrorDetail{Code: ae.code, Message: ae.msg}
	case errors.As(err, &mbe):
		status, body = http.StatusRequestEntityTooLarge, ErrorDetail{Code: CodePayloadTooLarge, Message: err.Error()}
	case errors.As(err, &ue):
		// Before the domain errors: an unknown outcome may wrap a
		// refusal that did not look the request up (a leader low on
		// disk), which must not read as "nothing was applied".
		status = http.StatusServiceUnavailable
		body = ErrorDetail{Code: CodeUnavailable, Message: "outcome unknown: the request may or may not have been applied; retry with the same Idempotency-Key",
			Details: map[string]any{"idempotencyKey": ue.RequestID, "cause": ue.Err.Error()}}
		w.Header().Set("Retry-After", "1")
	case errors.As(err, &fe):
		status = statusOf[fe.Code]
		if status == 0 {
			status = http.StatusInternalServerError
		}
		body = ErrorDetail{Code: string(fe.Code), Message: fe.Message}
		switch {
		case fe.Node != nil:
			body.Details = map[string]any{"clusterId": fe.Node.ClusterID, "lastIndex": fe.Node.LastIndex}
		case fe.Code == fsm.CodePoolOverlap:
			body.Details = map[string]any{"pool": fe.Owner}
		case fe.Owner != "":
			body.Details = map[string]any{"owner": fe.Owner}
		}
		if fe.Field != "" {
			if body.Details == nil {
				body.Details = map[string]any{}
			}
			body.Details["field"] = fe.Field
		}
		if withOp && fe.Op >= 0 {
			if body.Details == nil {
				body.Details = map[string]any{}
			}
			body.Details["op"] = fe.Op
		}
	case errors.Is(err, node.ErrNoLeader), errors.Is(err, node.ErrNotLeader):
		status, body = http.StatusServiceUnavailable, ErrorDetail{Code: CodeNoLeader, Message: err.Error()}
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, node.ErrInvalidBackup):
		status, body = http.StatusBadRequest, ErrorDetail{Code: CodeInvalidArgument, Message: err.Error()}
	case errors.Is(err, node.ErrClosed), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		status, body = http.StatusServiceUnavailable, ErrorDetail{Code: CodeUnavailable, Message: err.Error()}
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, ErrorBody{Error: body})
}
