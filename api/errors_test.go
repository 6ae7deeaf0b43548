package api

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnknownOutcomeWrappingRefusal: an unknown outcome whose last
// attempt was refused (a leader low on disk, after an earlier attempt may
// have been applied) is 503 Unavailable with the key to retry with, not
// the refusal's own status, which says nothing was applied.
func TestUnknownOutcomeWrappingRefusal(t *testing.T) {
	w := httptest.NewRecorder()
	writeError(w, &node.UnknownOutcomeError{RequestID: "k-1",
		Err: &fsm.Error{Code: fsm.CodeInsufficientStorage, Op: -1, Message: "low on disk; nothing was applied"}})
	require.Equal(t, 503, w.Code)
	var body ErrorBody
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body))
	assert.Equal(t, CodeUnavailable, body.Error.Code)
	assert.Equal(t, "k-1", body.Error.Details["idempotencyKey"])
}
