package node

import (
	"fmt"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/forward"
	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// The leader's end of a follower's batched writes (forward.Client.Submit).

// SubmitBatch proposes the writes a follower forwards together. They go
// to the group commit at once, so they share entries, and the reply
// answers each as Submit would.
func (s *rpcService) SubmitBatch(args *wire.SubmitBatchArgs, reply *wire.SubmitBatchReply) error {
	defer since(keyForwardServe, time.Now())
	if reply.Err = s.admitWrite(args.Protocol); reply.Err != nil {
		return nil
	}
	reqs, err := fsm.DecodeEntry(args.Entry)
	if err != nil || len(reqs) == 0 || len(reqs) > forward.MaxBatch {
		reply.Err = &wireErr{Domain: &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: fmt.Sprintf(
			"forwarded batch: want 1 to %d requests, got %d (%v)", forward.MaxBatch, len(reqs), err)}}
		return nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	reply.Results = make([]wire.SubmitReply, len(reqs))
	props := make([]*proposal, len(reqs))
	for i, req := range reqs {
		if e := s.n.disk.refuse(req); e != nil {
			reply.Results[i].Result = fsm.EncodeResult(&fsm.Result{Err: e})
			continue
		}
		p, o := s.n.commit.enqueue(ctx, req)
		if p == nil {
			s.answer(&reply.Results[i], o)
			continue
		}
		props[i] = p
	}
	for i, p := range props {
		if p != nil {
			s.answer(&reply.Results[i], s.n.commit.await(ctx, p))
		}
	}
	return nil
}

// answer puts a proposal's outcome in a forwarded write's reply.
func (s *rpcService) answer(reply *wire.SubmitReply, o outcome) {
	switch {
	case o.err == nil:
		reply.Result = fsm.EncodeResult(o.res)
	case o.definite:
		reply.Err = &wireErr{NotLeader: true, Msg: o.err.Error()}
	default:
		reply.Err = &wireErr{Unknown: true, Msg: o.err.Error()}
	}
}
