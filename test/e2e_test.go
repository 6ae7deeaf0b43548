package test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/testaddr"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// binary is the rangealloc binary built once for the end-to-end tests.
var binary string

// raceExitSleep is the race detector's atexit_sleep_ms for the processes
// the tests start: its default makes every race-built process, each CLI
// command among them, wait 1 s before it exits, so that a race another
// goroutine is reporting at that moment is printed whole. A tenth of that
// is still ample for a report to finish, and a process that saw a race
// still exits with status 66, which fails the test.
const raceExitSleep = "atexit_sleep_ms=100"

// parallel is how many of this package's tests run at once unless
// -test.parallel says otherwise: more than go test's default (GOMAXPROCS),
// since these tests spend most of their time waiting on processes, Raft's
// timers and the disk, not on the CPU. Tests that must run alone do not
// call t.Parallel (docs/TESTING.md lists them and why).
const parallel = 3

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	if gorace := os.Getenv("GORACE"); !strings.Contains(gorace, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(gorace+" "+raceExitSleep))
	}
	dir, err := os.MkdirTemp("", "rangealloc-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "rangealloc")
	out, err := exec.Command("go", "build", "-race", "-o", binary, "../cmd/rangealloc").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build rangealloc: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort returns a loopback address whose port is free now, for a
// server process to listen on (testaddr.Loopback).
func freePort(t *testing.T) string { return testaddr.Loopback(t) }

// proc is a rangealloc server process.
type proc struct {
	id, http, raft, dir string
	args                []string
	noEnvStore          bool // never add --log-store from $RANGEALLOC_TEST_LOG_STORE
	cmd                 *exec.Cmd
	log                 *bytes.Buffer
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	p.log = &bytes.Buffer{}
	args := []string{"server", "--id", p.id, "--data-dir", p.dir, "--http-addr", p.http, "--raft-addr", p.raft, "--log-level", "warn"}
	if store := os.Getenv(cluster.LogStoreEnv); store != "" && !p.noEnvStore && !slices.Contains(p.args, "--log-store") {
		args = append(args, "--log-store", store)
	}
	p.cmd = exec.Command(binary, append(args, p.args...)...)
	p.cmd.Stderr = p.log
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("log of %s:\n%s", p.id, p.log.String())
		}
	})
}

func (p *proc) kill9(t *testing.T) {
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_ = p.cmd.Wait()
}

func (p *proc) stop(t *testing.T) {
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, p.cmd.Wait(), "clean exit on SIGTERM")
}

func (p *proc) client() *client.Client { return client.New(p.http, nil) }

func newProcs(t *testing.T, n int) []*proc { return newProcsArgs(t, n) }

// newProcsArgs starts n server processes, each with the extra flags.
func newProcsArgs(t *testing.T, n int, extra ...string) []*proc {
	dir := t.TempDir()
	var ps []*proc
	var peers []string
	for i := 0; i < n; i++ {
		p := &proc{id: fmt.Sprintf("n%d", i+1), http: freePort(t), raft: freePort(t), dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1))}
		ps = append(ps, p)
		peers = append(peers, fmt.Sprintf("%s=%s=%s", p.id, p.raft, p.http))
	}
	for _, p := range ps {
		p.args = append([]string(nil), extra...)
		if n > 1 {
			p.args = append(p.args, "--peers", strings.Join(peers, ","))
		}
	}
	for _, p := range ps {
		p.start(t)
	}
	return ps
}

// waitLeader waits until p knows a leader and the default pools exist, and
// returns the leader's ID.
func waitLeader(t *testing.T, p *proc) string {
	t.Helper()
	var leader string
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := p.client().Cluster(ctx)
		if err != nil || st.Leader.ID == "" {
			return false
		}
		pools, err := p.client().Pools(ctx, client.Options{})
		leader = st.Leader.ID
		return err == nil && len(pools) == 2
	}, 30*time.Second, 100*time.Millisecond, "no leader via %s", p.id)
	return leader
}

func byID(ps []*proc, id string) *proc {
	for _, p := range ps {
		if p.id == id {
			return p
		}
	}
	return nil
}

func ctxE(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestE2EThreeNodes(t *testing.T) {
	t.Parallel()
	ps := newProcs(t, 3)
	leaderID := waitLeader(t, ps[0])
	leader := byID(ps, leaderID)
	var followers []*proc
	for _, p := range ps {
		if p != leader {
			followers = append(followers, p)
		}
	}
	ctx := ctxE(t)

	// Writes and reads through followers.
	a, meta, err := followers[0].client().Allocate(ctx, "clusterip-ipv4", "", "default/web", client.Options{IdempotencyKey: "web"})
	require.NoError(t, err)
	assert.Equal(t, 201, meta.Status)
	assert.Equal(t, leaderID, meta.ServedBy, "a write through a follower is served by the leader")
	got, meta, err := followers[1].client().Get(ctx, "clusterip-ipv4", a.Value, client.Options{})
	require.NoError(t, err, "a linearizable read through the other follower sees it")
	assert.Equal(t, a, got)
	assert.Equal(t, leaderID, meta.ServedBy, "so is a linearizable read")
	require.Eventually(t, func() bool {
		_, meta, err = followers[1].client().Get(ctx, "clusterip-ipv4", a.Value, client.Options{Consistency: "stale"})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the follower has applied the write")
	assert.Equal(t, followers[1].id, meta.ServedBy, "a stale read is served by the node asked")
	_, err = followers[0].client().Release(ctx, "nodeport", "30000", "", client.Options{})
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, leaderID, ce.ServedBy, "a refusal by the leader names the leader")

	// kill -9 of the leader; writes resume.
	leader.kill9(t)
	var acked []api.Allocation
	require.Eventually(t, func() bool {
		b, _, err := followers[0].client().Allocate(ctx, "nodeport", "", "after-kill", client.Options{IdempotencyKey: "after-kill"})
		if err == nil {
			acked = append(acked, b)
		}
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "writes resume after the leader is killed")
	again, _, err := followers[1].client().Allocate(ctx, "clusterip-ipv4", "", "default/web", client.Options{IdempotencyKey: "web"})
	require.NoError(t, err)
	assert.Equal(t, a, again, "a retried key returns its first answer across the leader change")

	// The killed node restarts and catches up.
	leader.start(t)
	require.Eventually(t, func() bool {
		got, _, err := leader.client().Get(ctx, "nodeport", acked[0].Value, client.Options{Consistency: "stale"})
		return err == nil && got.Owner == "after-kill"
	}, 30*time.Second, 200*time.Millisecond, "the restarted node catches up")

	// A backup through a follower restores into a fresh node.
	backup, err := followers[0].client().Backup(ctx)
	require.NoError(t, err)
	fresh := newProcs(t, 1)[0]
	waitLeader(t, fresh)
	require.NoError(t, fresh.client().Restore(ctx, backup))
	got, _, err = fresh.client().Get(ctx, "clusterip-ipv4", a.Value, client.Options{})
	require.NoError(t, err)
	assert.Equal(t, "default/web", got.Owner)
	ra1, err := followers[1].client().RangeAllocation(ctx, "nodeport", client.Options{})
	require.NoError(t, err)
	ra2, err := fresh.client().RangeAllocation(ctx, "nodeport", client.Options{})
	require.NoError(t, err)
	assert.Equal(t, ra1.Data, ra2.Data, "the same RangeAllocation bytes")

	// Replace a node: remove it, then a fresh one joins through any member.
	victim := followers[1]
	require.NoError(t, followers[0].client().RemoveMember(ctx, victim.id))
	victim.stop(t)
	joiner := &proc{id: "n4", http: freePort(t), raft: freePort(t), dir: filepath.Join(t.TempDir(), "n4"),
		args: []string{"--join", followers[0].http}}
	joiner.start(t)
	require.Eventually(t, func() bool {
		st, err := followers[0].client().Cluster(ctx)
		if err != nil || len(st.Members) != 3 {
			return false
		}
		for _, m := range st.Members {
			if m.ID == victim.id {
				return false
			}
		}
		return true
	}, 30*time.Second, 200*time.Millisecond, "n4 replaces %s", victim.id)
	require.Eventually(t, func() bool {
		got, _, err := joiner.client().Get(ctx, "clusterip-ipv4", a.Value, client.Options{Consistency: "stale"})
		return err == nil && got.Owner == "default/web"
	}, 30*time.Second, 200*time.Millisecond, "the joiner has the state")
	_, _, err = joiner.client().Allocate(ctx, "nodeport", "", "via-joiner", client.Options{})
	require.NoError(t, err, "writes through the new member")
}

// rangealloc runs the CLI against addr and returns stdout, stderr and the exit code.
func rangealloc(t *testing.T, addr string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, append(args, "--addr", addr)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code
}

func TestCLI(t *testing.T) {
	t.Parallel()
	p := newProcs(t, 1)[0]
	waitLeader(t, p)
	addr := "http://" + p.http
	type row struct {
		args    []string
		code    int
		stdout  []string // substrings
		stderr  string
		jsonKey string // with -o json: a key the object must have
	}
	rows := []row{
		{args: []string{"pools"}, stdout: []string{"NAME", "clusterip-ipv4", "10.96.0.0/12", "nodeport", "30000-32767"}},
		{args: []string{"pools", "get", "nodeport", "-o", "json"}, jsonKey: "dynamic"},
		{args: []string{"pools", "create", "extra", "10.200.0.0/24"}, stdout: []string{"extra", "254"}},
		{args: []string{"pools", "create", "extra", "10.201.0.0/24"}, code: 1, stderr: "Error: PoolExists:"},
		{args: []string{"allocate", "nodeport", "30080", "--owner", "default/web"}, stdout: []string{"30080", "default/web", "static"}},
		{args: []string{"allocate", "nodeport", "30080"}, code: 1, stderr: "Error: AlreadyAllocated: provided port is already allocated"},
		{args: []string{"allocate", "nodeport", "99999"}, code: 1, stderr: "Error: NotInRange: provided port is not in the valid range"},
		{args: []string{"allocate", "extra", "--count", "3", "--owner", "batch", "-o", "json"}, jsonKey: "allocations"},
		{args: []string{"allocate", "clusterip-ipv4", "--owner", "x", "--idempotency-key", "k1", "-o", "json"}, jsonKey: "value"},
		{args: []string{"get", "nodeport", "30080"}, stdout: []string{"30080", "default/web"}},
		{args: []string{"get", "nodeport", "30081"}, code: 1, stderr: "Error: NotAllocated:"},
		{args: []string{"list", "extra", "--owner", "batch"}, stdout: []string{"batch", "dynamic"}},
		{args: []string{"list", "extra", "-o", "json"}, jsonKey: "allocations"},
		{args: []string{"release", "nodeport", "30080", "--owner", "someone"}, code: 1, stderr: "Error: OwnerMismatch:"},
		{args: []string{"release", "nodeport", "30080", "--owner", "default/web"}, stdout: []string{"released 30080"}},
		{args: []string{"cluster"}, stdout: []string{"ROLE", "HEALTH", p.id + " ", "leader", "healthy", fmt.Sprintf("feature level %d", fsm.MaxFeatureLevel), "cluster "}},
		{args: []string{"version"}, stdout: []string{"rangealloc ", "protocol", "feature level"}},
		{args: []string{"cluster", "finalize-upgrade"}, stdout: []string{fmt.Sprintf("feature level %d", fsm.MaxFeatureLevel)}},
		{args: []string{"cluster", "status", "-o", "json"}, jsonKey: "clusterId"},
		{args: []string{"cluster", "remove", "nope"}, code: 1, stderr: "Error: MemberNotFound:"},
		{args: []string{"pools", "delete", "nope"}, code: 1, stderr: "Error: PoolNotFound:"},
		{args: []string{"allocate"}, code: 1, stderr: "Error: accepts between 1 and 2 arg(s)"},
		{args: []string{"pools", "-o", "yaml"}, code: 1, stderr: `--output "yaml"`},
		{args: []string{"server", "--request-timeout", "0s"}, code: 1, stderr: "Error: --request-timeout 0s: want a positive duration"},
		{args: []string{"server", "--service-cidr", "10.96.0.0/8"}, code: 1, stderr: `Error: --service-cidr "10.96.0.0/8": invalid range`},
		{args: []string{"server", "--node-port-range", "30000-20000"}, code: 1, stderr: `Error: --node-port-range "30000-20000": want first-last`},
		{args: []string{"pools", "create", "overlap", "10.96.0.0/16"}, code: 1, stderr: `Error: PoolOverlap: range 10.96.0.0/16 overlaps pool "clusterip-ipv4" (10.96.0.0/12)`},
		{args: []string{"pools", "create", "ports", "32000-40000"}, code: 1, stderr: `Error: PoolOverlap: range 32000-40000 overlaps pool "nodeport"`},
		{args: []string{"bench", "--duration", "1s", "--clients", "2", "--pool", "nodeport", "-o", "json"}, jsonKey: "opsPerSec"},
		{args: []string{"bench", "--duration", "1s", "--clients", "2", "--mix", "health=1", "-o", "json"}, stdout: []string{`"errors": 0`}, jsonKey: "opsPerSec"},
		{args: []string{"bench", "--duration", "1s", "--clients", "2", "--mix", "health=1"}, stdout: []string{"CPU/OP", "BENCH/OP", "µs"}},
		{args: []string{"bench", "--mix", "ping=1"}, code: 1, stderr: `unknown operation "ping" (allocate, release, get, health, service-create, service-delete)`},
		{args: []string{"bench", "--mix", "allocate=1,service-create=1"}, code: 1, stderr: `service-create and service-delete do not mix with the other operations`},
	}
	if runtime.GOOS == "linux" { // from /proc/stat
		rows = append(rows, row{args: []string{"bench", "--duration", "1s", "--clients", "2", "--mix", "health=1", "-o", "json"}, jsonKey: "cpuPerOpUs"})
	}
	for _, r := range rows {
		t.Run(strings.Join(r.args, " "), func(t *testing.T) {
			stdout, stderr, code := rangealloc(t, addr, r.args...)
			assert.Equal(t, r.code, code, "exit code; stderr: %s", stderr)
			for _, s := range r.stdout {
				assert.Contains(t, stdout, s)
			}
			if r.stderr != "" {
				assert.Contains(t, stderr, r.stderr)
			}
			if r.jsonKey != "" {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(stdout), &m), "-o json prints JSON: %s", stdout)
				assert.Contains(t, m, r.jsonKey)
			}
		})
	}
	// snapshot save and restore
	file := filepath.Join(t.TempDir(), "backup.snap")
	stdout, stderr, code := rangealloc(t, addr, "snapshot", "save", file)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "saved")
	stdout, stderr, code = rangealloc(t, addr, "snapshot", "restore", file)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "restored")
	require.NoError(t, os.WriteFile(file, []byte("garbage"), 0o600))
	_, stderr, code = rangealloc(t, addr, "snapshot", "restore", file)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "Error: InvalidArgument: invalid backup")
	// Flags from the environment.
	cmd := exec.Command(binary, "pools")
	cmd.Env = append(os.Environ(), "RANGEALLOC_ADDR="+addr)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "nodeport")
	// /metrics carries the pool gauges and Raft's own metrics.
	resp, err := http.Get(addr + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `rangealloc_pool_allocated{pool="nodeport"}`)
	assert.Contains(t, string(body), "rangealloc_raft_", "hashicorp/raft's metrics are exported")
	// No server at --addr: a message that says what to do.
	_, stderr, code = rangealloc(t, "http://"+freePort(t), "pools")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "cannot reach rangealloc at")
	assert.Contains(t, stderr, "Is a server running there?")
	// --help helps.
	stdout, _, code = rangealloc(t, addr, "allocate", "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "Examples:")
}

// TestE2ENoLeader: with no quorum, a write waits a bounded time and then
// answers 503 NoLeader with Retry-After; nothing is applied.
func TestE2ENoLeader(t *testing.T) {
	t.Parallel()
	ps := newProcs(t, 3)
	leader := byID(ps, waitLeader(t, ps[0]))
	for _, p := range ps { // every node has applied the pools before two of them die
		require.Eventually(t, func() bool {
			_, err := p.client().Pool(ctxE(t), "nodeport", client.Options{Consistency: "stale"})
			return err == nil
		}, 10*time.Second, 50*time.Millisecond, "%s has the pools", p.id)
	}
	var survivor *proc
	for _, p := range ps {
		if p != leader && survivor == nil {
			survivor = p
		} else {
			p.kill9(t)
		}
	}
	time.Sleep(2 * time.Second) // the survivor's leader is gone and no election can win
	req, err := http.NewRequest(http.MethodPost, "http://"+survivor.http+"/v1/pools/nodeport/allocations", strings.NewReader(`{"value":"30100"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	require.NoError(t, err, "the wait is bounded: the server answers within its request timeout")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), `"NoLeader"`)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	_, meta, err := survivor.client().Get(ctxE(t), "nodeport", "30100", client.Options{Consistency: "stale"})
	assert.Equal(t, "NotAllocated", errCode(err), "nothing was applied (%v, %+v)", err, meta)
}

func errCode(err error) string {
	if ae, ok := err.(*client.Error); ok {
		return ae.Code
	}
	return ""
}
