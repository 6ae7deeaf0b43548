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

// proposal is one request waiting for the leader's group commit.
type proposal struct {
	req    *fsm.Request
	done   chan outcome // buffered 1
	queued time.Time    // when it reached the group commit
}

// outcome is what became of a proposal: a result, or an error that is
// definite (nothing was applied) or not (it may have been).
type outcome struct {
	res      *fsm.Result
	err      error
	definite bool
	resolved time.Time // when resolveLoop answered it (zero otherwise)
}

// inflight is one log entry handed to Raft, with the proposals it carries.
type inflight struct {
	future raft.ApplyFuture
	batch  []*proposal
	start  time.Time
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
		local: func(ctx context.Context) (*fsm.Result, bool, error) { return applied(n.propose(ctx, req)) },
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

// propose hands a request to this leader's group commit and waits for it.
func (n *Node) propose(ctx context.Context, req *fsm.Request) outcome {
	p, o := n.enqueue(ctx, req)
	if p == nil {
		return o
	}
	return n.await(ctx, p)
}

// enqueue hands a request to the group commit. A nil proposal comes with
// the outcome that refused it, definite.
func (n *Node) enqueue(ctx context.Context, req *fsm.Request) (*proposal, outcome) {
	if o := n.checkKind(ctx, req.Kind); o.err != nil || o.res != nil {
		return nil, o
	}
	p := &proposal{req: req, done: make(chan outcome, 1), queued: time.Now()}
	select {
	case n.proposals <- p:
		return p, outcome{}
	case <-ctx.Done():
		return nil, outcome{err: ctx.Err(), definite: true}
	case <-n.shutdown:
		return nil, outcome{err: ErrClosed, definite: true}
	}
}

// await waits for an enqueued proposal's outcome.
func (n *Node) await(ctx context.Context, p *proposal) outcome {
	select {
	case o := <-p.done:
		if !o.resolved.IsZero() {
			since(keyAnswer, o.resolved)
		}
		return o
	case <-ctx.Done():
		return outcome{err: ctx.Err()}
	case <-n.shutdown:
		return outcome{err: ErrClosed}
	}
}

// batchLoop is the leader's group commit. It waits for room among the
// MaxInflight entries Raft may hold unapplied (a token in n.slots, returned
// by resolveLoop), then for a proposal, then packs every proposal waiting by
// then into one log entry, up to MaxBatch (see fill). Under load, requests
// pile up while earlier entries commit, so one fsync and one replication
// round serve many requests. A lone request goes straight through, unless
// more callers are expected back (then it waits at most BatchWait, and
// never longer than the last entry's round).
func (n *Node) batchLoop() {
	for {
		select {
		case n.slots <- struct{}{}:
		case <-n.shutdown:
			return
		}
		var p *proposal
		select {
		case <-n.shutdown:
			return
		case p = <-n.proposals:
		}
		wait := min(n.cfg.BatchWait, time.Duration(n.round.Load()))
		batch := n.fill([]*proposal{p}, min(int(n.expect.Load()), n.cfg.MaxBatch), wait)
		reqs := make([]*fsm.Request, len(batch))
		for i, p := range batch {
			reqs[i] = p.req
		}
		start := time.Now()
		since(keyQueue, batch[0].queued)
		f := n.raft.Apply(fsm.EncodeBatch(reqs), 0)
		select {
		case n.inflight <- &inflight{future: f, batch: batch, start: start}:
		case <-n.shutdown:
			for _, p := range batch {
				p.done <- outcome{err: ErrClosed}
			}
			return
		}
	}
}

// fill adds the proposals waiting now to batch, up to MaxBatch. While the
// batch holds fewer than want, it waits up to wait for more. want is
// what resolveLoop expects: the callers of the entry it resolved last,
// who are about to ask again, and the requests that were already waiting
// then. Without the wait, callers coming back miss this entry and ride the
// next one, splitting steady callers into groups that take turns, each
// group an entry (and a round of fsyncs) of its own. batchLoop bounds the
// wait by BatchWait and by the last entry's round (handed to Raft until
// resolved): holding an entry longer than a round would cost its callers
// more than the callers coming back gain, who otherwise wait one round.
func (n *Node) fill(batch []*proposal, want int, wait time.Duration) []*proposal {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for len(batch) < n.cfg.MaxBatch {
		select {
		case p := <-n.proposals:
			batch = append(batch, p)
			continue
		default:
		}
		if len(batch) >= want || wait <= 0 {
			break
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		}
		select {
		case p := <-n.proposals:
			batch = append(batch, p)
		case <-timer.C:
			return batch
		case <-n.shutdown:
			return batch
		}
	}
	return batch
}

// resolveLoop waits for the entries handed to Raft, in order, and answers
// their proposals.
func (n *Node) resolveLoop() {
	for {
		var in *inflight
		select {
		case <-n.shutdown:
			return
		case in = <-n.inflight:
		}
		err := n.wait(in.future)
		if errors.Is(err, ErrClosed) {
			// Raft stopped without answering: the entry may be in the
			// log, so its outcome is unknown.
			for _, p := range in.batch {
				p.done <- outcome{err: err}
			}
			return
		}
		resolved := time.Now()
		since(keyRaft, in.start)
		// With one entry in flight (the default), batchLoop waits for the
		// slot freed below, so the requests that reached this leader and
		// are in no entry are in n.proposals now. It is still an estimate:
		// callers between requests are not counted, and with more entries
		// in flight batchLoop may be filling one.
		n.expect.Store(int64(len(in.batch) + len(n.proposals)))
		n.round.Store(int64(time.Since(in.start)))
		<-n.slots
		if err != nil {
			// ErrNotLeader and ErrEnqueueTimeout come before the entry is in
			// the log: nothing was applied. Any other failure (leadership
			// lost, shutdown) leaves the outcome unknown.
			definite := errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrEnqueueTimeout)
			for _, p := range in.batch {
				p.done <- outcome{err: err, definite: definite}
			}
			continue
		}
		resp, ok := in.future.Response().(*fsm.Response)
		if !ok || len(resp.Results) != len(in.batch) {
			for _, p := range in.batch {
				p.done <- outcome{err: fmt.Errorf("state machine answered %T", in.future.Response())}
			}
			continue
		}
		for i, p := range in.batch {
			p.done <- outcome{res: resp.Results[i], resolved: resolved}
		}
		if n.cfg.OnCommit != nil {
			n.cfg.OnCommit(len(in.batch), time.Since(in.start))
		}
	}
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
