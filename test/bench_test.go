package test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/internal/testaddr"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/cluster"
)

// BenchmarkEmbeddedAllocate drives the embedded API on the leader of an
// in-process three-node cluster (bolt stores with fsync on disk, the TCP
// transport on loopback): each op is one dynamic allocation; the pool is a
// /12 so it never fills. It reports allocations per second and p50/p99
// latency per caller count. inflight=64 is the baseline: group commit
// without a bound on the entries in flight, which packs almost nothing.
func BenchmarkEmbeddedAllocate(b *testing.B) {
	dflt := node.DefaultConfig().BatchWait
	for _, tc := range []struct {
		callers, inflight int
		wait              time.Duration
	}{{1, 1, dflt}, {16, 1, dflt}, {16, 1, 0}, {64, 1, dflt}, {64, 1, 0}, {64, 64, 0}} {
		callers, inflight, wait := tc.callers, tc.inflight, tc.wait
		b.Run(fmt.Sprintf("callers=%d/inflight=%d/wait=%v", callers, inflight, wait), func(b *testing.B) {
			embeddedAllocate(b, callers, func(cfg *node.Config) { cfg.MaxInflight, cfg.BatchWait = inflight, wait },
				func(c *cluster.Cluster, _ int) *cluster.Member { return c.Leader() })
		})
	}
}

// BenchmarkEmbeddedAllNodes is the embedded API as control planes use
// it, each calling the node it embeds: callers spread over all three
// nodes (two in three forwarded by a follower), with the server's
// transport and defaults. It is the counterpart of etcd's Go client over
// its members, in the same process (etcdalloc -members 3 -mode put -c N);
// the log store is RANGEALLOC_TEST_LOG_STORE's, bolt by default.
func BenchmarkEmbeddedAllNodes(b *testing.B) {
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			embeddedAllocate(b, callers, productionTransport,
				func(c *cluster.Cluster, i int) *cluster.Member { return c.Members[i%len(c.Members)] })
		})
	}
}

// embeddedAllocate runs b.N dynamic allocations from callers goroutines,
// caller i on the node pick gives it, and reports allocations/s, p50 and
// p99 latency, entries/s and requests per entry.
func embeddedAllocate(b *testing.B, callers int, tune func(*node.Config), pick func(*cluster.Cluster, int) *cluster.Member) {
	var entries, requests atomic.Int64
	c := cluster.New(b, 3, cluster.Options{Pools: []node.PoolSpec{{Name: "ip", Range: "10.96.0.0/12"}},
		Tune: func(cfg *node.Config) {
			tune(cfg)
			cfg.OnCommit = func(n int, _ time.Duration) { entries.Add(1); requests.Add(int64(n)) }
		}})
	ctx := context.Background()
	c.Leader()
	for _, m := range c.Members { // every node has applied the pool
		for {
			if _, err := m.Node.Pool(ctx, node.Stale, "ip"); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	lats := make([][]time.Duration, callers)
	per := b.N/callers + 1
	entries.Store(0)
	requests.Store(0)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			n := pick(c, i).Node
			owner := fmt.Sprintf("caller-%d", i)
			for j := 0; j < per; j++ {
				t0 := time.Now()
				if _, err := n.Allocate(ctx, "ip", "", owner, 0, ""); err != nil {
					b.Error(err)
					return
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "allocs/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(entries.Load())/elapsed.Seconds(), "entries/s")
	b.ReportMetric(float64(requests.Load())/float64(max(entries.Load(), 1)), "reqs/entry")
}

// BenchmarkRestart1M fills a single node with 1,000,000 allocations, each
// with its own owner, snapshots, stops it, and measures opening it again
// until it serves a linearizable read, and the heap it holds then.
func BenchmarkRestart1M(b *testing.B) {
	dir := b.TempDir()
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.RaftAddr = dir, testaddr.Loopback(b)
	cfg.Pools = []node.PoolSpec{{Name: "ip", Range: "10.96.0.0/12"}}
	ctx := context.Background()
	n, err := node.Open(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	for {
		if _, err := n.Pool(ctx, node.Linearizable, "ip"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	const total, perTxn = 1_000_000, 4096
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for done := 0; done < total; done += perTxn {
		k := min(perTxn, total-done)
		wg.Add(1)
		sem <- struct{}{}
		go func(base, k int) {
			defer wg.Done()
			defer func() { <-sem }()
			ops := make([]fsmOp, k)
			for i := range ops {
				ops[i] = allocOp("ip", fmt.Sprintf("default/svc-%07d", base+i))
			}
			if _, err := n.Txn(ctx, ops, ""); err != nil {
				b.Error(err)
			}
		}(done, k)
	}
	wg.Wait()
	if err := n.Snapshot(); err != nil {
		b.Fatal(err)
	}
	if err := n.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runtime.GC()
		t0 := time.Now()
		n, err = node.Open(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		for {
			st, err := n.Pool(ctx, node.Linearizable, "ip")
			if err == nil && st.Used == total {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		ready := time.Since(t0)
		b.StopTimer()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ready.Milliseconds()), "ready-ms")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MB")
		if rss, ok := rssMB(); ok {
			b.ReportMetric(rss, "rss-MB")
		}
		if err := n.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// rssMB reads the process's resident set size.
func rssMB() (float64, bool) {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	var size, rss int64
	if _, err := fmt.Sscan(string(data), &size, &rss); err != nil {
		return 0, false
	}
	return float64(rss*int64(os.Getpagesize())) / (1 << 20), true
}
