package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// diskFloor is the --min-free-disk of TestE2EDiskFull, on 64 MiB file
// systems.
const diskFloor = 32 << 20

// TestE2EDiskFull: three processes, each with its data directory on a
// 64 MiB tmpfs of its own and --min-free-disk 32MiB. Filling the leader's
// file system crosses the floor: writes sent to it are 507
// InsufficientStorage, its /readyz says disk_full, and leadership moves
// to a node with space, which keeps taking writes. Every acknowledged
// write stays, each value with one owner. Once the filler is deleted the
// node is ready again and takes writes, without a restart. The steps are
// those of the "Disk full" runbook in docs/OPERATIONS.md.
func TestE2EDiskFull(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	var ps []*proc
	var peers []string
	for i := 1; i <= 3; i++ {
		mnt := filepath.Join(base, fmt.Sprintf("disk%d", i))
		mountTmpfs(t, mnt, "64m")
		p := &proc{id: fmt.Sprintf("n%d", i), http: freePort(t), raft: freePort(t), dir: filepath.Join(mnt, "data")}
		ps = append(ps, p)
		peers = append(peers, fmt.Sprintf("%s=%s=%s", p.id, p.raft, p.http))
	}
	for _, p := range ps {
		p.args = []string{"--peers", strings.Join(peers, ","), "--min-free-disk", "32MiB"}
		p.start(t)
	}
	low := byID(ps, waitLeader(t, ps[0]))
	ctx := ctxE(t)
	acked := map[string]string{} // value → owner
	seq := 0
	allocate := func(p *proc) (string, error) {
		seq++
		owner := fmt.Sprintf("acked-%d", seq)
		a, _, err := p.client().Allocate(ctx, "nodeport", "", owner, client.Options{IdempotencyKey: owner})
		if err == nil {
			acked[a.Value] = owner
		}
		return owner, err
	}
	for i := 0; i < 20; i++ {
		_, err := allocate(low)
		require.NoError(t, err)
	}
	free := diskGauge(t, low, "rangealloc_disk_free_bytes")
	assert.Greater(t, free, float64(diskFloor), "the gauge reports the free space")
	assert.Greater(t, diskGauge(t, low, "rangealloc_raft_log_bytes"), float64(0))
	assert.Contains(t, metricsText(t, low), "rangealloc_snapshot_bytes ")

	// Fill the leader's file system to 16 MiB free.
	filler := filepath.Join(filepath.Dir(low.dir), "filler")
	fill(t, filler, freeBytes(t, low.dir)-16<<20)
	var refused *client.Error
	require.Eventually(t, func() bool { // within a second or so
		_, err := allocate(low)
		e, ok := err.(*client.Error)
		if ok && e.Code == "InsufficientStorage" {
			refused = e
		}
		return refused != nil
	}, 15*time.Second, 100*time.Millisecond, "writes to %s are refused", low.id)
	assert.Equal(t, http.StatusInsufficientStorage, refused.Status)
	assert.Contains(t, refused.Message, "node "+low.id, "the message names the node")
	assert.Contains(t, refused.Message, "32.0 MiB", "and the floor")
	_, stderr, code := rangealloc(t, "http://"+low.http, "allocate", "nodeport", "--owner", "refused")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "InsufficientStorage", "the CLI says why")
	reason, detail := readyz(t, low)
	assert.Equal(t, "disk_full", reason, detail)
	assert.Less(t, diskGauge(t, low, "rangealloc_disk_free_bytes"), float64(diskFloor))

	// Leadership moves to a node with space, which takes writes; so does
	// the other node with space.
	var roomy []*proc
	for _, p := range ps {
		if p != low {
			roomy = append(roomy, p)
		}
	}
	require.Eventually(t, func() bool {
		out, _, code := rangealloc(t, "http://"+roomy[0].http, "cluster", "-o", "json")
		var st struct{ Leader struct{ ID string } }
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && st.Leader.ID != "" && st.Leader.ID != low.id
	}, 30*time.Second, 200*time.Millisecond, "leadership leaves %s", low.id)
	for _, p := range roomy {
		for i := 0; i < 5; i++ {
			_, err := allocate(p)
			require.NoError(t, err, "a write through %s, which has space", p.id)
		}
	}
	_, err := allocate(low)
	require.ErrorContains(t, err, "InsufficientStorage", "a low follower refuses too")
	ackedHeld(t, roomy[0], acked)

	// Space returns: the node is ready and takes writes, still the same process.
	require.NoError(t, os.Remove(filler))
	require.Eventually(t, func() bool { r, _ := readyz(t, low); return r == "" }, 30*time.Second, 100*time.Millisecond,
		"%s is ready again", low.id)
	require.Nil(t, low.cmd.ProcessState, "%s was not restarted", low.id)
	_, err = allocate(low)
	require.NoError(t, err, "writes through %s succeed again", low.id)
	for _, p := range ps {
		ackedHeld(t, p, acked)
	}
	sameRangeAllocation(t, ps, "nodeport")
}

// mountTmpfs mounts a tmpfs of size at dir until the test ends, or skips
// the test when it cannot (it needs root).
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("cannot mount a tmpfs at %s (needs root): %v: %s", dir, err, out)
	}
	// Registered before the processes start, so it runs after they are killed.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// freeBytes is what statfs says is free on the file system of dir.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	return int64(st.Bavail) * int64(st.Bsize)
}

// fill writes a file of n bytes at path, a MiB at a time.
func fill(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, int64(len(chunk)))
		_, err := f.Write(chunk[:k])
		require.NoError(t, err)
		n -= k
	}
	require.NoError(t, f.Sync())
}

// readyz returns the reason /readyz gives, "" when ready, and its detail.
func readyz(t *testing.T, p *proc) (reason, detail string) {
	t.Helper()
	r, err := http.Get("http://" + p.http + "/readyz")
	require.NoError(t, err)
	defer r.Body.Close()
	var body struct{ Reason, Detail string }
	require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
	if r.StatusCode == http.StatusOK {
		return "", ""
	}
	require.NotEmpty(t, body.Reason, "a 503 names its reason")
	return body.Reason, body.Detail
}

func metricsText(t *testing.T, p *proc) string {
	t.Helper()
	r, err := http.Get("http://" + p.http + "/metrics")
	require.NoError(t, err)
	defer r.Body.Close()
	var b strings.Builder
	s := bufio.NewScanner(r.Body)
	for s.Scan() {
		b.WriteString(s.Text() + "\n")
	}
	require.NoError(t, s.Err())
	return b.String()
}

// diskGauge reads the unlabelled gauge name from p's /metrics.
func diskGauge(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricsText(t, p), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	t.Fatalf("%s: no %s in /metrics", p.id, name)
	return 0
}

// ackedHeld requires p to answer, linearizably, every acknowledged value
// with its owner, and the pool to hold nothing else: no refused write
// took a value, and no value has two owners.
func ackedHeld(t *testing.T, p *proc, acked map[string]string) {
	t.Helper()
	all, err := p.client().ListAll(ctxE(t), "nodeport", "", client.Options{})
	require.NoError(t, err)
	held := map[string]string{}
	for _, a := range all {
		_, twice := held[a.Value]
		require.False(t, twice, "%s is listed twice", a.Value)
		held[a.Value] = a.Owner
	}
	assert.Equal(t, acked, held, "%s holds exactly the acknowledged values, with their owners", p.id)
}
