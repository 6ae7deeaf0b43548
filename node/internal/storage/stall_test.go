package storage

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestStallWatch: a write in flight past the timeout is a stall, counted
// once however long it lasts; it ends when no write in flight is older
// than the timeout, and not before: another write that returns meanwhile
// does not end it. Writes that return in time are no stall.
func TestStallWatch(t *testing.T) {
	const timeout = time.Second
	var w StallWatch
	check := func(at time.Time, want int) {
		t.Helper()
		got, _ := w.Check(at, timeout)
		assert.Equal(t, want, got, "check at %v", at)
	}
	start := time.Now()
	a := w.begin()
	check(start.Add(timeout/2), StallNone)
	w.end(a)
	check(start.Add(2*timeout), StallNone) // returned in time
	assert.False(t, w.stalled.Load())

	start = time.Now()
	stuck := w.begin()
	check(start.Add(timeout+time.Millisecond), StallBegan)
	assert.True(t, w.stalled.Load())
	check(start.Add(5*timeout), StallNone) // still stalled: counted once
	other := w.begin()                     // another write, say the term's, on another file
	w.end(other)                           // returns while the first is still stuck
	check(start.Add(6*timeout), StallNone)
	assert.True(t, w.stalled.Load(), "the stuck write still holds the stall")
	w.end(stuck)
	tr, d := w.Check(start.Add(7*timeout), timeout)
	assert.Equal(t, StallEnded, tr)
	assert.Equal(t, 7*timeout, d.Round(timeout), "how long the stall lasted")
	check(time.Now().Add(time.Hour), StallNone)
	assert.EqualValues(t, 1, w.stalls.Load())
	assert.False(t, w.stalled.Load())
	assert.Empty(t, w.starts)
}

func TestStallCheckEvery(t *testing.T) {
	for _, c := range []struct{ timeout, want time.Duration }{
		{2 * time.Second, 100 * time.Millisecond},
		{500 * time.Millisecond, 50 * time.Millisecond},
		{time.Millisecond, 10 * time.Millisecond},
	} {
		assert.Equal(t, c.want, StallCheckEvery(c.timeout), "StallCheckEvery(%v)", c.timeout)
	}
}
