package test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/test/faultfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	flagFreeze    = flag.Duration("power.freeze", 5*time.Second, "TestE2EDiskStall: how long the leader's disk stays frozen")
	flagStallRuns = flag.Int("power.stall-runs", 1, "TestE2EDiskStall: how many times the whole scenario runs")
)

// mountDisk mounts a fault file system (test/faultfs) for a test, backed
// by a temp dir: the disk of one node, which the test can freeze or cut
// the power of. Without FUSE (not root, no /dev/fuse) the test is skipped,
// or fails under CI=true.
func mountDisk(t *testing.T) *faultfs.FS {
	t.Helper()
	if err := faultfs.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot run under CI=true: %v", err)
		}
		t.Skipf("%v (run as root with /dev/fuse)", err)
	}
	dir := t.TempDir()
	return faultfs.MountT(t, filepath.Join(dir, "backing"), filepath.Join(dir, "disk"))
}

// TestE2EPowerCut: one node, its data directory, its backup directory and
// the file `rangealloc snapshot save` writes all on one disk, whose power
// is cut after the node took snapshots and backups: everything written
// but not fsynced is lost, file data and directory entries alike
// (test/faultfs). The node must start again with every acknowledged
// value, and the saved file and every backup the node had finished must
// be there. The data directory is created by the node, two levels deep,
// so its entries are only durable if the node fsyncs their parents.
func TestE2EPowerCut(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, testE2EPowerCut)
}

func testE2EPowerCut(t *testing.T, store string) {
	disk := mountDisk(t)
	backups := disk.Path("backups")
	p := &proc{id: "n1", http: freePort(t), raft: freePort(t), dir: disk.Path("var", "lib", "rangealloc"),
		args: []string{"--log-store", store, "--snapshot-threshold", "16", "--snapshot-interval", "100ms", "--trailing-logs", "4",
			"--backup-dir", backups, "--backup-interval", "1s", "--backup-retain", "100"}}
	p.start(t)
	waitLeader(t, p)
	ctx := ctxE(t)
	acked := map[string]string{}
	for i := 0; i < 100; i++ {
		owner := fmt.Sprintf("acked-%d", i)
		got, _, err := p.client().Allocate(ctx, "nodeport", "", owner, client.Options{IdempotencyKey: owner})
		require.NoError(t, err)
		acked[got.Value] = owner
	}
	var snaps, finished []string
	require.Eventually(t, func() bool {
		snaps, _ = filepath.Glob(filepath.Join(p.dir, "snapshots", "*-*-*[0-9]"))
		finished, _ = filepath.Glob(filepath.Join(backups, "rangealloc-*.snap"))
		return len(snaps) > 0 && len(finished) > 0
	}, 20*time.Second, 100*time.Millisecond, "a Raft snapshot and a backup were taken")
	saved := disk.Path("saved.snap")
	out, errOut, code := rangealloc(t, p.http, "snapshot", "save", saved)
	require.Equal(t, 0, code, "snapshot save: %s%s", out, errOut)
	want, err := os.ReadFile(saved)
	require.NoError(t, err)

	p.kill9(t)
	require.NoError(t, disk.Crash(), "cut the power")

	if got, err := os.ReadFile(saved); assert.NoError(t, err, "the file `snapshot save` reported saved") {
		assert.Equal(t, want, got, "the saved file's content")
	}
	for _, b := range finished {
		assert.FileExists(t, b, "a backup the node had finished")
	}
	p.start(t)
	waitLeader(t, p)
	for v, owner := range acked {
		a, _, err := p.client().Get(ctx, "nodeport", v, client.Options{})
		require.NoError(t, err, "acknowledged %s", v)
		assert.Equal(t, owner, a.Owner, "acknowledged %s", v)
	}
	a, _, err := p.client().Allocate(ctx, "nodeport", "", "after", client.Options{})
	require.NoError(t, err)
	assert.NotContains(t, acked, a.Value, "no acknowledged value is handed out again")
}

// stallWrite is one write of TestE2EDiskStall's writers.
type stallWrite struct {
	node          string
	call, ret     time.Time
	value, owner  string
	err           error
	acknowledged  bool
	idempotencyID string
}

// TestE2EDiskStall: three nodes, each on its own disk. The leader's disk
// freezes for -power.freeze (every operation on it blocks) while writers
// go through both followers. Writes must resume within the stall timeout
// (2 s, the default) plus 3 s; when the disk answers again the old leader
// follows, and every acknowledged value is on every node with one owner.
// -power.stall-runs repeats the whole scenario.
func TestE2EDiskStall(t *testing.T) {
	// Not parallel (docs/TESTING.md): it bounds the time writes take to
	// resume after the freeze.
	for run := 1; run <= *flagStallRuns; run++ {
		t.Run(fmt.Sprintf("run %d", run), testE2EDiskStall)
	}
}

const stallTimeout = 2 * time.Second

func testE2EDiskStall(t *testing.T) {
	disks := make([]*faultfs.FS, 3)
	for i := range disks {
		disks[i] = mountDisk(t)
	}
	ps := newProcsOn(t, disks)
	l := byID(ps, waitLeader(t, ps[0]))
	var fs []*proc
	for _, p := range ps {
		if p != l {
			fs = append(fs, p)
		}
	}
	disk := disks[slices.Index(ps, l)]

	var mu sync.Mutex
	var writes []stallWrite
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				s := stallWrite{node: f.id, call: time.Now(), owner: key, idempotencyID: key}
				a, _, err := f.client().Allocate(ctx, "clusterip-ipv4", "", key, client.Options{IdempotencyKey: key})
				cancel()
				s.ret, s.err = time.Now(), err
				if err == nil {
					s.value, s.acknowledged = a.Value, true
				}
				mu.Lock()
				writes = append(writes, s)
				mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	frozen := time.Now()
	disk.Freeze()
	var sawStalled bool
	deadline := frozen.Add(*flagFreeze)
	for time.Now().Before(deadline) {
		sawStalled = sawStalled || readyReason(l) == "disk_stalled"
		time.Sleep(200 * time.Millisecond)
	}
	disk.Thaw()
	thawed := time.Now()
	waitReady(t, l)
	close(stop)
	wg.Wait()

	var resumed time.Duration = -1
	acked := map[string]string{}
	for _, w := range writes {
		if !w.acknowledged {
			continue
		}
		if prev, ok := acked[w.value]; ok {
			t.Errorf("value %s acknowledged to %s and to %s", w.value, prev, w.owner)
		}
		acked[w.value] = w.owner
		if w.call.After(frozen) && w.ret.Before(thawed) && (resumed < 0 || w.ret.Sub(frozen) < resumed) {
			resumed = w.ret.Sub(frozen)
		}
	}
	t.Logf("leader %s's disk frozen %v: writes through the followers resumed %v after the freeze; %d writes acknowledged; "+
		"the stalled node said disk_stalled: %t", l.id, *flagFreeze, resumed.Round(time.Millisecond), len(acked), sawStalled)
	require.GreaterOrEqual(t, resumed, time.Duration(0), "no write sent after the freeze was acknowledged while the disk was frozen")
	assert.LessOrEqual(t, resumed, stallTimeout+3*time.Second, "writes resume within the stall timeout plus 3 s")
	ctx := ctxE(t)
	sameRangeAllocation(t, ps, "clusterip-ipv4")
	for _, p := range ps {
		for v, owner := range acked {
			a, _, err := p.client().Get(ctx, "clusterip-ipv4", v, client.Options{Consistency: "stale"})
			require.NoError(t, err, "%s: acknowledged %s", p.id, v)
			require.Equal(t, owner, a.Owner, "%s: acknowledged %s", p.id, v)
		}
	}
	stalls := metricsText(t, l)
	assert.Contains(t, stalls, "rangealloc_disk_stalls_total 1\n", "the stall is counted once")
	assert.Contains(t, stalls, "rangealloc_disk_stalled 0\n")
}

// newProcsOn starts one server per disk, as newProcsArgs does, each with
// its data directory on its disk.
func newProcsOn(t *testing.T, disks []*faultfs.FS) []*proc {
	var ps []*proc
	var peers []string
	for i, d := range disks {
		p := &proc{id: fmt.Sprintf("n%d", i+1), http: freePort(t), raft: freePort(t), dir: d.Path("data")}
		ps = append(ps, p)
		peers = append(peers, fmt.Sprintf("%s=%s=%s", p.id, p.raft, p.http))
	}
	for _, p := range ps {
		p.args = []string{"--peers", strings.Join(peers, ",")}
		p.start(t)
	}
	return ps
}

// readyReason returns the reason p's /readyz gives, "" when ready, and the
// error when p does not answer within half a second.
func readyReason(p *proc) string {
	c := http.Client{Timeout: 500 * time.Millisecond}
	r, err := c.Get("http://" + p.http + "/readyz")
	if err != nil {
		return err.Error()
	}
	defer r.Body.Close()
	var body struct{ Reason string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		return err.Error()
	}
	return body.Reason
}

// TestE2EPowerCutAtOps cuts a node's power at exact points of its life:
// the n-th mutating file operation since the mount fails, and every one
// after it (test/faultfs FailFrom), as the power going at that instant
// would; then what was not fsynced is lost. The points are spread over
// the founding, a load of allocations with Raft snapshots and backups, and
// `snapshot save`. After each cut the node must start again with its
// usual flags and serve every value acknowledged before the cut, with its
// owner, and hand none of them out again. A dry run first counts the
// scenario's operations.
func TestE2EPowerCutAtOps(t *testing.T) {
	t.Parallel()
	total := powerCutScenario(t, 0)
	require.Greater(t, total, int64(100), "the dry run's mutating operations")
	// Dense over the founding (about the first 100), sparse after.
	points := []int64{3, 10, 20, 30, 45, 60, 80, total / 4, total / 2, 3 * total / 4, total - 5}
	t.Logf("the scenario makes %d mutating file operations; cutting at %v", total, points)
	for _, at := range points {
		t.Run(fmt.Sprintf("op %d", at), func(t *testing.T) {
			t.Parallel() // each cut on a disk and a server of its own
			powerCutScenario(t, at)
		})
	}
}

// powerCutScenario runs one node on a fresh disk through its scenario,
// with the power cut at mutating operation at (0: no cut), and returns
// how many mutating operations the disk saw.
func powerCutScenario(t *testing.T, at int64) int64 {
	disk := mountDisk(t)
	if at > 0 {
		disk.FailFrom(int(at))
	}
	p := &proc{id: "n1", http: freePort(t), raft: freePort(t), dir: disk.Path("var", "lib", "rangealloc"),
		args: []string{"--snapshot-threshold", "16", "--snapshot-interval", "100ms", "--trailing-logs", "4",
			"--backup-dir", disk.Path("backups"), "--backup-interval", "1s"}}
	p.start(t)
	acked := map[string]string{}
	cut := func() bool { return at > 0 && disk.Cut() }
	up := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !cut(); time.Sleep(50 * time.Millisecond) {
		if readyReason(p) == "" {
			up = true
			break
		}
	}
	ctx := ctxE(t)
	for i := 0; up && i < 60 && !cut(); i++ {
		owner := fmt.Sprintf("acked-%d", i)
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		a, _, err := p.client().Allocate(c, "nodeport", "", owner, client.Options{IdempotencyKey: owner})
		cancel()
		if err == nil {
			acked[a.Value] = owner
		}
	}
	if up && !cut() {
		time.Sleep(1200 * time.Millisecond) // a backup
		_, _, _ = rangealloc(t, p.http, "snapshot", "save", disk.Path("saved.snap"))
	}
	ops := disk.Ops()
	p.kill9(t)
	if at == 0 {
		return ops
	}
	require.NoError(t, disk.Crash(), "cut the power")
	p.start(t)
	waitLeader(t, p)
	for v, owner := range acked {
		a, _, err := p.client().Get(ctx, "nodeport", v, client.Options{})
		require.NoError(t, err, "acknowledged %s before the cut at operation %d", v, at)
		assert.Equal(t, owner, a.Owner, "acknowledged %s", v)
	}
	a, _, err := p.client().Allocate(ctx, "nodeport", "", "after", client.Options{})
	require.NoError(t, err)
	assert.NotContains(t, acked, a.Value, "no acknowledged value is handed out again")
	t.Logf("cut at operation %d (%d acknowledged before it): the node serves them all", at, len(acked))
	return ops
}
