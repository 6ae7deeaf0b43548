package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestStallWatch: a write in flight past the timeout is a stall, counted
// once however long it lasts; it ends when no write in flight is older
// than the timeout. Writes that return in time are no stall.
func TestStallWatch(t *testing.T) {
	const timeout = time.Second
	var w stallWatch
	check := func(at time.Time, want int) {
		t.Helper()
		got, _ := w.check(at, timeout)
		assert.Equal(t, want, got, "check at +%v", at.Sub(w.since))
	}
	w.begin()
	start := w.since
	check(start.Add(timeout/2), stallNone)
	w.end()
	check(start.Add(2*timeout), stallNone) // returned in time
	assert.False(t, w.stalled.Load())

	w.begin()
	start = w.since
	check(start.Add(timeout+time.Millisecond), stallBegan)
	assert.True(t, w.stalled.Load())
	check(start.Add(5*timeout), stallNone) // still stalled: counted once
	w.begin()                              // a second write queues behind the first
	w.end()                                // one returns: the other's start is unknown
	assert.True(t, w.stalled.Load())
	tr, d := w.check(w.since.Add(time.Millisecond), timeout)
	assert.Equal(t, stallEnded, tr)
	assert.GreaterOrEqual(t, d, time.Duration(0))
	w.end()
	check(time.Now().Add(time.Hour), stallNone)
	assert.EqualValues(t, 1, w.stalls.Load())
	assert.False(t, w.stalled.Load())
}

func TestStallCheckEvery(t *testing.T) {
	for _, c := range []struct{ timeout, want time.Duration }{
		{2 * time.Second, 100 * time.Millisecond},
		{500 * time.Millisecond, 50 * time.Millisecond},
		{time.Millisecond, 10 * time.Millisecond},
	} {
		assert.Equal(t, c.want, stallCheckEvery(c.timeout), "stallCheckEvery(%v)", c.timeout)
	}
}
