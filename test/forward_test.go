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
// travel to the leader in shared SubmitBatch calls (node/fwdbatch.go),
// and each caller still gets its own answer: every write succeeds, no
// value has two owners, and the leader holds exactly what was answered.
// Each write to the forwarding connection takes 5 ms here, so the writes
// that arrive while a call is being sent wait for the next, whatever the
// machine's speed.
func TestForwardedWritesShareCalls(t *testing.T) {
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
	l := waitPools(t, c)
	f := follower(c, l)
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
	require.Len(t, owners, callers*each)
	for value, owner := range owners {
		a, err := l.Node.Get(ctx, node.Linearizable, "ip", value)
		require.NoError(t, err)
		assert.Equal(t, owner, a.Owner, "value %s", value)
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
}

// slowWrites is a connection whose every write takes 5 ms longer.
type slowWrites struct{ net.Conn }

func (c slowWrites) Write(p []byte) (int, error) {
	time.Sleep(5 * time.Millisecond)
	return c.Conn.Write(p)
}
