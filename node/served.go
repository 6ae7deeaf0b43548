package node

import (
	"context"
	"errors"
	"sync"

	"github.com/rangealloc/rangealloc/fsm"
)

// ServedBy records which node's state answered a call: this node, or the
// leader it carried the call to. The HTTP API reports it in
// X-Rangealloc-Served-By. A caller that wants it passes the context
// WithServedBy returns; calls made without one record nothing.
type ServedBy struct {
	mu sync.Mutex
	id string
}

type servedByKey struct{}

// WithServedBy returns a context that makes calls record the node that
// answered them in the returned ServedBy.
func WithServedBy(ctx context.Context) (context.Context, *ServedBy) {
	s := &ServedBy{}
	return context.WithValue(ctx, servedByKey{}, s), s
}

// ID returns the ID of the node that answered the last call made with the
// context, or "" when none answered (no leader, or no answer in time).
func (s *ServedBy) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// served records id as the node that answered a call made with ctx.
func served(ctx context.Context, id string) {
	if s, ok := ctx.Value(servedByKey{}).(*ServedBy); ok {
		s.mu.Lock()
		s.id = id
		s.mu.Unlock()
	}
}

// answeredBy records id when err is an answer of that node's: success or
// a domain failure, the only outcomes a call returns as they are.
func answeredBy(ctx context.Context, id string, err error) {
	var fe *fsm.Error
	if err == nil || errors.As(err, &fe) {
		served(ctx, id)
	}
}
