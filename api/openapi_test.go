package api

import (
	"context"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenAPIErrorCodes: the document's ErrorBody lists every code the API
// answers with, the state machine's (statusOf) and this package's.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()))
	code := doc.Components.Schemas["ErrorBody"].Value.Properties["error"].Value.Properties["code"].Value
	listed := map[string]bool{}
	for _, v := range code.Enum {
		listed[v.(string)] = true
	}
	codes := []string{CodeInvalidArgument, CodePayloadTooLarge, CodeNoLeader, CodeUnavailable, CodeNotFound,
		CodeMethodNotAllowed, CodeUnsupportedMediaType, CodeInternal, CodeUnauthenticated, CodePermissionDenied}
	for c := range statusOf {
		codes = append(codes, string(c))
	}
	for _, c := range codes {
		assert.True(t, listed[c], "ErrorBody's code enum lacks %s", c)
	}
}
