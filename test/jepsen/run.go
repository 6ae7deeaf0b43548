package jepsen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/test/checker"
)

// Options configure one run.
type Options struct {
	// Seed fixes the workload's choices and the nemesis' schedule.
	Seed uint64
	// Duration is the least the schedule's holds and rests add up to; a
	// run always includes every fault of Faults once.
	Duration time.Duration
	// Faults are the kinds of fault the nemesis draws from.
	Faults []Fault
	// Clients is the number of concurrent clients that pick a node per
	// operation; Readers the number of read-only clients bound to each node.
	Clients, Readers int
	// OpTimeout bounds one attempt of a write by a patient client,
	// ImpatientTimeout by an impatient one, ReadTimeout one of a read.
	OpTimeout, ImpatientTimeout, ReadTimeout time.Duration
	// CheckTimeout bounds porcupine's search.
	CheckTimeout time.Duration
	// Binary is the rangealloc binary the servers run.
	Binary string
	// Artifacts is where the history, the nemesis log, the servers' logs
	// and porcupine's visualisation go.
	Artifacts string
	// Insecure runs the servers the old way, with plain HTTP and Raft,
	// --insecure and no tokens, instead of with TLS and tokens
	// (security.go).
	Insecure bool
	// Services runs the Service workload (services.go): the Clients
	// create, update and delete Services, there are no Readers and no
	// bursts of reads, and the end state is judged by the Service checks
	// instead of the allocation checkers.
	Services bool
	// LogStore is the servers' --log-store (bolt or wal); empty leaves
	// the server's default.
	LogStore string
}

// Result sums up a run.
type Result struct {
	Seed     uint64
	Security string // how the run was secured (Security.String)
	Elapsed  time.Duration
	Counts   map[string]int // attempts by kind and outcome
	Faults   int            // faults carried out
	Kinds    []Fault        // the kinds of fault the nemesis drew from
	Runs     map[Fault]int  // faults carried out, by kind
	Damages  []Damage       // what each storage fault did, and what became of the node
	Joins    []JoinAttempt  // what each mistaken join was answered
	Stalls   []Stall        // each disk stall, and how soon writes resumed
	Evidence Evidence
	// Services sums up the Service writes of a Service run.
	Services string
	Verdicts []string // one line per check, "name: ok" or "name: FAIL ..."
	Problems []string // every failed check's problems; empty when the run passed
}

func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s, %d attempts (%d ok, %d fail, %d unknown, %d retries; %d allocate, %d release, %d get, %d list), %d faults\n",
		r.Seed, r.Elapsed.Round(100*time.Millisecond), r.Counts["ok"]+r.Counts["fail"]+r.Counts["unknown"],
		r.Counts["ok"], r.Counts["fail"], r.Counts["unknown"], r.Counts["retry"],
		r.Counts["allocate"], r.Counts["release"], r.Counts["get"], r.Counts["list"], r.Faults)
	var runs []string
	for _, f := range AllFaults {
		if r.Runs[f] > 0 || slices.Contains(r.Kinds, f) {
			runs = append(runs, fmt.Sprintf("%s %d", f, r.Runs[f]))
		}
	}
	fmt.Fprintf(&b, "faults run: %s\n", strings.Join(runs, ", "))
	fmt.Fprintf(&b, "%s\n", r.Security)
	for _, d := range r.Damages {
		fmt.Fprintf(&b, "  %s of %s %s at %.3fs: %s; %s: %s\n", d.Fault, d.Role, d.Node, float64(d.At)/1e9, d.What, d.Verdict, d.Why)
		if d.Runbook != "" || d.RunbookErr != nil {
			fmt.Fprintf(&b, "    runbook: %s", d.Runbook)
			if d.RunbookErr != nil {
				fmt.Fprintf(&b, ": FAILED: %v", d.RunbookErr)
			}
			b.WriteString("\n")
		}
	}
	for _, s := range r.Stalls {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	for _, j := range r.Joins {
		fmt.Fprintf(&b, "  mistaken-join via %s at %.3fs: answered %s; members %s -> %s\n", j.Via, float64(j.At)/1e9,
			j.answer(), memberList(j.Before), memberList(j.After))
		if j.Cleanup != "" {
			fmt.Fprintf(&b, "    %s\n", j.Cleanup)
		}
	}
	if r.Services != "" {
		fmt.Fprintf(&b, "service writes: %s\n", r.Services)
	}
	fmt.Fprintf(&b, "evidence: %s\n", r.Evidence)
	for _, v := range r.Verdicts {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	return b.String()
}

// Run builds the network, starts the cluster, runs the workload under the
// nemesis, heals, and checks the history. Everything it creates is removed
// by t.Cleanup, or by the signal handler on SIGINT/SIGTERM. When network
// namespaces cannot be created it returns an error wrapping ErrNoNetns
// before starting anything.
func Run(t testing.TB, o Options) (Result, error) {
	res := Result{Seed: o.Seed}
	pools := DefaultPools()
	if o.Services {
		pools = ServicePools()
	}
	c, err := setUp(t, o, pools)
	if err != nil {
		return res, err
	}
	res.Security = c.Sec.String()
	nlog, err := os.Create(filepath.Join(o.Artifacts, "nemesis.log"))
	if err != nil {
		return res, err
	}
	defer nlog.Close()
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	nem := &Nemesis{C: c, Now: now, Out: nlog}
	plan := Plan(o.Seed, o.Faults, o.Duration)
	for i, s := range plan {
		nem.Logf("plan %d: %s", i+1, s)
	}
	if err := c.Start(); err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = c.WaitPools(ctx, pools)
	cancel()
	if err != nil {
		return res, fmt.Errorf("cluster did not come up: %w (logs in %s)", err, o.Artifacts)
	}
	nem.Logf("cluster up")
	if o.Services {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		sn, err := c.EnsureServiceNetwork(ctx, pools)
		cancel()
		if err != nil {
			return res, err
		}
		nem.Logf("%s", sn)
	}

	history, nemErr := runUnderNemesis(o, c, nem, plan, pools, now)
	res.Problems = append(res.Problems, errString(nemErr)...)
	res.Elapsed = time.Since(start)
	res.Counts = Counts(history)
	if o.Services {
		res.Services = ServiceSummary(history)
	}
	res.Faults, res.Kinds, res.Runs = len(nem.Windows()), o.Faults, FaultRuns(nem.Windows())
	res.Damages, res.Joins, res.Stalls = nem.Damages(), nem.Joins(), nem.Stalls()
	if err := writeHistory(filepath.Join(o.Artifacts, "history.jsonl"), history); err != nil {
		return res, err
	}
	checkRun(&res, o, c, nem, pools, history)
	nem.Logf("verdict: %d problems", len(res.Problems))
	summary := res.String() + strings.Join(res.Problems, "\n") + "\n"
	return res, os.WriteFile(filepath.Join(o.Artifacts, "summary.txt"), []byte(summary), 0o644)
}

// setUp sweeps what dead runs left, prepares the artifacts directory, and
// builds the network and the (not yet started) cluster, registering their
// teardown.
func setUp(t testing.TB, o Options, pools PoolSet) (*Cluster, error) {
	for _, r := range Sweep() {
		t.Logf("removed stale %s", r)
	}
	if err := os.MkdirAll(o.Artifacts, 0o755); err != nil {
		return nil, err
	}
	lab, err := NewLab(3, o.Seed)
	if err != nil {
		return nil, err
	}
	dataDir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", tempPrefix, os.Getpid()))
	if err != nil {
		lab.Close()
		return nil, err
	}
	closeLab := func() {
		if err := lab.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "jepsen: cleanup: %v\n", err)
		}
		_ = os.RemoveAll(dataDir)
	}
	sec, err := NewSecurity(filepath.Join(dataDir, "tls"), o.Insecure)
	if err != nil {
		closeLab()
		return nil, fmt.Errorf("the run's CA and tokens: %w", err)
	}
	tuning := DefaultTuning()
	tuning.LogStore, tuning.WALSegmentSize = o.LogStore, "64KiB"
	c, err := NewCluster(lab, o.Binary, dataDir, o.Artifacts, tuning, pools, sec, slices.ContainsFunc(o.Faults, Fault.Disk))
	if err != nil {
		closeLab()
		return nil, err
	}
	t.Cleanup(onExit(func() {
		_ = c.Close()
		if err := c.CloseDisks(); err != nil {
			fmt.Fprintf(os.Stderr, "jepsen: cleanup: %v\n", err)
		}
		closeLab()
	}))
	t.Logf("seed %d: nodes %v in namespaces %v, clients from %s; artifacts in %s; %s", o.Seed, lab.IPs, lab.NS, lab.HostIP, o.Artifacts, sec)
	for _, s := range c.Servers { // a reused artifacts dir: start the logs afresh
		_ = os.Remove(s.LogPath)
	}
	_ = os.Remove(filepath.Join(o.Artifacts, "n4.log")) // the fourth node's, of mistaken-join
	_ = os.Remove(filepath.Join(o.Artifacts, "history.html"))
	return c, nil
}

// burstSize is the number of reads sent to a paused leader before it
// resumes.
const burstSize = 16

// runUnderNemesis runs the clients while the nemesis carries out its plan,
// then a quiet, healed second more, and returns the history.
func runUnderNemesis(o Options, c *Cluster, nem *Nemesis, plan []Step, pools PoolSet, now func() int64) (checker.History, error) {
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.API)
	}
	w := &Workload{Addrs: addrs, Sec: c.Sec, Pools: pools, Clients: o.Clients, Readers: o.Readers, Seed: o.Seed, OpTimeout: o.OpTimeout,
		ImpatientTimeout: o.ImpatientTimeout, ReadTimeout: o.ReadTimeout, Now: now, Services: o.Services}
	if o.Services {
		w.Readers = 0 // the pools' readers would see the Services' values, which the allocation checkers cannot explain
	} else {
		burstRNG := rand.New(rand.NewPCG(o.Seed, 0xb0))
		nem.BeforeResume = func(node int) { w.Burst(node, burstSize, burstRNG) }
	}
	mctx, stopMonitor := context.WithCancel(context.Background())
	wctx, stopClients := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var history checker.History
	wg.Add(2)
	go func() { defer wg.Done(); nem.Monitor(mctx) }()
	go func() { defer wg.Done(); history = w.Run(wctx) }()
	err := nem.Run(context.Background(), plan)
	sleep(context.Background(), 2*time.Second)
	stopClients()
	stopMonitor()
	wg.Wait()
	nem.Logf("clients stopped")
	return history, err
}

// checkRun converges the replicas, reads the final state and runs every
// check, filling in res.Verdicts and res.Problems.
func checkRun(res *Result, o Options, c *Cluster, nem *Nemesis, pools PoolSet, history checker.History) {
	verdict := func(name string, problems []string) {
		if len(problems) == 0 {
			res.Verdicts = append(res.Verdicts, name+": ok")
			return
		}
		res.Verdicts = append(res.Verdicts, fmt.Sprintf("%s: FAIL (%d problems)", name, len(problems)))
		for _, p := range problems {
			res.Problems = append(res.Problems, name+": "+p)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var final map[string]map[string]string
	var services []checker.Report
	var l int
	err := c.Converge(ctx)
	if err == nil {
		l, _, err = c.WaitLeader(ctx)
		if err == nil {
			final, err = c.Final(ctx, l, pools)
		}
	}
	verdict("replicas converge", errString(err))
	if err == nil && o.Services {
		var serr error
		services, serr = checkServices(ctx, c, l, pools, history)
		verdict("final Services read through every node", errString(serr))
	}
	if err == nil {
		verdict("identical replicas", c.CompareReplicas(ctx, pools))
	}
	var crashes []string
	for _, s := range c.Servers {
		crashes = append(crashes, s.Crashes()...)
	}
	verdict("no server crashed", crashes)
	if r := CheckAuth(history); !c.Sec.Insecure {
		verdict(fmt.Sprintf("%s (%d checked)", r.Name, r.Checked), r.Problems)
	}

	// The checker package's checks, on the history with every list
	// expanded to gets, so that porcupine judges lists too; a Service
	// run's by the Service checks, on the state read through every node.
	viz := filepath.Join(o.Artifacts, "history.html")
	reports := services
	if !o.Services {
		reports = checker.CheckAll(ExpandLists(history, pools), final, o.CheckTimeout, viz)
	}
	for _, r := range reports {
		verdict(fmt.Sprintf("%s (%d checked)", r.Name, r.Checked), r.Problems)
		if r.Name == "linearizable" && !r.OK {
			res.Verdicts[len(res.Verdicts)-1] += "; visualisation in " + viz
		}
	}
	var logs []string
	for _, s := range c.Servers {
		b, _ := os.ReadFile(s.LogPath)
		logs = append(logs, string(b))
	}
	res.Evidence = Gather(history, nem.Windows(), logs)
	verdict("not vacuous", res.Evidence.Check().Problems)
	storage := slices.ContainsFunc(o.Faults, Fault.Storage)
	if loss, handled := CheckStorage(res.Damages); storage || handled.Checked > 0 {
		for _, r := range []checker.Report{loss, handled} {
			verdict(fmt.Sprintf("%s (%d checked)", r.Name, r.Checked), r.Problems)
		}
	}
	if r := CheckStalls(history, res.Stalls); slices.Contains(o.Faults, DiskStall) || r.Checked > 0 {
		verdict(fmt.Sprintf("%s (%d checked)", r.Name, r.Checked), r.Problems)
	}
	if r := CheckJoins(res.Joins); slices.Contains(o.Faults, MistakenJoin) || r.Checked > 0 {
		verdict(fmt.Sprintf("%s (%d checked)", r.Name, r.Checked), r.Problems)
	}
}

func writeHistory(path string, h checker.History) error {
	sort.SliceStable(h, func(i, j int) bool { return h[i].Call < h[j].Call })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := h.WriteJSONL(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func errString(err error) []string {
	if err == nil {
		return nil
	}
	return []string{err.Error()}
}
