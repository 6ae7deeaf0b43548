package test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/checker"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/require"
)

// TestLinearizableUnderPartitions runs a randomized concurrent workload on
// small pools against every node of an in-process cluster while a nemesis
// partitions it for the first 6 s (then heals, and the clients go on for
// 2 s more), and checks the history: linearizable per value (porcupine),
// no value held by two owners, no acknowledged allocation lost, and every
// retried key answered as first. The seed is logged; set RANGEALLOC_SEED
// to replay one.
func TestLinearizableUnderPartitions(t *testing.T) {
	// Not parallel (docs/TESTING.md): it requires progress (more than 50
	// acknowledged operations in 8 s) through its nemesis.
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RANGEALLOC_SEED"); s != "" {
		_, err := fmt.Sscan(s, &seed)
		require.NoError(t, err)
	}
	t.Logf("seed %d (replay with RANGEALLOC_SEED=%d)", seed, seed)
	pools := []node.PoolSpec{{Name: "ip", Range: "10.0.0.0/29"}, {Name: "port", Range: "30000-30007"}}
	c := cluster.New(t, 3, cluster.Options{Pools: pools, Seed: int64(seed)})
	waitFor(t, c, "ip", "port")

	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var history checker.History
	record := func(op checker.Op) {
		mu.Lock()
		history = append(history, op)
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for client := 0; client < 6; client++ {
		wg.Add(1)
		go func(client int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(client)))
			runClient(ctx, c, client, rng, now, record)
		}(client)
	}
	// The nemesis' faults pile up until it heals (isolating two nodes in
	// turn cuts every link), so a seed that drew no heal for the whole run
	// let no write through. It stops 2 s before the clients and heals:
	// every run ends with a whole cluster that must elect a leader and
	// serve, which "the workload made progress" checks.
	faults, stopFaults := context.WithTimeout(ctx, 6*time.Second)
	defer stopFaults()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			c.Heal()
			t.Logf("%6dms nemesis: heal, and no more faults", time.Since(start).Milliseconds())
		}()
		rng := rand.New(rand.NewPCG(seed, 99))
		for faults.Err() == nil {
			switch rng.IntN(5) {
			case 0, 1:
				if l := leaderIndex(c); l >= 0 {
					c.Isolate(l)
					t.Logf("%6dms nemesis: isolate leader n%d", time.Since(start).Milliseconds(), l)
				}
			case 2:
				i := rng.IntN(3)
				c.Isolate(i)
				t.Logf("%6dms nemesis: isolate n%d", time.Since(start).Milliseconds(), i)
			default:
				c.Heal()
				t.Logf("%6dms nemesis: heal", time.Since(start).Milliseconds())
			}
			sleepCtx(faults, time.Duration(300+rng.IntN(900))*time.Millisecond)
		}
	}()
	wg.Wait()
	c.Heal()
	c.EnsureSame(t)

	final := map[string]map[string]string{}
	l := c.Leader()
	for _, p := range pools {
		allocs, _, err := l.Node.List(context.Background(), node.Linearizable, p.Name, "", "", 100)
		require.NoError(t, err)
		final[p.Name] = map[string]string{}
		for _, a := range allocs {
			final[p.Name][a.Value] = a.Owner
		}
	}
	counts := map[checker.Outcome]int{}
	for _, op := range history {
		counts[op.Outcome]++
	}
	t.Logf("%d ops: %d ok, %d failed, %d unknown", len(history), counts[checker.OK], counts[checker.Fail], counts[checker.Unknown])
	require.Greater(t, counts[checker.OK], 50, "the workload made progress")

	dir := os.Getenv("RANGEALLOC_ARTIFACTS") // keep the history and visualisation there
	if dir == "" {
		dir = t.TempDir()
	}
	failed := false
	for _, rep := range checker.CheckAll(history, final, 60*time.Second, filepath.Join(dir, "history.html")) {
		if !rep.OK {
			failed = true
			t.Errorf("%s: %v", rep.Name, rep.Problems)
		}
	}
	if failed {
		f, _ := os.Create(filepath.Join(dir, "history.jsonl"))
		_ = history.WriteJSONL(f)
		f.Close()
		t.Logf("history and visualisation in %s", dir)
	}
}

func waitFor(t *testing.T, c *cluster.Cluster, pools ...string) {
	l := c.Leader()
	require.Eventually(t, func() bool {
		for _, p := range pools {
			if _, err := l.Node.Pool(context.Background(), node.Leader, p); err != nil {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond)
}

func leaderIndex(c *cluster.Cluster) int {
	for _, m := range c.Live() {
		if m.Node.IsLeader() {
			return m.Index
		}
	}
	return -1
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

var values = map[string][]string{
	"ip":   {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"},
	"port": {"30000", "30001", "30002", "30003", "30004", "30005", "30006", "30007"},
}

// runClient issues random operations against random nodes until ctx ends.
// Every write has a unique key and every allocate a unique owner; a write
// whose outcome is unknown is retried once with the same key.
func runClient(ctx context.Context, c *cluster.Cluster, client int, rng *rand.Rand, now func() int64, record func(checker.Op)) {
	var mine []checker.Op // values this client holds, as far as it knows
	for n := 0; ctx.Err() == nil; n++ {
		m := c.Members[rng.IntN(len(c.Members))]
		pool := []string{"ip", "port"}[rng.IntN(2)]
		vals := values[pool]
		op := checker.Op{Client: client, Pool: pool}
		key := fmt.Sprintf("c%d-%d", client, n)
		switch r := rng.IntN(10); {
		case r < 3: // dynamic allocate
			op.Kind, op.Owner, op.Key = "allocate", key, key
		case r < 5: // static allocate
			op.Kind, op.Owner, op.Key, op.Value = "allocate", key, key, vals[rng.IntN(len(vals))]
		case r < 7 && len(mine) > 0: // release own value, with the owner precondition
			own := mine[rng.IntN(len(mine))]
			op.Kind, op.Pool, op.Value, op.Owner, op.Key = "release", own.Pool, own.Result, own.Owner, key
		case r < 8: // release any value, maybe foreign
			op.Kind, op.Value, op.Key = "release", vals[rng.IntN(len(vals))], key
		default:
			op.Kind, op.Value = "get", vals[rng.IntN(len(vals))]
		}
		for attempt := 0; attempt < 2; attempt++ {
			op.Attempt = attempt
			done := invoke(ctx, m.Node, &op, now)
			record(op)
			if op.Kind == "allocate" && op.Outcome == checker.OK {
				mine = append(mine, op)
			}
			if op.Kind == "release" && op.Outcome == checker.OK {
				for i, h := range mine {
					if h.Pool == op.Pool && h.Result == op.Value {
						mine = append(mine[:i], mine[i+1:]...)
						break
					}
				}
			}
			if !done || op.Key == "" {
				break
			}
		}
	}
}

// invoke runs one operation and fills in its outcome; it returns whether
// the outcome was unknown (and so worth a retry with the same key).
func invoke(ctx context.Context, n *node.Node, op *checker.Op, now func() int64) bool {
	octx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer cancel()
	op.Call = now()
	var err error
	switch op.Kind {
	case "allocate":
		var as []fsm.Allocation
		as, err = n.Allocate(octx, op.Pool, op.Value, op.Owner, 0, op.Key)
		if err == nil {
			op.Result = as[0].Value
		}
	case "release":
		_, err = n.Release(octx, op.Pool, op.Value, op.Owner, op.Key)
	case "get":
		var a fsm.Allocation
		a, err = n.Get(octx, node.Linearizable, op.Pool, op.Value)
		if err == nil {
			op.Result = a.Owner
		}
		if errors.Is(err, &fsm.Error{Code: fsm.CodeNotAllocated}) {
			op.Result, err = "", nil
		}
	}
	op.Return = now()
	var fe *fsm.Error
	switch {
	case err == nil:
		op.Outcome = checker.OK
	case errors.As(err, &fe):
		op.Outcome, op.Err, op.Result = checker.Fail, string(fe.Code), fe.Owner
	case errors.Is(err, node.ErrUnknownOutcome), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		if op.Kind == "get" {
			op.Outcome, op.Err = checker.Fail, "timeout" // a read that did not answer changed nothing
			return false
		}
		op.Outcome = checker.Unknown
		return true
	default: // ErrNoLeader: definite, nothing applied
		op.Outcome, op.Err = checker.Fail, err.Error()
	}
	return false
}
