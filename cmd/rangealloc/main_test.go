package main

import (
	"errors"
	"testing"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/stretchr/testify/assert"
)

// TestErrorText: an outcome-unknown answer prints the key to retry with;
// other API errors print their code and message.
func TestErrorText(t *testing.T) {
	unknown := &client.Error{Status: 503, Code: "Unavailable", Message: "outcome unknown",
		Details: map[string]any{"idempotencyKey": "rangealloc:1234", "cause": "leader lost"}}
	assert.Equal(t, "Error: Unavailable: outcome unknown\n"+
		"The request's Idempotency-Key is rangealloc:1234: a retry with it (--idempotency-key, where the command has it) answers what the request did.\n",
		errorText(unknown))
	assert.Equal(t, "Error: RangeFull: no free value\n", errorText(&client.Error{Status: 409, Code: "RangeFull", Message: "no free value"}))
	assert.Equal(t, "Error: boom\n", errorText(errors.New("boom")))
}
