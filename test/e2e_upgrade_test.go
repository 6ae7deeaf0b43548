package test

import (
	"archive/tar"
	"bytes"
	"context"
	binenc "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// previousRelease is the revision of the release before this one, whose
// binary TestE2ERollingUpgrade runs beside this build's. When cutting a
// release, bump it to that release's tag or commit; keep the test for
// every release, so each one is proven to upgrade from, and roll back to,
// the one before.
const previousRelease = "cfcca01"

// The two releases a member runs in TestE2ERollingUpgrade.
const (
	relOld = "old"
	relNew = "new"
)

// release is a binary a member can run.
type release struct {
	name    string // relOld or relNew
	bin     string
	version string // the release its nodes report; "" before versions
	level   int    // the highest feature level its nodes report; 0 before levels
}

// buildPrevious builds the previous release's rangealloc from the
// repository's history into dir. It skips the test when git or the
// revision is not there (a shallow clone); CI clones with history.
func buildPrevious(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("building release %s needs git: %v", previousRelease, err)
	}
	if out, err := exec.Command("git", "rev-parse", "--verify", "--quiet", previousRelease+"^{commit}").CombinedOutput(); err != nil {
		t.Skipf("revision %s of the previous release is not in this clone (a shallow clone?): %v %s", previousRelease, err, out)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	require.NoError(t, err, "git rev-parse --show-toplevel")
	start := time.Now()
	src := filepath.Join(dir, "src")
	archive := exec.Command("git", "archive", "--format=tar", previousRelease)
	archive.Dir = strings.TrimSpace(string(top)) // the whole tree, not the test directory's
	var stderr bytes.Buffer
	archive.Stderr = &stderr
	stdout, err := archive.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, archive.Start())
	require.NoError(t, untar(stdout, src), "extract release %s", previousRelease)
	require.NoError(t, archive.Wait(), "git archive %s: %s", previousRelease, stderr.String())
	bin := filepath.Join(dir, "rangealloc-"+previousRelease)
	build := exec.Command("go", "build", "-o", bin, "./cmd/rangealloc")
	build.Dir = src
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build release %s: %s", previousRelease, out)
	t.Logf("built the previous release %s in %v", previousRelease, time.Since(start).Round(time.Millisecond))
	return bin
}

// untar writes the directories, files and links of a tar stream under dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("%s: outside %s", h.Name, dir)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFrom(path, tr, os.FileMode(h.Mode).Perm())
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = os.Symlink(h.Linkname, path)
			}
		}
		if err != nil {
			return err
		}
	}
}

func writeFrom(path string, r io.Reader, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// lockedBuffer is a log that processes write while the test may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// relNode is one member across its restarts, each on the binary of one
// release. A watcher goroutine waits for each process, so an exit the test
// did not ask for (an old node that stops on what it cannot read) is
// recorded the moment it happens.
type relNode struct {
	*proc
	logs lockedBuffer

	mu sync.Mutex
	// mu guards the following
	release    string        // the release the current process runs
	exited     chan struct{} // closed when the current process has ended
	exitErr    error         // the current process's exit, once exited is closed
	stopping   bool          // the test sent SIGTERM
	snapsAtRun []string      // the snapshots on disk when the current process started
	unexpected []string      // exits the test did not ask for
}

// newRelNodes makes n members that share a --peers list; none runs yet.
func newRelNodes(t *testing.T, n int, extra ...string) []*relNode {
	dir := t.TempDir()
	var rs []*relNode
	var peers []string
	for i := range n {
		p := &proc{id: fmt.Sprintf("n%d", i+1), http: freePort(t), raft: freePort(t), dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1))}
		rs = append(rs, &relNode{proc: p})
		peers = append(peers, fmt.Sprintf("%s=%s=%s", p.id, p.raft, p.http))
	}
	for _, r := range rs {
		r.args = append(append([]string(nil), extra...), "--peers", strings.Join(peers, ","))
		r.cleanup(t)
	}
	return rs
}

// cleanup kills the node's process at the end of the test, and prints its
// log when the test failed.
func (r *relNode) cleanup(t *testing.T) {
	t.Cleanup(func() {
		r.mu.Lock()
		cmd, exited := r.cmd, r.exited
		r.stopping = true
		r.mu.Unlock()
		if cmd != nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("log of %s:\n%s", r.id, r.logs.String())
		}
	})
}

// run starts the node on rl's binary with its data directory and flags.
func (r *relNode) run(t *testing.T, rl release) {
	t.Helper()
	rel := rl.name
	fmt.Fprintf(&r.logs, "==== %s starts the %s release's binary at %s\n", r.id, rel, time.Now().Format(time.TimeOnly))
	cmd := exec.Command(rl.bin, append([]string{"server", "--id", r.id, "--data-dir", r.dir, "--http-addr", r.http,
		"--raft-addr", r.raft, "--log-level", "warn"}, r.args...)...)
	cmd.Stderr = &r.logs
	snaps := r.snapshots(t)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	r.mu.Lock()
	r.cmd, r.release, r.exited, r.exitErr, r.stopping, r.snapsAtRun = cmd, rel, exited, nil, false, snaps
	r.mu.Unlock()
	go func() {
		err := cmd.Wait()
		r.mu.Lock()
		r.exitErr = err
		if !r.stopping {
			r.unexpected = append(r.unexpected, fmt.Sprintf("%s (%s release) exited on its own at %s: %v",
				r.id, rel, time.Now().Format(time.TimeOnly), err))
		}
		r.mu.Unlock()
		close(exited)
	}()
}

// stop sends SIGTERM and requires a clean exit.
func (r *relNode) stop(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	r.stopping = true
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s still runs 60 s after SIGTERM", r.id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NoError(t, r.exitErr, "%s exits cleanly on SIGTERM", r.id)
}

func (r *relNode) snapshots(t *testing.T) []string {
	snaps, err := filepath.Glob(filepath.Join(r.dir, "snapshots", "*", "state.bin"))
	require.NoError(t, err)
	return snaps
}

// waitNewSnapshot waits until the node has a snapshot on disk that it
// wrote, or received from the leader, since its current process started.
func (r *relNode) waitNewSnapshot(t *testing.T, step string) {
	t.Helper()
	r.mu.Lock()
	before := r.snapsAtRun
	r.mu.Unlock()
	require.Eventually(t, func() bool {
		for _, s := range r.snapshots(t) {
			if !slices.Contains(before, s) {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "%s: %s takes or receives a snapshot", step, r.id)
}

func (r *relNode) rel() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.release
}

// requireAllRunning fails the step when any member's process ended without
// being asked to.
func requireAllRunning(t *testing.T, step string, rs []*relNode) {
	t.Helper()
	var gone []string
	for _, r := range rs {
		r.mu.Lock()
		gone = append(gone, r.unexpected...)
		r.mu.Unlock()
	}
	require.Empty(t, gone, "%s: no member may stop", step)
}

func relProcs(rs []*relNode) []*proc {
	var ps []*proc
	for _, r := range rs {
		ps = append(ps, r.proc)
	}
	return ps
}

func relByID(rs []*relNode, id string) *relNode {
	for _, r := range rs {
		if r.id == id {
			return r
		}
	}
	return nil
}

// diskScan is what a stopped node holds on disk, as read by this build.
type diskScan struct {
	commands, requests int      // log entries that carry requests, and their requests
	aboveLevel1        []string // entries that a node of level 1 cannot read
	formats            []uint32 // the format version of each snapshot
}

// scanDisk reads a stopped node's Raft log and snapshots.
func scanDisk(t *testing.T, dir string) diskScan {
	t.Helper()
	var s diskScan
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"),
		BoltOptions: &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second}})
	require.NoError(t, err, "open %s/raft.db", dir)
	defer store.Close()
	first, err := store.FirstIndex()
	require.NoError(t, err)
	last, err := store.LastIndex()
	require.NoError(t, err)
	for i := first; i <= last && first > 0; i++ {
		var l raft.Log
		require.NoError(t, store.GetLog(i, &l), "log entry %d of %s", i, dir)
		if l.Type != raft.LogCommand {
			continue
		}
		s.commands++
		reqs, err := fsm.DecodeEntry(l.Data)
		if err != nil {
			s.aboveLevel1 = append(s.aboveLevel1, fmt.Sprintf("entry %d: %v", i, err))
			continue
		}
		for _, r := range reqs {
			s.requests++
			if fsm.KindLevel(r.Kind) != 1 {
				s.aboveLevel1 = append(s.aboveLevel1, fmt.Sprintf("entry %d: %s of feature level %d", i, r.Kind, fsm.KindLevel(r.Kind)))
			}
		}
	}
	s.formats, err = snapshotFormats(dir)
	require.NoError(t, err)
	return s
}

// snapshotFormats returns the format version of each complete snapshot in
// a node's data directory (one being written is in a ".tmp" directory; one
// removed meanwhile is left out).
func snapshotFormats(dir string) ([]uint32, error) {
	snaps, err := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	if err != nil {
		return nil, err
	}
	var formats []uint32
	for _, f := range snaps {
		if strings.HasSuffix(filepath.Dir(f), ".tmp") {
			continue
		}
		b, err := os.ReadFile(f)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return nil, err
		case len(b) < 12 || string(b[:8]) != "\x89RAS\r\n\x1a\n":
			return nil, fmt.Errorf("%s: no snapshot header", f)
		}
		formats = append(formats, binenc.BigEndian.Uint32(b[8:12]))
	}
	return formats, nil
}

// requireReadableByOld fails unless a node of the previous release could
// have read everything on its disk: requests of level 1 only, snapshots of
// format 3 at most. The scan must have seen requests and a snapshot, or it
// proves nothing.
func requireReadableByOld(t *testing.T, step string, s diskScan) {
	t.Helper()
	require.Empty(t, s.aboveLevel1, "%s: the log holds entries the previous release cannot read", step)
	require.Positive(t, s.requests, "%s: the scan read requests", step)
	require.NotEmpty(t, s.formats, "%s: the scan read a snapshot", step)
	for _, f := range s.formats {
		require.LessOrEqual(t, f, uint32(3), "%s: a snapshot of format %d; the previous release reads up to 3", step, f)
	}
}

// poolValue names a value of a pool.
type poolValue struct{ pool, value string }

// rollingLoad allocates and releases through every member while the test
// changes binaries, and creates, updates and deletes Services. Each write
// carries an Idempotency-Key and is retried, through the next member,
// until it has a definite answer, so every acknowledged write is known.
// Every owner is used for one allocation, every Service name for one
// Service.
type rollingLoad struct {
	nodes []*relNode
	stop  chan struct{}
	wg    sync.WaitGroup
	acks  atomic.Int64

	mu sync.Mutex
	// mu guards the following
	allocated map[string]poolValue     // owner → its acknowledged allocation
	released  map[string]bool          // owners whose release was acknowledged
	services  map[string]types.Service // name → its last acknowledged state
	deleted   map[string]bool          // Services whose delete was acknowledged
	updates   int                      // Service updates acknowledged
	problems  []string                 // answers no correct cluster gives
}

func startRollingLoad(t *testing.T, nodes []*relNode, workers int) *rollingLoad {
	l := &rollingLoad{nodes: nodes, allocated: map[string]poolValue{}, released: map[string]bool{},
		services: map[string]types.Service{}, deleted: map[string]bool{}}
	seed := uint64(time.Now().UnixNano())
	t.Logf("load seed %d", seed)
	l.resume(workers, seed)
	t.Cleanup(l.halt)
	return l
}

// resume starts the workers, and one more for Services; halt stops them
// after their current write.
func (l *rollingLoad) resume(workers int, seed uint64) {
	l.stop = make(chan struct{})
	for g := range workers + 1 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			if g == workers {
				l.serviceWork(g, rng)
			} else {
				l.work(g, rng)
			}
		}()
	}
}

func (l *rollingLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *rollingLoad) work(g int, rng *rand.Rand) {
	var mine []string // owners this worker holds a value for
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if len(mine) > 0 && rng.IntN(10) < 3 {
			k := rng.IntN(len(mine))
			owner := mine[k]
			mine = append(mine[:k], mine[k+1:]...)
			l.release(g, owner)
			continue
		}
		owner := fmt.Sprintf("up/w%d-%d", g, i)
		pool := "clusterip-ipv4"
		if rng.IntN(4) == 0 {
			pool = "nodeport"
		}
		if l.allocate(g, pool, owner) {
			mine = append(mine, owner)
		}
	}
}

func (l *rollingLoad) allocate(g int, pool, owner string) bool {
	var value string
	err := l.write(g, func(ctx context.Context, c *client.Client) error {
		a, _, err := c.Allocate(ctx, pool, "", owner, client.Options{IdempotencyKey: "alloc-" + owner})
		value = a.Value
		return err
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problems = append(l.problems, fmt.Sprintf("allocate in %s for %s: %v", pool, owner, err))
		return false
	}
	l.allocated[owner] = poolValue{pool, value}
	l.acks.Add(1)
	return true
}

func (l *rollingLoad) release(g int, owner string) {
	l.mu.Lock()
	pv := l.allocated[owner]
	l.mu.Unlock()
	err := l.write(g, func(ctx context.Context, c *client.Client) error {
		_, err := c.Release(ctx, pv.pool, pv.value, owner, client.Options{IdempotencyKey: "release-" + owner})
		return err
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil { // NotAllocated or OwnerMismatch here would be a lost write
		l.problems = append(l.problems, fmt.Sprintf("release %s %s of %s, an acknowledged allocation: %v", pv.pool, pv.value, owner, err))
		return
	}
	l.released[owner] = true
	l.acks.Add(1)
}

// serviceWork creates Services (type ClusterIP, or NodePort one in
// three), updates them and deletes them. An update sends what the last
// answer gave with clusterIPs left out and the singular clusterIP kept, as
// a Kubernetes client that knows only clusterIP does: a proposer folds it
// into clusterIPs while the cluster is below the level of put-service-v2,
// and sends put-service-v2 from that level on. No node of the previous
// release may see that kind: it would stop on it, and its disk would hold
// an entry above level 1 (requireReadableByOld).
func (l *rollingLoad) serviceWork(g int, rng *rand.Rand) {
	var mine []string // this worker's Services not deleted
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		switch r := rng.IntN(10); {
		case len(mine) > 0 && r < 2:
			k := rng.IntN(len(mine))
			name := mine[k]
			mine = append(mine[:k], mine[k+1:]...)
			l.deleteService(g, name)
		case len(mine) > 0 && r < 6:
			l.updateService(g, mine[rng.IntN(len(mine))], i)
		default:
			name := fmt.Sprintf("svc-w%d-%d", g, i)
			typ := "ClusterIP"
			if rng.IntN(3) == 0 {
				typ = "NodePort"
			}
			svc := types.Service{Namespace: "up", Name: name, Type: typ, Ports: []types.ServicePort{{Name: "http", Protocol: "TCP", Port: 80}}}
			if l.putService(g, svc, "create-"+name, nil) {
				mine = append(mine, name)
			}
		}
	}
}

// updateService changes the port of a Service, giving only the singular
// clusterIP, and requires its values kept.
func (l *rollingLoad) updateService(g int, name string, i int) {
	l.mu.Lock()
	prev := l.services[name]
	l.mu.Unlock()
	svc := prev
	svc.Ports = slices.Clone(prev.Ports)
	svc.Ports[0].Port = int32(81 + i%1000)
	svc.ClusterIP, svc.ClusterIPs, svc.Revision = prev.ClusterIPs[0], nil, 0
	l.putService(g, svc, fmt.Sprintf("update-%s-%d", name, i), &prev)
}

// putService writes svc and records the answer. prev, for an update, is
// the last acknowledged state, whose values the answer must keep.
func (l *rollingLoad) putService(g int, svc types.Service, key string, prev *types.Service) bool {
	var out types.Service
	err := l.write(g, func(ctx context.Context, c *client.Client) error {
		var err error
		out, _, err = c.PutService(ctx, svc, client.ServiceOptions{Options: client.Options{IdempotencyKey: key}})
		return err
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problems = append(l.problems, fmt.Sprintf("put Service %s (%s): %v", svc.Name, key, err))
		return false
	}
	if prev != nil && (!slices.Equal(out.ClusterIPs, prev.ClusterIPs) || out.Ports[0].NodePort != prev.Ports[0].NodePort) {
		l.problems = append(l.problems, fmt.Sprintf("update of Service %s (%s) changed its values: %v %d, then %v %d",
			svc.Name, key, prev.ClusterIPs, prev.Ports[0].NodePort, out.ClusterIPs, out.Ports[0].NodePort))
	}
	l.services[svc.Name] = out
	if prev != nil {
		l.updates++
	}
	l.acks.Add(1)
	return true
}

func (l *rollingLoad) deleteService(g int, name string) {
	err := l.write(g, func(ctx context.Context, c *client.Client) error {
		_, err := c.DeleteService(ctx, "up", name, client.ServiceOptions{Options: client.Options{IdempotencyKey: "delete-" + name}})
		return err
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problems = append(l.problems, fmt.Sprintf("delete Service %s: %v", name, err))
		return
	}
	l.deleted[name] = true
	l.acks.Add(1)
}

// write sends a request through the members in turn until one gives a
// definite answer: a success or a 4xx refusal. Anything else (no answer,
// a 5xx, 503 NoLeader) may or may not have been applied; the retry's
// Idempotency-Key makes it count once.
func (l *rollingLoad) write(g int, call func(context.Context, *client.Client) error) error {
	deadline := time.Now().Add(60 * time.Second)
	for attempt := 0; ; attempt++ {
		n := l.nodes[(g+attempt)%len(l.nodes)]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := call(ctx, n.client())
		cancel()
		var ce *client.Error
		if err == nil || (errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no definite answer in 60 s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitProgress waits until n more writes were acknowledged.
func (l *rollingLoad) waitProgress(t *testing.T, step string, n int64) {
	t.Helper()
	from := l.acks.Load()
	if !assert.Eventually(t, func() bool { return l.acks.Load() >= from+n }, 60*time.Second, 20*time.Millisecond) {
		t.Fatalf("%s: %d more writes acknowledged; %d so far", step, n, l.acks.Load()-from)
	}
}

// check reads every allocation of the load's pools linearizably through c
// and requires each acknowledged allocation not released to be held by its
// owner, each acknowledged release not to be, and no value to be held twice.
func (l *rollingLoad) check(t *testing.T, c *client.Client) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.problems); n > 0 {
		t.Fatalf("%d writes of the load had no definite, expected answer; the first %d:\n%s",
			n, min(n, 10), strings.Join(l.problems[:min(n, 10)], "\n"))
	}
	holder := map[poolValue]string{}
	owned := map[string]poolValue{}
	for _, pool := range []string{"clusterip-ipv4", "nodeport"} {
		all, err := c.ListAll(ctxE(t), pool, "", client.Options{})
		require.NoError(t, err, "list %s", pool)
		for _, a := range all {
			pv := poolValue{pool, a.Value}
			if prev, ok := holder[pv]; ok {
				t.Errorf("%s %s is listed twice: %s and %s", pool, a.Value, prev, a.Owner)
			}
			holder[pv] = a.Owner
			owned[a.Owner] = pv
		}
	}
	var lost, kept []string
	live := map[poolValue]string{}
	for owner, pv := range l.allocated {
		if l.released[owner] {
			if _, ok := owned[owner]; ok {
				kept = append(kept, fmt.Sprintf("%s %s %s", pv.pool, pv.value, owner))
			}
			continue
		}
		if prev, ok := live[pv]; ok {
			t.Errorf("%s %s was acknowledged to both %s and %s, neither released: a duplicate allocation", pv.pool, pv.value, prev, owner)
		}
		live[pv] = owner
		if holder[pv] != owner {
			lost = append(lost, fmt.Sprintf("%s %s of %s (held by %q)", pv.pool, pv.value, owner, holder[pv]))
		}
	}
	sort.Strings(lost)
	sort.Strings(kept)
	require.Empty(t, lost, "acknowledged allocations lost")
	require.Empty(t, kept, "acknowledged releases undone")
	t.Logf("load: %d acknowledged allocations, %d acknowledged releases, %d values held", len(l.allocated), len(l.released), len(live))

	// Services: each one not deleted is as its last answer said, and its
	// values are held once; each deleted one is gone.
	list, err := c.ListServices(ctxE(t), "up", client.Options{})
	require.NoError(t, err, "list Services")
	got := map[string]types.Service{}
	for _, s := range list.Services {
		got[s.Name] = s
	}
	for name, want := range l.services {
		s, ok := got[name]
		if l.deleted[name] {
			assert.False(t, ok, "Service %s, whose delete was acknowledged, is listed", name)
			continue
		}
		if !assert.True(t, ok, "Service %s, acknowledged and not deleted, is listed", name) {
			continue
		}
		assert.Equal(t, want.ClusterIPs, s.ClusterIPs, "Service %s's clusterIPs", name)
		assert.Equal(t, want.Ports, s.Ports, "Service %s's ports", name)
		for _, ip := range s.ClusterIPs {
			pv := poolValue{"clusterip-ipv4", ip}
			assert.Contains(t, holder, pv, "Service %s's clusterIP %s is allocated", name, ip)
			assert.NotContains(t, live, pv, "Service %s's clusterIP %s is also an allocation's", name, ip)
		}
		if np := s.Ports[0].NodePort; np != 0 {
			pv := poolValue{"nodeport", fmt.Sprint(np)}
			assert.Contains(t, holder, pv, "Service %s's node port %d is allocated", name, np)
			assert.NotContains(t, live, pv, "Service %s's node port %d is also an allocation's", name, np)
		}
	}
	assert.Len(t, got, len(l.services)-len(l.deleted), "Services listed: no Service the load did not acknowledge")
	t.Logf("load: %d acknowledged Services, %d updates of them, %d deleted", len(l.services), l.updates, len(l.deleted))
}

// TestE2ERollingUpgrade upgrades a three-node cluster of the previous
// release to this one, one node at a time, under a load of allocations and
// releases, and of Service creates, updates and deletes, through every
// node (each update gives only the singular clusterIP, which from level 5
// travels as put-service-v2, a kind the previous release cannot read):
// first a follower (an old leader with a new
// follower), then the leader (a new leader with an old follower), then the
// last. With all three new, one is rolled back to the previous release and
// must run; then it is upgraded again and the upgrade finalized. At every
// step no node stops, each restarted node is ready and (under a new
// leader) shown healthy on its release, the cluster stays at feature level
// 1 and refuses a level-2 request (a member kept a non-voter), and
// finalize-upgrade is refused while an old node remains, naming it; each
// old node, once stopped, holds nothing its release cannot read. After the
// finalize, every node reports this release's level and writes snapshots of format 4,
// and a member kept a non-voter joins. No acknowledged write is lost, no
// value has two owners, and every node holds the same RangeAllocations.
func TestE2ERollingUpgrade(t *testing.T) {
	t.Parallel()
	oldRel := release{name: relOld, bin: buildPrevious(t, t.TempDir())}
	_, _, code := runBin(t, oldRel.bin, "version")
	require.NotEqual(t, 0, code, "the previous release has no version command")
	out, stderr, code := runBin(t, binary, "version", "-o", "json")
	require.Equal(t, 0, code, stderr)
	var v struct {
		Version      string
		FeatureLevel int
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Equal(t, fsm.MaxFeatureLevel, v.FeatureLevel, "rangealloc version: the highest level this binary supports")
	newRel := release{name: relNew, bin: binary, version: v.Version, level: v.FeatureLevel}

	rs := newRelNodes(t, 3, "--snapshot-threshold", "16", "--snapshot-interval", "200ms", "--trailing-logs", "4")
	for _, r := range rs {
		r.run(t, oldRel)
	}
	waitLeader(t, rs[0].proc)
	for _, r := range rs {
		waitReady(t, r.proc)
	}

	load := startRollingLoad(t, rs, 3)
	load.waitProgress(t, "all on the previous release", 50)
	mixes := map[string]bool{}

	// Step 1: a follower. The leader is old, a follower new.
	step := "step 1 (a follower upgraded)"
	leader := leaderOf(t, step, rs)
	f1 := followerOf(rs, leader, relOld)
	upgradeNode(t, step, rs, f1, newRel)
	ensureLeaderRuns(t, step, rs, relOld)
	observeMix(t, step, rs, load, mixes)
	checkStep(t, step, rs)

	// Step 2: the leader. It hands leadership over as it stops; a new
	// node then leads an old follower.
	step = "step 2 (the leader upgraded)"
	leader = leaderOf(t, step, rs)
	upgradeNode(t, step, rs, leader, newRel)
	ensureLeaderRuns(t, step, rs, relNew)
	observeMix(t, step, rs, load, mixes)
	checkStep(t, step, rs)

	// Step 3: the last old node. All run this release; the cluster stays
	// at level 1 until finalize, so a level-2 request is refused.
	step = "step 3 (the last node upgraded)"
	last := followerOf(rs, leaderOf(t, step, rs), relOld)
	require.NotNil(t, last, "%s: an old node is left", step)
	upgradeNode(t, step, rs, last, newRel)
	load.waitProgress(t, step, 50)
	checkStep(t, step, rs)
	if !assert.Eventually(t, func() bool {
		out, _, code = rangealloc(t, "http://"+rs[0].http, "cluster")
		return code == 0 && strings.Contains(out, "run rangealloc cluster finalize-upgrade")
	}, 20*time.Second, 200*time.Millisecond, "%s: rangealloc cluster says every member can go further", step) {
		t.Fatalf("%s: the last answer of rangealloc cluster:\n%s", step, out)
	}

	// Step 4: roll a follower back to the previous release. It reads what
	// the new nodes wrote and sent, and runs under load.
	step = "step 4 (a node rolled back)"
	back := followerOf(rs, leaderOf(t, step, rs), relNew)
	upgradeNode(t, step, rs, back, oldRel)
	observeMix(t, step, rs, load, mixes)
	load.waitProgress(t, step, 100)
	checkStep(t, step, rs)

	// Step 5: upgrade it again and finalize.
	step = "step 5 (the rolled-back node upgraded again)"
	upgradeNode(t, step, rs, back, newRel)
	load.waitProgress(t, step, 50)
	checkStep(t, step, rs)
	out, stderr, code = rangealloc(t, "http://"+back.http, "cluster", "finalize-upgrade")
	require.Equal(t, 0, code, "finalize-upgrade: %s", stderr)
	require.Contains(t, out, fmt.Sprintf("feature level %d", fsm.MaxFeatureLevel), "finalize-upgrade prints the cluster at this release's level")
	for _, r := range rs {
		require.Eventually(t, func() bool {
			st, err := r.client().Cluster(context.Background())
			return err == nil && st.FeatureLevel == fsm.MaxFeatureLevel
		}, 20*time.Second, 50*time.Millisecond, "after finalize: %s reports feature level %d", r.id, fsm.MaxFeatureLevel)
	}
	_, stderr, code = rangealloc(t, "http://"+rs[0].http, "cluster", "finalize-upgrade")
	require.Equal(t, 0, code, "finalize-upgrade again changes nothing: %s", stderr)
	for _, r := range rs {
		require.Eventually(t, func() bool {
			formats, err := snapshotFormats(r.dir)
			return err == nil && slices.Contains(formats, 4)
		}, 30*time.Second, 100*time.Millisecond,
			"after finalize: %s writes a snapshot of format 4", r.id)
	}

	// A level-2 feature: a member kept a non-voter.
	step = "after finalize"
	n4 := &relNode{proc: &proc{id: "n4", http: freePort(t), raft: freePort(t), dir: filepath.Join(t.TempDir(), "n4")}}
	n4.args = []string{"--join", leaderOf(t, step, rs).http, "--non-voter"}
	n4.cleanup(t)
	n4.run(t, newRel)
	waitReady(t, n4.proc)
	waitHealthy(t, step, rs, n4, newRel)
	load.waitProgress(t, step, 100) // a member that may vote would be promoted by now
	st, err := leaderOf(t, step, rs).client().Cluster(ctxE(t))
	require.NoError(t, err)
	i := slices.IndexFunc(st.Members, func(m types.ClusterMember) bool { return m.ID == n4.id })
	require.NotEqual(t, -1, i, "%s: n4 is a member: %+v", step, st.Members)
	require.False(t, st.Members[i].Voter, "%s: n4, joined with --non-voter, stays a non-voter", step)

	// The end: every acknowledged write holds, the replicas agree, and no
	// process ended on its own.
	load.halt()
	all := append(append([]*relNode(nil), rs...), n4)
	requireAllRunning(t, "the end", all)
	load.check(t, leaderOf(t, "the end", rs).client())
	for _, pool := range []string{"clusterip-ipv4", "nodeport"} {
		sameRangeAllocation(t, relProcs(all), pool)
	}
	require.True(t, mixes[relOld+" leader, "+relNew+" follower"], "an old leader led a new follower: %v", mixes)
	require.True(t, mixes[relNew+" leader, "+relOld+" follower"], "a new leader led an old follower: %v", mixes)
}

// upgradeNode stops r, scans its disk if it ran the previous release,
// starts the binary of release to on its data directory with its flags,
// and waits until it is ready and the cluster shows it healthy.
func upgradeNode(t *testing.T, step string, rs []*relNode, r *relNode, to release) {
	t.Helper()
	t.Logf("%s: %s from the %s release to the %s", step, r.id, r.rel(), to.name)
	wasOld := r.rel() == relOld
	if wasOld {
		r.waitNewSnapshot(t, step) // so that the scan below sees one of this process's
	}
	r.stop(t)
	if wasOld {
		s := scanDisk(t, r.dir)
		requireReadableByOld(t, fmt.Sprintf("%s: %s, on the previous release until now", step, r.id), s)
		t.Logf("%s: %s held %d requests in %d log entries, snapshot formats %v", step, r.id, s.requests, s.commands, s.formats)
	}
	r.run(t, to)
	waitReady(t, r.proc)
	waitHealthy(t, step, rs, r, to)
	requireAllRunning(t, step, rs)
}

// waitHealthy waits until the leader, asked with rangealloc cluster, shows
// r healthy and running release rl: until then it may still show what it
// heard from r's previous process. A leader of the previous release
// reports no health; /readyz is then the only check.
func waitHealthy(t *testing.T, step string, rs []*relNode, r *relNode, rl release) {
	t.Helper()
	leader := leaderOf(t, step, rs)
	if leader.rel() == relOld {
		return
	}
	var out string
	healthy := assert.Eventually(t, func() bool {
		var code int
		out, _, code = rangealloc(t, "http://"+leader.http, "cluster", "-o", "json")
		var st types.ClusterStatus
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			return false
		}
		for _, m := range st.Members {
			if m.ID == r.id {
				return m.HealthKnown && m.Reachable && m.Healthy && m.Version == rl.version && m.FeatureLevel == rl.level
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "%s: rangealloc cluster through the leader %s shows %s healthy on the %s release",
		step, leader.id, r.id, rl.name)
	if !healthy {
		t.Fatalf("%s: the last answer of rangealloc cluster -o json:\n%s", step, out)
	}
}

// checkStep requires every member to run, the cluster to stay at feature
// level 1 and refuse a request of level 2 (a member kept a non-voter), and
// finalize-upgrade to be refused while an old member remains, naming each.
func checkStep(t *testing.T, step string, rs []*relNode) {
	t.Helper()
	requireAllRunning(t, step, rs)
	var old []string
	var anyNew *relNode
	for _, r := range rs {
		if r.rel() == relOld {
			old = append(old, r.id)
		} else {
			anyNew = r
		}
	}
	for _, r := range rs {
		if r.rel() == relNew {
			st, err := r.client().Cluster(ctxE(t))
			require.NoError(t, err, "%s: GET /v1/cluster on %s", step, r.id)
			require.Equal(t, 1, st.FeatureLevel, "%s: %s: the cluster stays at level 1 until finalize", step, r.id)
		}
	}
	// A level-2 request through a new node. assert, not require: with
	// the finalize check below, a failure reports both.
	_, stderr, code := rangealloc(t, "http://"+anyNew.http, "cluster", "join", "n4", freePort(t), freePort(t), "--voter=false")
	assert.Equal(t, 1, code, "%s: a member kept a non-voter needs feature level 2", step)
	assert.Contains(t, stderr, "Error: VersionMismatch:", step)
	assert.Contains(t, stderr, "needs feature level 2, and the cluster is at 1", step)
	st, err := anyNew.client().Cluster(ctxE(t))
	require.NoError(t, err)
	assert.Len(t, st.Members, len(rs), "%s: the refused join changed no membership", step)
	if len(old) > 0 {
		_, stderr, code = rangealloc(t, "http://"+anyNew.http, "cluster", "finalize-upgrade")
		assert.Equal(t, 1, code, "%s: finalize-upgrade is refused while %v run the previous release", step, old)
		assert.Contains(t, stderr, "Error: VersionMismatch:", step)
		for _, id := range old {
			assert.Contains(t, stderr, id+" (", "%s: the refusal names the old node", step)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// leaderOf waits until the members agree on a leader and returns it.
func leaderOf(t *testing.T, step string, rs []*relNode) *relNode {
	t.Helper()
	var leader *relNode
	require.Eventually(t, func() bool {
		id := ""
		for _, r := range rs {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := r.client().Cluster(ctx)
			cancel()
			if err != nil || st.Leader.ID == "" || (id != "" && st.Leader.ID != id) {
				return false
			}
			id = st.Leader.ID
		}
		leader = relByID(rs, id)
		return leader != nil
	}, 30*time.Second, 50*time.Millisecond, "%s: the members agree on a leader", step)
	return leader
}

// followerOf returns a member other than leader that runs release rel.
func followerOf(rs []*relNode, leader *relNode, rel string) *relNode {
	for _, r := range rs {
		if r != leader && r.rel() == rel {
			return r
		}
	}
	return nil
}

// ensureLeaderRuns hands leadership to a member of release rel unless one leads.
func ensureLeaderRuns(t *testing.T, step string, rs []*relNode, rel string) {
	t.Helper()
	leader := leaderOf(t, step, rs)
	if leader.rel() == rel {
		return
	}
	to := followerOf(rs, leader, rel)
	_, err := leader.client().TransferLeadership(ctxE(t), to.id)
	require.NoError(t, err, "%s: hand leadership from %s to %s", step, leader.id, to.id)
	require.Eventually(t, func() bool { return leaderOf(t, step, rs) == to }, 30*time.Second, 100*time.Millisecond,
		"%s: %s leads", step, to.id)
}

// observeMix records which releases lead and follow while the load runs
// 50 writes under one leader.
func observeMix(t *testing.T, step string, rs []*relNode, load *rollingLoad, mixes map[string]bool) {
	t.Helper()
	for range 3 {
		leader := leaderOf(t, step, rs)
		load.waitProgress(t, step, 50)
		if leaderOf(t, step, rs) != leader {
			continue // leadership moved meanwhile: look again
		}
		for _, r := range rs {
			if r != leader {
				mixes[leader.rel()+" leader, "+r.rel()+" follower"] = true
			}
		}
		return
	}
	t.Fatalf("%s: leadership kept moving", step)
}

// runBin runs a binary and returns stdout, stderr and the exit code.
func runBin(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errb.String(), 0
}
