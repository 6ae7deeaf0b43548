package node

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestFill checks how the group commit packs an entry: everything waiting,
// up to MaxBatch; and, while fewer than the last entry's callers are
// back, more of them for at most BatchWait.
func TestFill(t *testing.T) {
	newNode := func(maxBatch int, wait time.Duration) *Node {
		return &Node{cfg: Config{MaxBatch: maxBatch, BatchWait: wait},
			proposals: make(chan *proposal, 16), shutdown: make(chan struct{})}
	}
	queue := func(n *Node, k int) {
		for range k {
			n.proposals <- &proposal{}
		}
	}
	first := []*proposal{{}}
	// fill runs n.fill and fails the test, rather than hang it, when fill
	// does not return.
	fill := func(t *testing.T, n *Node, want int) []*proposal {
		out := make(chan []*proposal, 1)
		go func() { out <- n.fill(first, want) }()
		select {
		case b := <-out:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("fill did not return")
			return nil
		}
	}

	t.Run("takes what waits, up to MaxBatch", func(t *testing.T) {
		n := newNode(3, 0)
		queue(n, 5)
		assert.Len(t, fill(t, n, 1), 3)
		assert.Len(t, n.proposals, 3, "the rest wait for the next entry")
	})
	t.Run("no wait without BatchWait", func(t *testing.T) {
		n := newNode(100, 0)
		queue(n, 1)
		assert.Len(t, fill(t, n, 64), 2)
	})
	t.Run("waits for the callers coming back", func(t *testing.T) {
		// The wait is an hour: the test ends only if fill stops as soon
		// as the batch is as large as wanted.
		n := newNode(100, time.Hour)
		queue(n, 1)
		go func() {
			time.Sleep(20 * time.Millisecond)
			queue(n, 3)
		}()
		assert.Len(t, fill(t, n, 5), 5)
	})
	t.Run("gives up after BatchWait", func(t *testing.T) {
		n := newNode(100, 10*time.Millisecond)
		queue(n, 1)
		assert.Len(t, fill(t, n, 64), 2)
	})
	t.Run("stops at shutdown", func(t *testing.T) {
		n := newNode(100, time.Hour)
		close(n.shutdown)
		assert.Len(t, fill(t, n, 64), 1)
	})
	t.Run("no wait when the batch is large enough", func(t *testing.T) {
		n := newNode(100, time.Hour)
		queue(n, 2)
		assert.Len(t, fill(t, n, 2), 3)
	})
}
