package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"

	"github.com/rangealloc/rangealloc/fsm"
)

// TestClassify is the one table of what an attempt's failure means.
func TestClassify(t *testing.T) {
	domain := &fsm.Error{Code: fsm.CodeRangeFull, Op: -1, Message: "full"}
	unknownClosed := &UnknownOutcomeError{RequestID: "k", Err: ErrClosed}
	for _, c := range []struct {
		name         string
		err          error
		maybe, sofar bool
		want         verdict
	}{
		{"an answer", nil, false, false, done},
		{"a refusal decided on the leader", domain, false, false, done},
		{"a refusal after an attempt that may have applied", domain, true, true, done},
		{"an invalid backup", fmt.Errorf("%w: bad magic", ErrInvalidBackup), false, false, done},
		{"an unknown outcome decided below, though it wraps ErrClosed", unknownClosed, false, false, done},
		{"the node closed", ErrClosed, false, false, stop},
		{"Raft shut down", raft.ErrRaftShutdown, false, false, stop},
		{"the node closed after an attempt that may have applied", ErrClosed, true, true, stop},
		{"no leader", ErrNoLeader, false, false, retry},
		{"a lost lead", fmt.Errorf("%w: deposed", ErrNotLeader), false, false, retry},
		{"an attempt that may have applied", context.DeadlineExceeded, true, true, unknown},
		{"a leader's own failure", &finalError{errors.New("disk")}, false, false, done},
		{"a leader's own failure after an unknown outcome", &finalError{errors.New("disk")}, false, true, retry},
	} {
		assert.Equal(t, c.want, classify(c.err, c.maybe, c.sofar), "classify(%v) in %q", c.err, c.name)
	}
}
