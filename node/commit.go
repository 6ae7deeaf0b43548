package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
)

// groupCommit is the leader's group commit: it packs the requests that
// reach this node while it leads into log entries, hands them to Raft, and
// answers each request with its own result once its entry is applied.
//
//	enqueue ─▶ proposals ─▶ batchLoop ─▶ apply (raft.Apply) ─▶ inflight ─▶ resolveLoop ─▶ each caller's done
//	                           ▲                                                │
//	                           └──────────── slots: at most maxInflight ◀───────┘
//
// Two goroutines run it, batchLoop and resolveLoop, until shutdown. Under
// load, requests pile up while earlier entries commit, so one fsync and
// one replication round serve many requests.
type groupCommit struct {
	maxBatch  int
	batchWait time.Duration
	// admit refuses a request before it is queued (a kind the cluster's
	// feature level does not have yet): a nil proposal with that outcome.
	admit func(context.Context, fsm.Kind) outcome
	// apply hands an entry to Raft; wait waits for a Raft future, or
	// reports ErrClosed once Raft has stopped without answering it.
	apply    func(entry []byte) raft.ApplyFuture
	wait     func(raft.Future) error
	onCommit func(requests int, d time.Duration) // Config.OnCommit
	shutdown <-chan struct{}

	proposals chan *proposal
	inflight  chan *inflight
	slots     chan struct{} // a token per entry in Raft and not yet resolved, or being filled
	expect    atomic.Int64  // requests the next entry should carry (see fill)
	round     atomic.Int64  // nanoseconds the entry resolved last took, handed to Raft until resolved
}

// proposal is one request waiting for the leader's group commit.
type proposal struct {
	req    *fsm.Request
	done   chan outcome // buffered 1
	queued time.Time    // when it reached the group commit
}

// inflight is one log entry handed to Raft, with the proposals it carries.
type inflight struct {
	future raft.ApplyFuture
	batch  []*proposal
	start  time.Time
}

func newGroupCommit(maxBatch, maxInflight int, batchWait time.Duration, shutdown <-chan struct{},
	admit func(context.Context, fsm.Kind) outcome, apply func([]byte) raft.ApplyFuture, wait func(raft.Future) error,
	onCommit func(int, time.Duration)) *groupCommit {
	return &groupCommit{maxBatch: maxBatch, batchWait: batchWait, shutdown: shutdown,
		admit: admit, apply: apply, wait: wait, onCommit: onCommit,
		proposals: make(chan *proposal, 4*maxBatch), inflight: make(chan *inflight, maxInflight),
		slots: make(chan struct{}, maxInflight)}
}

// propose hands a request to this leader's group commit and waits for it.
func (g *groupCommit) propose(ctx context.Context, req *fsm.Request) outcome {
	p, o := g.enqueue(ctx, req)
	if p == nil {
		return o
	}
	return g.await(ctx, p)
}

// enqueue hands a request to the group commit. A nil proposal comes with
// the outcome that refused it, definite.
func (g *groupCommit) enqueue(ctx context.Context, req *fsm.Request) (*proposal, outcome) {
	if o := g.admit(ctx, req.Kind); o.err != nil || o.res != nil {
		return nil, o
	}
	p := &proposal{req: req, done: make(chan outcome, 1), queued: time.Now()}
	select {
	case g.proposals <- p:
		return p, outcome{}
	case <-ctx.Done():
		return nil, outcome{err: ctx.Err(), definite: true}
	case <-g.shutdown:
		return nil, outcome{err: ErrClosed, definite: true}
	}
}

// await waits for an enqueued proposal's outcome.
func (g *groupCommit) await(ctx context.Context, p *proposal) outcome {
	select {
	case o := <-p.done:
		if !o.resolved.IsZero() {
			since(keyAnswer, o.resolved)
		}
		return o
	case <-ctx.Done():
		return outcome{err: ctx.Err()}
	case <-g.shutdown:
		return outcome{err: ErrClosed}
	}
}

// batchLoop packs the entries. It waits for room among the maxInflight
// entries Raft may hold unapplied (a token in slots, returned by
// resolveLoop), then for a proposal, then packs every proposal waiting by
// then into one log entry, up to maxBatch (see fill). A lone request goes
// straight through, unless more callers are expected back (then it waits
// at most batchWait, and never longer than the last entry's round).
func (g *groupCommit) batchLoop() {
	for {
		select {
		case g.slots <- struct{}{}:
		case <-g.shutdown:
			return
		}
		var p *proposal
		select {
		case <-g.shutdown:
			return
		case p = <-g.proposals:
		}
		wait := min(g.batchWait, time.Duration(g.round.Load()))
		batch := g.fill([]*proposal{p}, min(int(g.expect.Load()), g.maxBatch), wait)
		reqs := make([]*fsm.Request, len(batch))
		for i, p := range batch {
			reqs[i] = p.req
		}
		start := time.Now()
		since(keyQueue, batch[0].queued)
		f := g.apply(fsm.EncodeBatch(reqs))
		select {
		case g.inflight <- &inflight{future: f, batch: batch, start: start}:
		case <-g.shutdown:
			for _, p := range batch {
				p.done <- outcome{err: ErrClosed}
			}
			return
		}
	}
}

// fill adds the proposals waiting now to batch, up to maxBatch. While the
// batch holds fewer than want, it waits up to wait for more. want is
// what resolveLoop expects: the callers of the entry it resolved last,
// who are about to ask again, and the requests that were already waiting
// then. Without the wait, callers coming back miss this entry and ride the
// next one, splitting steady callers into groups that take turns, each
// group an entry (and a round of fsyncs) of its own. batchLoop bounds the
// wait by batchWait and by the last entry's round (handed to Raft until
// resolved): holding an entry longer than a round would cost its callers
// more than the callers coming back gain, who otherwise wait one round.
func (g *groupCommit) fill(batch []*proposal, want int, wait time.Duration) []*proposal {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for len(batch) < g.maxBatch {
		select {
		case p := <-g.proposals:
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
		case p := <-g.proposals:
			batch = append(batch, p)
		case <-timer.C:
			return batch
		case <-g.shutdown:
			return batch
		}
	}
	return batch
}

// resolveLoop waits for the entries handed to Raft, in order, and answers
// their proposals.
func (g *groupCommit) resolveLoop() {
	for {
		var in *inflight
		select {
		case <-g.shutdown:
			return
		case in = <-g.inflight:
		}
		err := g.wait(in.future)
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
		// are in no entry are in proposals now. It is still an estimate:
		// callers between requests are not counted, and with more entries
		// in flight batchLoop may be filling one.
		g.expect.Store(int64(len(in.batch) + len(g.proposals)))
		g.round.Store(int64(time.Since(in.start)))
		<-g.slots
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
		if g.onCommit != nil {
			g.onCommit(len(in.batch), time.Since(in.start))
		}
	}
}
