package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/spf13/cobra"
)

type benchFlags struct {
	clients  int
	duration time.Duration
	pool     string
	mix      string
	count    int
	nodes    string
}

// benchResult is what `bench -o json` prints.
type benchResult struct {
	Ops       int64   `json:"ops"`
	Values    int64   `json:"values"`
	Errors    int64   `json:"errors"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"opsPerSec"`
	ValPerSec float64 `json:"valuesPerSec"`
	P50ms     float64 `json:"p50ms"`
	P90ms     float64 `json:"p90ms"`
	P99ms     float64 `json:"p99ms"`
	Nodes     int     `json:"nodes"`
	Clients   int     `json:"clients"`
	Mix       string  `json:"mix"`
	Count     int     `json:"count"`
	// The machine's CPUs while the clients ran (from /proc/stat, absent
	// where there is none): percent busy, and microseconds of CPU time
	// per operation of all processes together; and the load generator's
	// own microseconds per operation (Unix).
	CPUBusyPercent  *float64 `json:"cpuBusyPercent,omitempty"`
	CPUPerOpUs      *float64 `json:"cpuPerOpUs,omitempty"`
	BenchCPUPerOpUs float64  `json:"benchCpuPerOpUs"`
}

func newBenchCmd(g *globals) *cobra.Command {
	f := &benchFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Generate load and report throughput and latency",
		Long: `Generate load against one node (--addr) or every node of the cluster
(--nodes all), and print operations per second, values per second, p50/p90/p99
latency and errors, with a progress line every second.

--mix weighs the operations: allocate (dynamic), release (of a value this
client allocated; with --count, of as many values in one transaction), get,
and health (GET /healthz: the HTTP round trip alone, a baseline for the
others on the same machine). Or, on their own, service-create (a NodePort
Service with two ports, PreferDualStack, in namespace rangealloc-bench)
and service-delete (of a Service this client created).
VALUES/S counts allocated values. Each client releases what it still holds
when the run ends, off the clock, so runs do not fill the pool.

CPU is how busy the machine's CPUs were while the clients ran (from
/proc/stat, so every process counts, Linux only; busy ticks over all
ticks, as top counts), CPU/OP the CPU time all processes spent per
operation, and BENCH/OP the load generator's own part of it. With the
servers on the same machine, a CPU near 100% means the figures measure
the CPUs, and CPU/OP is what an operation costs them.`,
		Example: `  rangealloc bench --clients 64 --duration 10s --pool clusterip-ipv4 --nodes all
  rangealloc bench --clients 8 --count 4096 --pool clusterip-ipv4 --mix allocate=1,release=1
  rangealloc bench --mix allocate=50,release=40,get=10
  rangealloc bench --clients 64 --nodes all --mix service-create=1,service-delete=1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.clients, "clients", 16, "concurrent clients")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long to run")
	fl.StringVar(&f.pool, "pool", "clusterip-ipv4", "pool to allocate from")
	fl.StringVar(&f.mix, "mix", "allocate=1,release=1", "operation weights: allocate=N,release=N,get=N,health=N; or service-create=N,service-delete=N")
	fl.IntVar(&f.count, "count", 1, "values per allocate (1-4096)")
	fl.StringVar(&f.nodes, "nodes", "", `"all": spread clients over every member's API; or a comma list of HTTP addresses (default: --addr)`)
	return cmd
}

// cleanup releases what a client still holds, off the clock, so that runs
// do not fill the pool.
func cleanup(ctx context.Context, c *client.Client, pool, owner string, held []string) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for len(held) > 0 {
		k := min(4096, len(held))
		ops := make([]api.TxnOp, k)
		for j, v := range held[len(held)-k:] {
			ops[j] = api.TxnOp{Op: "release", Pool: pool, Value: v, Owner: owner}
		}
		if _, err := c.Txn(ctx, ops, client.Options{}); err != nil {
			return
		}
		held = held[:len(held)-k]
	}
}

type mixWeights struct{ alloc, release, get, health, svcCreate, svcDelete int }

func (m mixWeights) total() int {
	return m.alloc + m.release + m.get + m.health + m.svcCreate + m.svcDelete
}

func parseMix(s string) (mixWeights, error) {
	var m mixWeights
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return m, fmt.Errorf("--mix %q: want allocate=N,release=N,get=N,health=N (or service-create=N,service-delete=N)", s)
		}
		switch k {
		case "allocate":
			m.alloc = n
		case "release":
			m.release = n
		case "get":
			m.get = n
		case "health":
			m.health = n
		case "service-create":
			m.svcCreate = n
		case "service-delete":
			m.svcDelete = n
		default:
			return m, fmt.Errorf("--mix: unknown operation %q (allocate, release, get, health, service-create, service-delete)", k)
		}
	}
	if (m.svcCreate > 0 || m.svcDelete > 0) && m.alloc+m.release+m.get+m.health > 0 {
		return m, fmt.Errorf("--mix %q: service-create and service-delete do not mix with the other operations", s)
	}
	if m.total() == 0 {
		return m, fmt.Errorf("--mix %q: all weights are zero", s)
	}
	return m, nil
}

func benchTargets(ctx context.Context, g *globals, nodes string) ([]string, error) {
	switch nodes {
	case "":
		return []string{g.addr}, nil
	case "all":
		st, err := g.client().Cluster(ctx)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, m := range st.Members {
			if m.APIAddr != "" {
				out = append(out, m.APIAddr)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("--nodes all: no member has an API address")
		}
		return out, nil
	}
	return strings.Split(nodes, ","), nil
}

// benchStats collects what the bench clients measured.
type benchStats struct {
	ops, values, errs atomic.Int64
	firstErr          atomic.Value
	lats              [][]time.Duration // one slice per client: no lock needed
}

// record counts one operation of client i that began at t0: an error, or
// its latency and the values it allocated.
func (st *benchStats) record(i int, t0 time.Time, err error, values int64) {
	if err != nil {
		st.errs.Add(1)
		st.firstErr.CompareAndSwap(nil, err.Error())
		return
	}
	st.lats[i] = append(st.lats[i], time.Since(t0))
	st.ops.Add(1)
	st.values.Add(values)
}

func runBench(cmd *cobra.Command, g *globals, f *benchFlags) error {
	mix, err := parseMix(f.mix)
	if err != nil {
		return err
	}
	if f.clients < 1 || f.count < 1 || f.count > 4096 || f.duration <= 0 {
		return fmt.Errorf("--clients and --duration must be positive and --count 1 to 4096")
	}
	ctx := cmd.Context()
	targets, err := benchTargets(ctx, g, f.nodes)
	if err != nil {
		return err
	}
	hc, err := g.httpClient(30*time.Second, f.clients, certs.Paths{})
	if err != nil {
		return err
	}
	st := &benchStats{lats: make([][]time.Duration, f.clients)}
	runCtx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	start, startCPU := time.Now(), sampleCPU()
	type end struct {
		at  time.Time
		cpu cpuSample
		ops int64
	}
	ended := make(chan end, 1)
	go func() {
		<-runCtx.Done() // operations finishing later do not count
		ended <- end{time.Now(), sampleCPU(), st.ops.Load()}
	}()
	var wg sync.WaitGroup
	for i := 0; i < f.clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := g.clientOf(targets[i%len(targets)], hc)
			rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			if mix.svcCreate+mix.svcDelete > 0 {
				cleanupServices(ctx, c, benchServices(runCtx, c, mix, i, rng, st))
				return
			}
			held := benchClient(runCtx, c, f, mix, i, rng, st)
			cleanup(ctx, c, f.pool, benchOwner(i), held)
		}(i)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	progress(cmd, start, st, done)
	e := <-ended
	return report(cmd, g, f, len(targets), e.at.Sub(start), cpuBetween(startCPU, e.cpu, e.ops), st)
}

func benchOwner(i int) string { return fmt.Sprintf("bench-%d", i) }

// benchClient issues operations until ctx ends and returns the values it
// still holds.
func benchClient(ctx context.Context, c *client.Client, f *benchFlags, mix mixWeights, i int, rng *rand.Rand, st *benchStats) []string {
	var (
		held []string
		ops  []api.TxnOp
	)
	owner, total := benchOwner(i), mix.total()
	for ctx.Err() == nil {
		pick := rng.IntN(total)
		t0 := time.Now()
		var err error
		n := int64(0)
		switch {
		case pick < mix.alloc || (pick < mix.alloc+mix.release && len(held) == 0):
			var as []api.Allocation
			if f.count == 1 {
				var a api.Allocation
				a, _, err = c.Allocate(ctx, f.pool, "", owner, client.Options{})
				as = []api.Allocation{a}
			} else {
				as, _, err = c.AllocateCount(ctx, f.pool, owner, f.count, client.Options{})
			}
			if err == nil {
				for _, a := range as {
					held = append(held, a.Value)
				}
				n = int64(len(as))
			}
		case pick < mix.alloc+mix.release:
			// Free as many values as an allocation takes: with --count, in one transaction.
			k := min(f.count, len(held))
			if k == 1 {
				j := rng.IntN(len(held))
				held[j], held[len(held)-1] = held[len(held)-1], held[j]
			}
			ops = ops[:0] // the previous transaction's, which the client does not keep
			for _, v := range held[len(held)-k:] {
				ops = append(ops, api.TxnOp{Op: "release", Pool: f.pool, Value: v, Owner: owner})
			}
			held = held[:len(held)-k]
			if k == 1 {
				_, err = c.Release(ctx, f.pool, ops[0].Value, owner, client.Options{})
			} else {
				_, err = c.Txn(ctx, ops, client.Options{})
			}
		case pick >= mix.alloc+mix.release+mix.get:
			err = c.Health(ctx)
		case len(held) > 0:
			_, _, err = c.Get(ctx, f.pool, held[rng.IntN(len(held))], client.Options{})
		default:
			_, err = c.Pool(ctx, f.pool, client.Options{})
		}
		if ctx.Err() != nil {
			break
		}
		st.record(i, t0, err, n)
	}
	return held
}

// benchService is the Service a service-create writes: NodePort, two
// ports, dual-stack when the cluster is (PreferDualStack).
func benchService(i, n int) types.Service {
	return types.Service{Namespace: "rangealloc-bench", Name: fmt.Sprintf("c%d-s%d", i, n), Type: "NodePort", IPFamilyPolicy: "PreferDualStack",
		Ports: []types.ServicePort{{Name: "http", Port: 80}, {Name: "https", Port: 443}}}
}

// benchServices creates and deletes Services until ctx ends, and returns
// the names of those it still holds. Values/s counts the values created
// Services hold.
func benchServices(ctx context.Context, c *client.Client, mix mixWeights, i int, rng *rand.Rand, st *benchStats) []string {
	var held []string
	for n := 0; ctx.Err() == nil; n++ {
		t0 := time.Now()
		var err error
		values := int64(0)
		if rng.IntN(mix.total()) < mix.svcCreate || len(held) == 0 {
			var svc types.Service
			svc, _, err = c.PutService(ctx, benchService(i, n), client.ServiceOptions{})
			if err == nil {
				held = append(held, svc.Name)
				values = int64(len(svc.ClusterIPs) + len(svc.Ports))
			}
		} else {
			j := rng.IntN(len(held))
			name := held[j]
			held[j] = held[len(held)-1]
			held = held[:len(held)-1]
			_, err = c.DeleteService(ctx, "rangealloc-bench", name, client.ServiceOptions{})
		}
		if ctx.Err() != nil {
			break
		}
		st.record(i, t0, err, values)
	}
	return held
}

// cleanupServices deletes the Services a client still holds, off the clock.
func cleanupServices(ctx context.Context, c *client.Client, names []string) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, name := range names {
		if _, err := c.DeleteService(ctx, "rangealloc-bench", name, client.ServiceOptions{}); err != nil {
			return
		}
	}
}

// progress prints a line a second to stderr until done closes.
func progress(cmd *cobra.Command, start time.Time, st *benchStats, done <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last int64
	for {
		select {
		case <-done:
			fmt.Fprintln(cmd.ErrOrStderr())
			return
		case <-tick.C:
			o := st.ops.Load()
			fmt.Fprintf(cmd.ErrOrStderr(), "\r%5.0fs  %8d ops  %8d ops/s  %6d errors", time.Since(start).Seconds(), o, o-last, st.errs.Load())
			last = o
		}
	}
}

// report prints the totals and latency percentiles.
func report(cmd *cobra.Command, g *globals, f *benchFlags, nodes int, elapsed time.Duration, cpu cpuUse, st *benchStats) error {
	var all []time.Duration
	for _, l := range st.lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond)
	}
	secs := elapsed.Seconds()
	res := benchResult{Ops: st.ops.Load(), Values: st.values.Load(), Errors: st.errs.Load(), Seconds: secs,
		OpsPerSec: float64(st.ops.Load()) / secs, ValPerSec: float64(st.values.Load()) / secs,
		P50ms: pct(0.50), P90ms: pct(0.90), P99ms: pct(0.99), Nodes: nodes, Clients: f.clients, Mix: f.mix, Count: f.count,
		BenchCPUPerOpUs: float64(cpu.BenchPerOp) / float64(time.Microsecond)}
	if cpu.known {
		busy, perOp := 100*cpu.Busy, float64(cpu.PerOp)/float64(time.Microsecond)
		res.CPUBusyPercent, res.CPUPerOpUs = &busy, &perOp
	}
	busy, perOp, benchPerOp := cpu.columns()
	if e, ok := st.firstErr.Load().(string); ok {
		fmt.Fprintf(cmd.ErrOrStderr(), "first error: %s\n", e)
	}
	return g.print(cmd.OutOrStdout(), res, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "NODES\tCLIENTS\tOPS\tOPS/S\tVALUES/S\tP50\tP90\tP99\tERRORS\tCPU\tCPU/OP\tBENCH/OP")
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.0f\t%.0f\t%.2fms\t%.2fms\t%.2fms\t%d\t%s\t%s\t%s\n", res.Nodes, res.Clients, res.Ops, res.OpsPerSec,
			res.ValPerSec, res.P50ms, res.P90ms, res.P99ms, res.Errors, busy, perOp, benchPerOp)
	})
}
