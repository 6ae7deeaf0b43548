package test

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestForwardedWritesShareCalls: writes made together on a follower
// travel to the leader in shared SubmitBatch calls (node/internal/forward/batch.go),
// and each caller still gets its own answer: every write succeeds, no
// value has two owners, and the leader holds exactly what was answered.
// Each write to the forwarding connection takes 5 ms here, so the writes
// that arrive while a call is being sent wait for the next, whatever the
// machine's speed.
//
// The checks on the batches count on the writing follower staying a
// follower, and the leader leading, while the writes are made: after an
// election the follower applies writes itself, or sends again to the new
// leader the writes whose call the old one left unanswered. An election the
// test does not cause (heartbeats late on a loaded machine) shows as a term
// that moved, or a leader that changed, between a look at the cluster
// before the writes and one after. Such an attempt's other checks still
// hold (they must, elections or not), and the scenario runs again on a new
// cluster, at most electionAttempts times.
func TestForwardedWritesShareCalls(t *testing.T) {
	// Not parallel (docs/TESTING.md): it reads go-metrics' global sink,
	// which every node in this process writes to.
	for attempt := 1; attempt <= electionAttempts; attempt++ {
		var disturbed string
		if !t.Run(fmt.Sprintf("attempt %d", attempt), func(t *testing.T) { disturbed = forwardedWritesShareCalls(t) }) {
			return
		}
		if disturbed == "" {
			return
		}
		t.Logf("attempt %d: %s during the writes: an election the test did not cause, after which the batches prove nothing; running the scenario again", attempt, disturbed)
	}
	t.Fatalf("in each of %d attempts a term moved or the leader changed during the writes: elections the test did not cause, every time", electionAttempts)
}

// forwardedWritesShareCalls runs TestForwardedWritesShareCalls's scenario
// on a new cluster. It returns how leadership moved during the writes, in
// which case it checked everything but the batches, or "".
func forwardedWritesShareCalls(t *testing.T) (disturbed string) {
	sink := inmemMetrics(t)

	ctx := ctxT(t, 60*time.Second)
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		dial := cfg.DialRPC
		cfg.DialRPC = func(addr string, timeout time.Duration) (net.Conn, error) {
			conn, err := dial(addr, timeout)
			if err != nil {
				return nil, err
			}
			return slowWrites{conn}, nil
		}
	}})
	waitPools(t, c)
	before := settledView(t, c)
	f := follower(c, before.leader)
	const callers, each = 32, 4
	var mu sync.Mutex
	owners := map[string]string{} // value → owner
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("caller-%d", i)
			for range each {
				got, err := f.Node.Allocate(ctx, "ip", "", owner, 0, "")
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				prev, dup := owners[got[0].Value]
				owners[got[0].Value] = owner
				mu.Unlock()
				assert.False(t, dup, "value %s answered to %s and to %s", got[0].Value, prev, owner)
			}
		}()
	}
	wg.Wait()
	moved := before.changed(viewRaft(c))
	require.Len(t, owners, callers*each)
	l := c.Leader()
	for value, owner := range owners {
		a, err := l.Node.Get(ctx, node.Linearizable, "ip", value)
		require.NoError(t, err)
		assert.Equal(t, owner, a.Owner, "value %s", value)
	}
	if moved != "" {
		return moved
	}

	var calls, writes float64
	for _, iv := range sink.Data() {
		iv.RLock()
		if s, ok := iv.Samples["rangealloc.node.forward.batch"]; ok {
			calls += float64(s.Count)
			writes += s.Sum
		}
		iv.RUnlock()
	}
	require.EqualValues(t, callers*each, writes, "every forwarded write rode a batch")
	assert.Less(t, calls, writes/2, "%v calls carried %v writes: 32 callers at once should share calls", calls, writes)
	return ""
}

// slowWrites is a connection whose every write takes 5 ms longer.
type slowWrites struct{ net.Conn }

func (c slowWrites) Write(p []byte) (int, error) {
	time.Sleep(5 * time.Millisecond)
	return c.Conn.Write(p)
}
