package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
)

// outcome is what became of a proposal: a result, or an error that is
// definite (nothing was applied) or not (it may have been).
type outcome struct {
	res      *fsm.Result
	err      error
	definite bool
	resolved time.Time // when resolveLoop answered it (zero otherwise)
}

// submit applies a write on the leader, forwarding it when this node is a
// follower, and retries until ctx ends. Every attempt carries the same
// request ID, so a retry after an unknown outcome returns the first answer
// instead of applying twice. A new seed is drawn per attempt; the seed is
// not part of the request's fingerprint. A write without an ID gets one
// drawn here (fsm.DrawnRequestPrefix and a random UUID; the state machine
// counts those apart from keyed ones). A caller may send such an ID back:
// an UnknownOutcomeError names the drawn ID to retry with.
func (n *Node) submit(ctx context.Context, req *fsm.Request) (*fsm.Result, error) {
	if req.ID == "" {
		req.ID = drawRequestID()
	}
	// applied: a failed attempt may have been applied.
	applied := func(o outcome) (*fsm.Result, bool, error) { return o.res, o.err != nil && !o.definite, o.err }
	return route(ctx, n, call[*fsm.Result]{
		id: req.ID,
		before: func() (*fsm.Result, error, bool) {
			req.Seed = rand.Uint64() // proposer-side randomness; Apply only reads it from the entry
			if e := n.disk.refuse(req); e != nil {
				return &fsm.Result{Err: e}, nil, true
			}
			return nil, nil, false
		},
		local: func(ctx context.Context) (*fsm.Result, bool, error) { return applied(n.commit.propose(ctx, req)) },
		remote: func(ctx context.Context, addr string) (*fsm.Result, bool, error) {
			o := n.fwd.Submit(ctx, addr, req)
			return applied(outcome{res: o.Result, err: refusedForwarding(o.Err), definite: o.Definite})
		},
		// A refusal decided without the request table (a node low on
		// disk, a level not reached, a forwarding refused) cannot say
		// that an earlier attempt was not applied.
		trust: func(res *fsm.Result, err error) error {
			switch {
			case err != nil:
				return err
			case refusedForDisk(res) || refusedForLevel(res):
				return res.Err
			}
			return nil
		},
	})
}

// refusedForwarding keeps a leader's refusal of a forwarded call (a
// sender not a member, a protocol or level it cannot serve) from reading
// as the call's own answer: the call retries, as leadership may move to a
// node that serves it. Domain answers travel in the result, not here.
func refusedForwarding(err error) error {
	var fe *fsm.Error
	if errors.As(err, &fe) {
		return fmt.Errorf("the leader refused the forwarded call: %v", err)
	}
	return err
}

// drawRequestID is the request ID of a write or restore that came without
// one: fsm.DrawnRequestPrefix and a random UUID.
func drawRequestID() string { return fsm.DrawnRequestPrefix + uuid.NewString() }

// checkRequestID refuses a caller's request ID longer than the state
// machine remembers.
func checkRequestID(id string) error {
	if len(id) > fsm.MaxRequestID {
		return &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1,
			Message: fmt.Sprintf("request ID is %d bytes long; at most %d", len(id), fsm.MaxRequestID)}
	}
	return nil
}

// wait returns f's error, or ErrClosed once Raft has stopped without
// answering f. Raft does not answer every future when it shuts down: not
// one still in its buffered apply channel (Config.BatchApplyCh), nor a
// committed entry its state machine goroutine had not taken yet. A
// goroutine of this node that waited on such a future with Error alone
// would keep Close waiting forever. The goroutine wait starts to watch f
// outlives it then, until the process ends.
func (n *Node) wait(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-n.raftDown:
		select {
		case err := <-done:
			return err
		default:
			return ErrClosed
		}
	}
}
