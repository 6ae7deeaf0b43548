package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runbook runs the CLI as an operator does, in dir, with env added to the
// process's: the commands of docs/OPERATIONS.md.
type runbook struct {
	t   *testing.T
	dir string
	env []string
}

func (r *runbook) run(args ...string) (stdout, stderr string, code int) {
	r.t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir, cmd.Env = r.dir, append(os.Environ(), r.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(r.t, err)
	}
	return out.String(), errb.String(), code
}

func (r *runbook) must(args ...string) string {
	r.t.Helper()
	out, errb, code := r.run(args...)
	require.Equal(r.t, 0, code, "rangealloc %s: %s", strings.Join(args, " "), errb)
	return out
}

// cluster is `rangealloc cluster -o json` through the client environment.
func (r *runbook) cluster() (types.ClusterStatus, bool) {
	out, _, code := r.run("cluster", "-o", "json")
	var st types.ClusterStatus
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
		return st, false
	}
	return st, true
}

// TestE2ERunbookInstallAndReplace runs two runbooks of docs/OPERATIONS.md
// on three local nodes, as written: "A secure three-node install"
// (certificates, tokens, --peers with mutual TLS, HTTPS and tokens; the
// client environment) and "Replacing a node" (a dead member shows
// unreachable; with --cleanup-dead-after it stays while three voters are
// the floor; a replacement joins with its own certificate, is promoted,
// and then the dead member is removed by the leader). The cluster then
// tolerates one failure again, and every acknowledged value survives.
func TestE2ERunbookInstallAndReplace(t *testing.T) {
	t.Parallel()
	rb := &runbook{t: t, dir: t.TempDir()}
	// 1. Certificates.
	rb.must("certs", "init", "--dir", "tls", "--node", "n1=127.0.0.1", "--node", "n2=127.0.0.1", "--node", "n3=127.0.0.1")
	// 2. Tokens: line 1 the token, line 2 the token file's line.
	tokens := map[string]string{}
	var file []string
	for _, role := range []string{"admin", "read"} {
		lines := strings.Split(strings.TrimSpace(rb.must("token", "create", "--role", role, "--name", role+"-runbook")), "\n")
		require.Len(t, lines, 2)
		tokens[role] = lines[0]
		file = append(file, lines[1])
	}
	require.NoError(t, os.WriteFile(filepath.Join(rb.dir, "tokens"), []byte(strings.Join(file, "\n")+"\n"), 0o600))
	// 3. Start each node with its own files.
	ps := make([]*proc, 3)
	var peers []string
	for i := range ps {
		id := fmt.Sprintf("n%d", i+1)
		ps[i] = &proc{id: id, http: freePort(t), raft: freePort(t), dir: filepath.Join(rb.dir, id)}
		peers = append(peers, fmt.Sprintf("%s=%s=https://%s", id, ps[i].raft, ps[i].http))
	}
	tlsArgs := func(id string) []string {
		tls := filepath.Join(rb.dir, "tls")
		return []string{"--tls-cert", filepath.Join(tls, id+".crt"), "--tls-key", filepath.Join(tls, id+".key"),
			"--tls-ca", filepath.Join(tls, "ca.crt"), "--api-tls-cert", filepath.Join(tls, id+".crt"),
			"--api-tls-key", filepath.Join(tls, id+".key"), "--token-file", filepath.Join(rb.dir, "tokens"),
			"--cleanup-dead-after", "10s"}
	}
	for _, p := range ps {
		p.args = append([]string{"--peers", strings.Join(peers, ",")}, tlsArgs(p.id)...)
		p.start(t)
	}
	// 4. Clients.
	rb.env = []string{"RANGEALLOC_ADDR=https://" + ps[0].http, "RANGEALLOC_CACERT=tls/ca.crt", "RANGEALLOC_TOKEN=" + tokens["admin"]}
	healthy := func(st types.ClusterStatus, want ...string) bool {
		got := map[string]bool{}
		for _, m := range st.Members {
			got[m.ID] = m.Voter && m.HealthKnown && m.Healthy
		}
		for _, id := range want {
			if !got[id] {
				return false
			}
		}
		return len(st.Members) == len(want)
	}
	// The table is read right after the status that shows three healthy
	// voters at the binary's feature level; under load an election may
	// come between the two reads, so both are read again until they
	// agree. The founding leader raises the level after it writes the
	// pools, so a healthy cluster may not be at it yet.
	var table string
	level := fmt.Sprintf("feature level %d", fsm.MaxFeatureLevel)
	require.Eventually(t, func() bool {
		st, ok := rb.cluster()
		if !ok || !healthy(st, "n1", "n2", "n3") || st.FeatureLevel != fsm.MaxFeatureLevel {
			return false
		}
		out, _, code := rb.run("cluster")
		table = out
		return code == 0 && strings.Contains(table, "healthy") && strings.Contains(table, level)
	}, 30*time.Second, 200*time.Millisecond, "three healthy voters at %s, and the table says so", level)
	assert.Contains(t, table, "healthy")
	assert.Contains(t, table, fmt.Sprintf("feature level %d", fsm.MaxFeatureLevel))

	acked := map[string]string{}
	allocate := func(owner string) {
		t.Helper()
		out := rb.must("allocate", "nodeport", "--owner", owner, "-o", "json")
		var a types.Allocation
		require.NoError(t, json.Unmarshal([]byte(out), &a))
		acked[a.Value] = owner
	}
	for i := 0; i < 20; i++ {
		allocate(fmt.Sprintf("before-%d", i))
	}

	// Replacing a node: n3 dies for good.
	ps[2].kill9(t)
	require.Eventually(t, func() bool {
		st, ok := rb.cluster()
		if !ok {
			return false
		}
		for _, m := range st.Members {
			if m.ID == "n3" {
				return m.HealthKnown && !m.Reachable
			}
		}
		return false
	}, 20*time.Second, 200*time.Millisecond, "n3 shows unreachable")
	assert.Contains(t, rb.must("cluster"), "UNREACHABLE")
	time.Sleep(12 * time.Second) // past --cleanup-dead-after
	st, ok := rb.cluster()
	require.True(t, ok)
	assert.Len(t, st.Members, 3, "three voters are the floor: the dead one stays until its replacement is a voter")
	allocate("while-n3-is-dead")

	// The replacement: a certificate from the same CA, then --join.
	rb.must("certs", "init", "--dir", "tls", "--node", "n4=127.0.0.1")
	n4 := &proc{id: "n4", http: freePort(t), raft: freePort(t), dir: filepath.Join(rb.dir, "n4")}
	n4.args = append([]string{"--join", "https://" + ps[0].http, "--cacert", filepath.Join(rb.dir, "tls", "ca.crt"),
		"--token", tokens["read"]}, tlsArgs("n4")...)
	n4.start(t)
	require.Eventually(t, func() bool { st, ok := rb.cluster(); return ok && healthy(st, "n1", "n2", "n4") },
		60*time.Second, 250*time.Millisecond, "n4 promoted, and the dead n3 removed by the leader")
	allocate("after-replacement")

	// It tolerates one failure again: n1 dies, n2 and n4 commit.
	ps[0].kill9(t)
	rb.env[0] = "RANGEALLOC_ADDR=https://" + n4.http
	require.Eventually(t, func() bool {
		_, _, code := rb.run("allocate", "nodeport", "--owner", "with-n1-dead", "--idempotency-key", "with-n1-dead")
		return code == 0
	}, 30*time.Second, 250*time.Millisecond, "two of three voters commit")
	for v, owner := range acked {
		var a types.Allocation
		require.NoError(t, json.Unmarshal([]byte(rb.must("get", "nodeport", v, "-o", "json")), &a), v)
		assert.Equal(t, owner, a.Owner, "acknowledged %s", v)
	}
}

// TestE2ELifecycleFlags: bad lifecycle flags stop the server before it
// starts, naming the flag.
func TestE2ELifecycleFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--non-voter"}, "Error: --non-voter: only a node that joins with --join can stay a non-voter"},
		{[]string{"--cleanup-dead-after", "5s"}, "Error: --cleanup-dead-after 5s: want 0 (never) or at least 10s"},
		{[]string{"--cleanup-dead-after", "-1s"}, "Error: --cleanup-dead-after -1s: want 0 (never) or at least 10s"},
		{[]string{"--log-store", "rocks"}, `Error: --log-store "rocks": want "bolt" or "wal"`},
		{[]string{"--restore-from", "b.snap", "--join", "127.0.0.1:1"}, "Error: --restore-from is for a node that founds a cluster alone"},
		{[]string{"--restore-from", "b.snap", "--peers", "n1=127.0.0.1:1=127.0.0.1:2"}, "Error: --restore-from is for a node that founds a cluster alone"},
		{[]string{"--found-empty", "--join", "127.0.0.1:1"}, "Error: --found-empty is for a node that founds a cluster (alone or with --peers)"},
		{[]string{"--found-empty", "--restore-from", "b.snap"}, "Error: --restore-from and --found-empty exclude each other"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			args := append([]string{"server", "--data-dir", dir, "--http-addr", freePort(t), "--raft-addr", freePort(t)}, tc.args...)
			_, stderr, code := rangealloc(t, "http://127.0.0.1:1", args...)
			assert.Equal(t, 1, code, stderr)
			assert.Contains(t, stderr, tc.want)
			for _, f := range []string{"raft.db", "wal", "log-store"} {
				_, err := os.Stat(filepath.Join(dir, f))
				assert.True(t, os.IsNotExist(err), "nothing written: %s", f)
			}
		})
	}
}

// TestE2EJoinedNodeRestartsWithoutItsJoinTarget: a node with state ignores
// --join (docs/OPERATIONS.md), so a node that joined through n1 restarts
// with its usual flags while n1 is gone for good, and with n3 is a
// majority again. The server used to read the cluster through --join's
// member before it opened the node, and never started while n1 was down.
func TestE2EJoinedNodeRestartsWithoutItsJoinTarget(t *testing.T) {
	t.Parallel()
	ps := newProcs(t, 1)
	n1 := ps[0]
	waitLeader(t, n1)
	dir := filepath.Dir(n1.dir)
	var joined []*proc
	for _, id := range []string{"n2", "n3"} {
		p := &proc{id: id, http: freePort(t), raft: freePort(t), dir: filepath.Join(dir, id), args: []string{"--join", n1.http}}
		p.start(t)
		waitVoter(t, n1, id)
		joined = append(joined, p)
	}
	n2, n3 := joined[0], joined[1]
	n1.stop(t) // gone for good
	waitLeader(t, n3)
	n2.stop(t)
	n2.start(t) // its usual flags, --join n1 among them
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n2.http+"/healthz", nil)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	}, 20*time.Second, 200*time.Millisecond, "n2, which has state, serves again while its --join target n1 is down")
	waitLeader(t, n2)
}
