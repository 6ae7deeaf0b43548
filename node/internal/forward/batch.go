package forward

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/wire"
	"github.com/rangealloc/rangealloc/version"
)

// A follower forwards its writes to the leader in batches, the way the
// leader packs them into entries (its group commit): one SubmitBatch call
// carries every write waiting, so a busy follower makes one call, one gob
// envelope and two syscalls per batch instead of per write. No write
// waits for an earlier call's answer. Like the leader, the sender expects
// back the callers of the call answered last (plus the writes waiting
// then) and holds a batch open until they are there, at most the last
// call's time and never longer than BatchWait: without it, callers coming
// back one by one find the sender idle and go one per call. A lone caller
// is not held (nobody else is expected).
//
//	callers ─▶ queue ─▶ sender (runs while the queue holds any) ─▶ leader
//	   ▲                                                           │
//	   └──────────────── each caller's own outcome ◀───────────────┘
//
// A caller still decides for itself when to give up, as with a single
// call: on its deadline, or when this node learns of another leader. A
// write given up before the sender took it was never sent (a definite
// failure); one given up after is an unknown outcome, and its caller
// retries with the same request ID. A leader of an older release has no
// SubmitBatch: its followers send it one Submit per write.

// MaxBatch bounds the writes one SubmitBatch carries; the leader refuses
// more (a batch larger than the leader's MaxBatch still rides several
// entries, answered when the last resolves).
const MaxBatch = 1024

// errNoBatch answers the writes of a batch sent to a leader without
// SubmitBatch: nothing was proposed, and the caller sends them one by one.
var errNoBatch = errors.New("the leader has no SubmitBatch")

// item is one write waiting for, or riding, a forwarded batch.
type item struct {
	req    *fsm.Request
	done   chan Outcome // buffered 1
	queued time.Time
	// state and sent are guarded by the batcher's mu. sent is the call it
	// rides once state is itemSent.
	state itemState
	sent  *pending
}

type itemState int

const (
	itemQueued    itemState = iota
	itemSent                // taken by the sender, and sent
	itemAbandoned           // given up by its caller before it was sent
)

// batcher queues the writes forwarded to one leader address and runs a
// sender while any wait.
type batcher struct {
	c    *Client
	addr string

	mu sync.Mutex
	// mu guards the following
	queue   []*item
	running bool // a sender goroutine runs
	// expect is how many writes the sender waits for before it sends:
	// those of the call answered last, and those queued then. hold bounds
	// the wait: the last call's time, at most BatchWait.
	expect int
	hold   time.Duration
	// legacyOn is the client whose leader answered that it has no
	// SubmitBatch. It holds while that connection does: a leader that
	// restarts, upgraded, is asked again on the next.
	legacyOn *rpcClient

	more chan struct{} // buffered 1: a write was queued
}

// batcher returns the batcher of a leader address.
func (c *Client) batcher(addr string) *batcher {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.batchers[addr]
	if b == nil {
		b = &batcher{c: c, addr: addr, more: make(chan struct{}, 1)}
		c.batchers[addr] = b
	}
	return b
}

// Submit proposes a write through the leader at addr, batched with the
// other writes this node forwards there.
func (c *Client) Submit(ctx context.Context, addr string, req *fsm.Request) Outcome {
	start := time.Now()
	defer metrics.MeasureSince(keyCall, start)
	b := c.batcher(addr)
	it := &item{req: req, done: make(chan Outcome, 1), queued: start}
	if !b.enqueue(it) {
		return c.submitOne(ctx, addr, req)
	}
	moved := c.moved(addr)
	t := time.NewTicker(leaderPoll)
	defer t.Stop()
	for {
		select {
		case o := <-it.done:
			if errors.Is(o.Err, errNoBatch) {
				return c.submitOne(ctx, addr, req)
			}
			return o
		case <-ctx.Done():
			return b.abandon(it, ctx.Err())
		case <-t.C:
			if moved() {
				return b.abandon(it, errLeaderMoved)
			}
		}
	}
}

// enqueue adds a write to the queue, starting the sender if none runs.
// It returns false for a leader without SubmitBatch, or a closing node.
func (b *batcher) enqueue(it *item) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.legacyOn != nil {
		if b.c.leaders.current(b.addr) == b.legacyOn {
			return false
		}
		b.legacyOn = nil
	}
	select {
	case <-b.c.cfg.Shutdown:
		return false
	default:
	}
	b.queue = append(b.queue, it)
	if !b.running {
		b.running = true
		b.c.cfg.Go(b.run)
	} else if len(b.queue) >= b.expect {
		select {
		case b.more <- struct{}{}:
		default:
		}
	}
	return true
}

// abandon gives up a write for its caller: definite if it was not sent,
// unknown if it was. A sent write's client is dropped when nothing has
// arrived on it since (pool.abandon).
func (b *batcher) abandon(it *item, err error) Outcome {
	b.mu.Lock()
	state, sent := it.state, it.sent
	if state == itemQueued {
		it.state = itemAbandoned
	}
	b.mu.Unlock()
	err = fmt.Errorf("forward to leader %s: %w", b.addr, err)
	if state == itemQueued {
		return Outcome{Err: err, Definite: true}
	}
	if sent != nil { // nil: taken by the sender, the call not yet started
		b.c.leaders.abandon(b.addr, sent.c, sent.arrived)
	}
	return Outcome{Err: err}
}

// run sends what the queue holds, as one call, until it is empty. It
// does not wait for a call's answer (a goroutine per call does): the
// writes that arrive while a call is in flight go in the next call as
// soon as the callers expected back are there (see gather), so the
// leader's group commit sees them in time for the entry they would have
// ridden without forwarding.
func (b *batcher) run() {
	for {
		b.gather()
		b.mu.Lock()
		take := min(len(b.queue), MaxBatch)
		batch := make([]*item, 0, take)
		for _, it := range b.queue[:take] {
			if it.state == itemQueued {
				batch = append(batch, it)
			}
		}
		rest := copy(b.queue, b.queue[take:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		if take == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if len(batch) > 0 {
			b.send(batch)
		}
	}
}

// gather waits until the queue holds the writes expected, or the oldest
// has waited the hold, or it is empty.
func (b *batcher) gather() {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		b.mu.Lock()
		queued, want, hold := len(b.queue), b.expect, b.hold
		var left time.Duration
		if queued > 0 {
			left = hold - time.Since(b.queue[0].queued)
		}
		b.mu.Unlock()
		if queued == 0 || queued >= want || left <= 0 {
			return
		}
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-b.more:
		case <-timer.C:
			return
		case <-b.c.cfg.Shutdown:
			return
		}
	}
}

// send makes one SubmitBatch call for batch, and leaves a goroutine to
// answer each write when it returns.
func (b *batcher) send(batch []*item) {
	// The writes count as sent from before the call starts: a caller that
	// gives up meanwhile must not call its write unsent. They are encoded
	// under the same lock, once marked: a write abandoned before that is
	// left out of the entry (its caller was told it was never sent), and
	// one abandoned after is in it (its caller was told the outcome is
	// unknown) and is not read again, so a retry may reuse its request.
	b.mu.Lock()
	live := batch[:0]
	reqs := make([]*fsm.Request, 0, len(batch))
	for _, it := range batch {
		if it.state == itemQueued {
			it.state = itemSent
			live = append(live, it)
			reqs = append(reqs, it.req)
		}
	}
	batch = live
	var args *wire.SubmitBatchArgs
	if len(reqs) > 0 {
		args = &wire.SubmitBatchArgs{Entry: fsm.EncodeBatch(reqs), Protocol: version.Protocol}
	}
	b.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	var reply wire.SubmitBatchReply
	metrics.AddSample(keyBatch, float32(len(batch)))
	p, err := b.c.leaders.send(b.addr, wire.MethodSubmitBatch, args, &reply)
	if err != nil {
		answerAll(batch, Outcome{Err: fmt.Errorf("forward to leader %s: %w", b.addr, err), Definite: true})
		return
	}
	b.mu.Lock()
	for _, it := range batch {
		it.sent = p
	}
	b.mu.Unlock()
	start := time.Now()
	b.c.cfg.Go(func() { b.answer(batch, p, &reply, start) })
}

// answer waits for a batch's call and answers each of its writes.
func (b *batcher) answer(batch []*item, p *pending, reply *wire.SubmitBatchReply, start time.Time) {
	answer := func(o Outcome) { answerAll(batch, o) }
	done := <-p.call.Done
	b.mu.Lock()
	b.expect = len(batch) + len(b.queue)
	b.hold = min(time.Since(start), b.c.cfg.BatchWait)
	b.mu.Unlock()
	if done.Error != nil && strings.Contains(done.Error.Error(), "rpc: can't find method") {
		b.mu.Lock()
		b.legacyOn = p.c
		b.mu.Unlock()
		answer(Outcome{Err: errNoBatch, Definite: true})
		return
	}
	if _, err := b.c.leaders.finish(b.addr, p.c, done, !p.refused); err != nil {
		answer(Outcome{Err: fmt.Errorf("forward to leader %s: %w", b.addr, err), Definite: p.refused})
		return
	}
	if reply.Err != nil {
		answer(Outcome{Err: FromWire(reply.Err), Definite: reply.Err.NotLeader})
		return
	}
	if len(reply.Results) != len(batch) {
		answer(Outcome{Err: fmt.Errorf("leader %s answered %d of %d forwarded writes", b.addr, len(reply.Results), len(batch))})
		return
	}
	for i, it := range batch {
		it.done <- submitOutcome(b.addr, &reply.Results[i])
	}
}

// answerAll gives every write of a batch the same outcome.
func answerAll(batch []*item, o Outcome) {
	for _, it := range batch {
		it.done <- o
	}
}
