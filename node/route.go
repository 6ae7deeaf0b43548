package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
)

// Every client call is served by the leader: this node when it leads, else
// the leader it knows, through the forwarding RPC. route runs one such call
// to its end, and classify is the one place that decides what an attempt's
// failure means:
//
//	attempt ──▶ classify ──┬─ done     return the answer (a definite refusal too)
//	   ▲                   ├─ stop     the node closed: return ErrClosed
//	   │                   ├─ unknown  it may have been applied: remember, retry
//	   └──── sleep ◀───────┴─ retry    nothing was applied: retry
//
// A write carries one request ID through every attempt, so a retry after an
// unknown outcome is answered the first attempt's result, never applied
// twice. Once an attempt may have been applied, a later answer that did not
// look the ID up (call.trust) cannot say the call failed: route returns an
// UnknownOutcomeError.

// verdict is what one attempt's outcome means for its call.
type verdict int

const (
	done    verdict = iota // the call has its answer
	retry                  // nothing was applied: try again, maybe on the next leader
	unknown                // it may have been applied: try again under the same request ID
	stop                   // the node closed: no attempt can follow
)

// finalError marks a leader's own failure that no retry through another
// leader would mend. It ends the call, unless an earlier attempt may have
// been applied: then only a retry can learn the outcome.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

// classify decides what an attempt's error means. maybe says the attempt
// may have been applied; unknownSoFar that it or an earlier one may have
// been.
func classify(err error, maybe, unknownSoFar bool) verdict {
	var (
		fe  *fsm.Error
		fin *finalError
		ue  *UnknownOutcomeError
	)
	switch {
	case err == nil, errors.As(err, &fe), errors.Is(err, ErrInvalidBackup):
		return done // an answer, or a refusal decided on the leader
	case errors.As(err, &ue):
		return done // a call below this one already retried: its verdict stands
	case errors.Is(err, ErrClosed), errors.Is(err, raft.ErrRaftShutdown):
		return stop
	case maybe:
		return unknown
	case errors.As(err, &fin) && !unknownSoFar:
		return done
	}
	return retry
}

// call is one client call as route runs it.
type call[T any] struct {
	// name prefixes the error of a call that found no leader in time.
	name string
	// id is a write's request ID: an UnknownOutcomeError names it.
	id string
	// before, when set, may answer before any attempt (a refusal).
	before func() (T, error, bool)
	// local serves the call on this node, the leader; remote forwards it
	// to the leader at addr. Each says whether a failed attempt may have
	// been applied.
	local  func(ctx context.Context) (T, bool, error)
	remote func(ctx context.Context, addr string) (T, bool, error)
	// trust, when set, says whether an answer can be believed after an
	// attempt that may have been applied: nil if so, else the refusal it
	// made without looking the request ID up.
	trust func(v T, err error) error
}

// route runs c on the leader, retrying as classify says, until it has an
// answer, the node closes, or ctx ends.
func route[T any](ctx context.Context, n *Node, c call[T]) (T, error) {
	var (
		zero  T
		last  error
		maybe bool // some attempt may have been applied
	)
	for {
		v, applied, err := attempt(ctx, n, c)
		maybe = maybe || applied
		switch classify(err, applied, maybe) {
		case done:
			if maybe && c.trust != nil {
				if refusal := c.trust(v, err); refusal != nil {
					return zero, &UnknownOutcomeError{RequestID: c.id, Err: refusal}
				}
			}
			var fin *finalError
			if errors.As(err, &fin) {
				err = fin.err
			}
			return v, err
		case stop:
			err = ErrClosed
		}
		last = err
		if errors.Is(err, ErrClosed) || sleepOr(ctx, n.shutdown, n.cfg.RetryInterval) != nil {
			break
		}
	}
	switch {
	case maybe:
		return zero, &UnknownOutcomeError{RequestID: c.id, Err: last}
	case errors.Is(last, ErrClosed):
		return zero, ErrClosed
	case c.name != "":
		return zero, fmt.Errorf("%s: %w: %v", c.name, ErrNoLeader, last)
	}
	return zero, fmt.Errorf("%w: %v", ErrNoLeader, last)
}

// attempt runs c once: here when this node leads, else on the leader it
// knows, and notes who answered.
func attempt[T any](ctx context.Context, n *Node, c call[T]) (v T, maybe bool, err error) {
	if c.before != nil {
		if v, err, ok := c.before(); ok {
			return v, false, err
		}
	}
	if n.IsLeader() {
		v, maybe, err = c.local(ctx)
		answeredBy(ctx, n.id, err)
		return v, maybe, err
	}
	if addr, id := n.raft.LeaderWithID(); addr != "" {
		v, maybe, err = c.remote(ctx, string(addr))
		answeredBy(ctx, string(id), err)
		return v, maybe, err
	}
	return v, false, ErrNoLeader
}
