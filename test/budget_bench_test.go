package test

import (
	"context"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics/compat"
	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/cluster"
)

// BenchmarkLatencyBudget times one caller's dynamic allocations stage by
// stage, on an in-process three-node cluster (bolt stores with fsync on,
// one disk, TCP on loopback), four ways: the embedded API on the leader
// and on a follower (which forwards), and the HTTP API on each. Every
// figure is a mean in µs over the run, so the stages add up: the
// client's time (total), then the node's stage timings (node/trace.go)
// and hashicorp/raft's own, all read from an in-memory go-metrics sink.
//
// Reading one run: total − forward.call (follower) or − queue − raft −
// answer (leader) is what the caller's side adds (the HTTP layer, or the
// embedded call's own work); forward.call − forward.serve is the
// forwarding RPC (codec, loopback, goroutines); raft is the leader's
// store (dispatchLog), the replication round (appendEntries.rpc, of
// which the follower's store is storeLogs), the commit and apply
// hand-offs, and the state machine (fsm.applyBatch).
func BenchmarkLatencyBudget(b *testing.B) {
	c := cluster.New(b, 3, cluster.Options{Pools: []node.PoolSpec{{Name: "ip", Range: "10.96.0.0/12"}},
		Tune: productionTransport})
	l := c.Leader()
	var f *cluster.Member
	for _, m := range c.Members {
		if m != l {
			f = m
			break
		}
	}
	ctx := context.Background()
	for {
		if _, err := l.Node.Pool(ctx, node.Leader, "ip"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	httpClient := func(m *cluster.Member) *client.Client {
		srv := httptest.NewServer(api.NewServer(m.Node, api.Options{}))
		b.Cleanup(srv.Close)
		return client.New(srv.URL, nil)
	}
	lc, fc := httpClient(l), httpClient(f)
	for _, tc := range []struct {
		name  string
		alloc func() error
	}{
		{"embedded/leader", func() error { _, err := l.Node.Allocate(ctx, "ip", "", "budget", 0, ""); return err }},
		{"embedded/follower", func() error { _, err := f.Node.Allocate(ctx, "ip", "", "budget", 0, ""); return err }},
		{"http/leader", func() error { _, _, err := lc.Allocate(ctx, "ip", "", "budget", client.Options{}); return err }},
		{"http/follower", func() error { _, _, err := fc.Allocate(ctx, "ip", "", "budget", client.Options{}); return err }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range 50 { // warm connections and caches
				if err := tc.alloc(); err != nil {
					b.Fatal(err)
				}
			}
			sink := inmemMetrics(b)
			lats := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if err := tc.alloc(); err != nil {
					b.Fatal(err)
				}
				lats = append(lats, time.Since(t0))
			}
			b.StopTimer()
			var sum time.Duration
			for _, d := range lats {
				sum += d
			}
			sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
			b.ReportMetric(float64(sum.Microseconds())/float64(len(lats)), "total-µs")
			b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
			for name, mean := range stageMeans(sink) {
				b.ReportMetric(mean, name+"-µs")
			}
		})
	}
}

// productionTransport takes the test harness's fault table out of a
// node's Raft transport and forwarding dial, as the server runs them: the
// table's pipeline adds a goroutine hand-off per AppendEntries.
func productionTransport(cfg *node.Config) {
	cfg.WrapTransport, cfg.DialRPC = nil, nil
}

// inmemMetrics sends the process's go-metrics (the node's stage timings
// and hashicorp/raft's) to an in-memory sink until tb ends, under the
// names the server exports ("rangealloc." and the key).
func inmemMetrics(tb testing.TB) *gometrics.InmemSink {
	sink := gometrics.NewInmemSink(time.Hour, 2*time.Hour)
	conf := gometrics.DefaultConfig("rangealloc")
	conf.EnableHostname, conf.EnableRuntimeMetrics, conf.EnableServiceLabel = false, false, false
	if _, err := gometrics.NewGlobal(conf, sink); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _, _ = gometrics.NewGlobal(conf, &gometrics.BlackholeSink{}) })
	return sink
}

// budgetStages are the timings BenchmarkLatencyBudget reports, by the
// go-metrics name after "rangealloc.", and the short name it reports
// them as.
var budgetStages = map[string]string{
	"node.forward.call":                  "forward.call",
	"node.forward.serve":                 "forward.serve",
	"node.leader.queue":                  "queue",
	"node.leader.raft":                   "raft",
	"node.leader.answer":                 "answer",
	"raft.leader.dispatchLog":            "raft.leaderStore",
	"raft.replication.appendEntries.rpc": "raft.replicate",
	"raft.rpc.appendEntries":             "raft.followerAppend",
	"raft.rpc.appendEntries.storeLogs":   "raft.followerStore",
	"raft.commitTime":                    "raft.commit",
	"raft.fsm.enqueue":                   "raft.fsmEnqueue",
	"raft.fsm.applyBatch":                "raft.fsmApply",
	"raft.net.rpcDecode":                 "raft.netDecode",
	"raft.net.rpcEnqueue":                "raft.netEnqueue",
	"raft.net.rpcRespond":                "raft.netRespond",
	"raft.rpc.appendEntries.processLogs": "raft.followerProcess",
}

// stageMeans sums each stage's samples over the sink's intervals (labels
// dropped, so every peer's replication counts) and returns their means
// in µs.
func stageMeans(sink *gometrics.InmemSink) map[string]float64 {
	type agg struct{ sum, count float64 }
	aggs := map[string]*agg{}
	for _, iv := range sink.Data() {
		iv.RLock()
		for key, s := range iv.Samples {
			name, _, _ := strings.Cut(strings.TrimPrefix(key, "rangealloc."), ";")
			short := budgetStages[name]
			if short == "" {
				continue
			}
			a := aggs[short]
			if a == nil {
				a = &agg{}
				aggs[short] = a
			}
			a.sum += s.Sum
			a.count += float64(s.Count)
		}
		iv.RUnlock()
	}
	out := map[string]float64{}
	for name, a := range aggs {
		out[name] = 1000 * a.sum / a.count // go-metrics times are in ms
	}
	return out
}
