package storage

import (
	"sync"
	"sync/atomic"
	"time"
)

// StallWatch times the log and stable store's writes in flight. Every
// write of a Store calls begin and end; the node calls Check.
type StallWatch struct {
	stalled atomic.Bool   // a write has been in flight longer than the timeout
	stalls  atomic.Uint64 // stalls so far

	mu sync.Mutex
	// mu guards the following.
	next   uint64               // the ID of the next write
	starts map[uint64]time.Time // when each write in flight began; a few at most
	began  time.Time            // when the current stall began (the write's start)
}

// Stalled reports whether a write has been in flight longer than the
// timeout at the last Check.
func (w *StallWatch) Stalled() bool { return w.stalled.Load() }

// Stalls counts the stalls so far.
func (w *StallWatch) Stalls() uint64 { return w.stalls.Load() }

// begin notes a write starting and returns its ID, for end.
func (w *StallWatch) begin() uint64 {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.starts == nil {
		w.starts = map[uint64]time.Time{}
	}
	w.next++
	w.starts[w.next] = now
	return w.next
}

// end notes write id returning.
func (w *StallWatch) end(id uint64) {
	w.mu.Lock()
	delete(w.starts, id)
	w.mu.Unlock()
}

// oldest is when the oldest write in flight began; ok is false when none
// is. mu must be held.
func (w *StallWatch) oldest() (at time.Time, ok bool) {
	for _, t := range w.starts {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// Stall transitions, as Check reports them.
const (
	StallNone  = iota // no change
	StallBegan        // a write has been in flight longer than the timeout
	StallEnded        // no write in flight is older than the timeout any more
)

// Check decides, at now, whether the disk is stalled: a write in flight
// for longer than timeout. It returns the transition, if any, and how
// long the write that stalled had been running (at its start) or ran (at
// its end).
func (w *StallWatch) Check(now time.Time, timeout time.Duration) (transition int, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	since, busy := w.oldest()
	late := busy && now.Sub(since) > timeout
	switch {
	case late && !w.stalled.Load():
		w.began = since
		w.stalled.Store(true)
		w.stalls.Add(1)
		return StallBegan, now.Sub(w.began)
	case !late && w.stalled.Load():
		w.stalled.Store(false)
		return StallEnded, now.Sub(w.began)
	}
	return StallNone, 0
}

// StallCheckEvery is how often stallLoop looks: a tenth of the timeout,
// within [10ms, 100ms]. A look costs a mutex and a clock read.
func StallCheckEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 10*time.Millisecond), 100*time.Millisecond)
}
