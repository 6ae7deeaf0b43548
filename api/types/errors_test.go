package types_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rangealloc/rangealloc/api/types"
)

func TestErrorIs(t *testing.T) {
	full := types.NewError(types.CodeRangeFull, `pool "nodeport" is full`, nil, nil)
	unknown := types.NewError(types.CodeUnavailable, "outcome unknown", map[string]any{"idempotencyKey": "k"}, context.DeadlineExceeded)
	closed := types.NewError(types.CodeUnavailable, "node closed", nil, nil)
	for _, c := range []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"same code", full, types.ErrRangeFull, true},
		{"wrapped", fmt.Errorf("allocating: %w", full), types.ErrRangeFull, true},
		{"other code", full, types.ErrAlreadyAllocated, false},
		{"unknown outcome", unknown, types.ErrOutcomeUnknown, true},
		{"unknown outcome is unavailable", unknown, types.ErrUnavailable, true},
		{"unknown outcome keeps its cause", unknown, context.DeadlineExceeded, true},
		{"unavailable without a key is no unknown outcome", closed, types.ErrOutcomeUnknown, false},
		{"a plain error", errors.New("RangeFull"), types.ErrRangeFull, false},
	} {
		assert.Equal(t, c.want, errors.Is(c.err, c.target), "%s: errors.Is(%v, %v)", c.name, c.err, c.target)
	}
}

func TestResolveOptions(t *testing.T) {
	assert.Equal(t, types.CallOptions{Consistency: types.Linearizable}, types.Resolve(nil))
	assert.Equal(t, types.CallOptions{IdempotencyKey: "k", Consistency: types.Stale, DryRun: true},
		types.Resolve([]types.CallOption{types.WithIdempotencyKey("k"), types.WithConsistency(types.Stale), types.WithDryRun()}))
}
