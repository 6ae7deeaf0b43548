package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/service"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTruncatedTailRestart: a leader appends entries that reach no
// follower (every message it sends is lost), is killed, and the others
// elect a leader and write on. The old leader starts again and follows:
// Raft truncates its log's tail ("clearing log suffix"). It must then
// start again, and again, with every acknowledged value. raft-wal before
// v0.4.1 sealed a segment without its index on a tail truncation and
// refused to open it afterwards ("sealed segment has no index block").
func TestTruncatedTailRestart(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, truncatedTailRestart)
}

func truncatedTailRestart(t *testing.T, store string) {
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, LogStore: store})
	waitPools(t, c)
	ctx := ctxT(t, 60*time.Second)
	l := c.Leader()
	acked := allocateAcked(ctx, t, l.Node, 20)
	// The leader appends alone: every message it sends is lost. A write
	// it acknowledges anyway (it lost leadership first and forwarded it)
	// is kept with the others. Tried again until the leader appended at
	// least one entry alone.
	var rest []int
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 10, "the leader never appended an entry alone")
		l = c.Leader()
		rest = rest[:0]
		for _, m := range c.Members {
			if m != l {
				rest = append(rest, m.Index)
				c.Faults.Drop(raft.ServerAddress(l.Addr), raft.ServerAddress(m.Addr), 1)
			}
		}
		for i := 0; i < 3 && l.Node.IsLeader(); i++ {
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			owner := fmt.Sprintf("alone-%d-%d", attempt, i)
			got, err := l.Node.Allocate(short, "ip", "", owner, 0, owner)
			cancel()
			if err == nil {
				acked[got[0].Value] = owner
			}
		}
		st := l.Node.Stats()
		last, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
		commit, _ := strconv.ParseUint(st["commit_index"], 10, 64)
		if last > commit {
			break
		}
		c.Heal()
	}
	c.Kill(l.Index)
	c.Heal()
	nl := c.LeaderAmong(rest...)
	for i := 0; i < 20; i++ {
		owner := fmt.Sprintf("after-%d", i)
		got, err := nl.Node.Allocate(ctx, "ip", "", owner, 0, owner)
		require.NoError(t, err)
		acked[got[0].Value] = owner
	}

	logs := &lockedBuffer{}
	cfg := c.Config(l.Index)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: l.ID, Level: hclog.Warn, Output: logs})
	c.SetConfig(l.Index, cfg)
	c.Start(l.Index)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "clearing log suffix") },
		20*time.Second, 20*time.Millisecond, "the old leader truncates its log's tail to follow the new leader")
	for i := 0; i < 2; i++ {
		c.Restart(l.Index) // fails the test if the node refuses to start
		c.Leader()
	}
	c.EnsureSame(t)
	requireAcked(ctx, t, c.Members[l.Index].Node, acked)
}

// valve stalls the store writes of a node while shut: its disk, frozen.
type valve struct {
	mu sync.Mutex
	// mu guards the following
	open chan struct{} // closed while writes pass
}

func newValve() *valve {
	v := &valve{open: make(chan struct{})}
	close(v.open)
	return v
}

// wait blocks while the valve is shut (node.Config.BeforeStoreWrite).
func (v *valve) wait() {
	v.mu.Lock()
	ch := v.open
	v.mu.Unlock()
	<-ch
}

func (v *valve) shut() {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.open:
		v.open = make(chan struct{})
	default:
	}
}

func (v *valve) release() {
	v.mu.Lock()
	defer v.mu.Unlock()
	select {
	case <-v.open:
	default:
		close(v.open)
	}
}

// stallCluster starts three nodes whose store writes pass through a valve
// each, with DiskStallTimeout stall (0: off). A node named in noRPC dials
// no forwarding RPC while it is true there: it asks nobody anything (a
// stalled leader's hand-off probes the others that way).
func stallCluster(t *testing.T, store string, stall time.Duration, noRPC map[string]*atomic.Bool) (*cluster.Cluster, map[string]*valve) {
	valves := map[string]*valve{}
	for i := 0; i < 3; i++ {
		valves[fmt.Sprintf("n%d", i)] = newValve()
	}
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, LogStore: store, Tune: func(cfg *node.Config) {
		cfg.DiskStallTimeout = stall
		cfg.BeforeStoreWrite = valves[cfg.ID].wait
		if off := noRPC[cfg.ID]; off != nil {
			dial := cfg.DialRPC
			cfg.DialRPC = func(addr string, timeout time.Duration) (net.Conn, error) {
				if off.Load() {
					return nil, errNoRPC
				}
				conn, err := dial(addr, timeout)
				if err != nil {
					return nil, err
				}
				return &switchedConn{Conn: conn, off: off}, nil
			}
		}
	}})
	t.Cleanup(func() { // before the cluster's own clean-up: a node closes once its writes return
		for _, v := range valves {
			v.release()
		}
	})
	return c, valves
}

var errNoRPC = errors.New("this node's RPC is switched off (test)")

// switchedConn fails every write while off is true: a connection pooled
// before the switch carries nothing either.
type switchedConn struct {
	net.Conn
	off *atomic.Bool
}

func (c *switchedConn) Write(p []byte) (int, error) {
	if c.off.Load() {
		return 0, errNoRPC
	}
	return c.Conn.Write(p)
}

// TestDiskStallLeaderGivesWay: the leader's disk stops answering. Writes
// through a follower resume once the stall timeout has passed and the
// others have elected a leader; the stalled node says disk_stalled. When
// its disk answers again it follows, with every acknowledged value, and a
// write it had taken when its disk stalled is applied once at most: asked
// again under its request ID, it gives one value.
//
// Two ways: the stalled leader hands off (it asks the voter with the
// longest log to take over), or it cannot (it reaches no other node's
// RPC), and the followers elect once its Raft messages stop.
func TestDiskStallLeaderGivesWay(t *testing.T) {
	// Not parallel (docs/TESTING.md): its stall timeout is 500 ms and it
	// counts exactly one stall, which a slow store write on a loaded disk
	// would add to.
	forEachLogStore(t, func(t *testing.T, store string) {
		t.Run("hand-off", func(t *testing.T) { diskStallLeaderGivesWay(t, store, true) })
		t.Run("silence", func(t *testing.T) { diskStallLeaderGivesWay(t, store, false) })
	})
}

func diskStallLeaderGivesWay(t *testing.T, store string, handOff bool) {
	const stall = 500 * time.Millisecond
	noRPC := map[string]*atomic.Bool{"n0": {}, "n1": {}, "n2": {}}
	c, valves := stallCluster(t, store, stall, noRPC)
	l := waitPools(t, c)
	ctx := ctxT(t, 60*time.Second)
	acked := allocateAcked(ctx, t, l.Node, 10)
	var rest []int
	for _, m := range c.Members {
		if m != l {
			rest = append(rest, m.Index)
		}
	}
	f := c.Members[rest[0]]

	noRPC[l.ID].Store(!handOff)
	valves[l.ID].shut()
	stuck := make(chan error, 1)
	go func() {
		_, err := l.Node.Allocate(ctx, "ip", "", "stuck", 0, "stuck")
		stuck <- err
	}()
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	got, err := f.Node.Allocate(wctx, "ip", "", "during", 0, "during")
	cancel()
	require.NoError(t, err, "a write through a follower while the leader's disk is stalled")
	t.Logf("a write through a follower succeeded %v after the leader's disk stalled (timeout %v)", time.Since(start).Round(time.Millisecond), stall)
	acked[got[0].Value] = "during"
	nl := c.LeaderAmong(rest...)
	assert.True(t, l.Node.DiskStalled())
	assert.Equal(t, node.ReasonDiskStalled, l.Node.Readiness().Reason)
	for i := 0; i < 10; i++ {
		owner := fmt.Sprintf("after-%d", i)
		got, err := c.Members[rest[i%2]].Node.Allocate(ctx, "ip", "", owner, 0, owner)
		require.NoError(t, err)
		acked[got[0].Value] = owner
	}

	valves[l.ID].release()
	noRPC[l.ID].Store(false)
	require.Eventually(t, func() bool { return !l.Node.DiskStalled() && l.Node.Readiness().Ready }, 20*time.Second, 20*time.Millisecond,
		"the node whose disk answers again follows the new leader")
	assert.False(t, l.Node.IsLeader())
	assert.EqualValues(t, 1, l.Node.DiskStats().Stalls, "one stall counted")
	first := <-stuck
	again, err := nl.Node.Allocate(ctx, "ip", "", "stuck", 0, "stuck")
	require.NoError(t, err, "the write asked again under its request ID (the first answered %v)", first)
	held, _, err := nl.Node.List(ctx, node.Linearizable, "ip", "stuck", "", 10)
	require.NoError(t, err)
	require.Len(t, held, 1, "the stalled leader's write is applied once at most")
	assert.Equal(t, again[0].Value, held[0].Value)
	c.EnsureSame(t)
	requireAcked(ctx, t, l.Node, acked)
}

// TestReadyNotBeforePools: a node that says it is ready holds the
// configured pools and service network, on a leader and on followers,
// however slowly the founding leader writes them (each store write here
// takes 20 ms more). It used to say ready once the leader had applied an
// entry of its term, before the pools existed, and allocations then got
// PoolNotFound.
func TestReadyNotBeforePools(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d nodes", size), func(t *testing.T) {
			c := cluster.New(t, size, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
				cfg.BeforeStoreWrite = func() { time.Sleep(20 * time.Millisecond) }
				cfg.ServiceNetwork = &fsm.ServiceNetwork{Families: []service.Family{service.IPv4}, IPv4Pool: "ip", NodePortPool: "port"}
			}})
			seen := map[string]bool{}
			require.Eventually(t, func() bool {
				for _, m := range c.Members {
					if seen[m.ID] || !m.Node.Readiness().Ready {
						continue
					}
					seen[m.ID] = true
					st := m.Node.LocalState()
					var names []string
					for _, p := range st.Pools() {
						names = append(names, p.Name)
					}
					assert.ElementsMatch(t, []string{"ip", "port"}, names, "%s says it is ready", m.ID)
					assert.Equal(t, "ip", st.ServiceNetwork().IPv4Pool, "%s says it is ready", m.ID)
				}
				return len(seen) == size
			}, 30*time.Second, time.Millisecond, "every node ready")
		})
	}
}
