package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ackedValue is an acknowledged allocation: its pool and owner, by value.
type ackedValue struct{ pool, owner string }

// TestE2ERecoverFromQuorumLoss runs the runbook "Losing two of three
// nodes" through the real binary: three nodes, 300 acknowledged
// allocations, two nodes killed and their data directories deleted. The
// survivor's stale backup holds every acknowledged value; recover on the
// stopped survivor; restarted with its usual flags it is writable within
// 10 s and holds every value with its owner. Two fresh nodes, with the
// lost nodes' IDs and addresses and empty data directories, join with
// --join and become voters; then the cluster stays writable with any one
// node killed, and no value is handed out twice.
func TestE2ERecoverFromQuorumLoss(t *testing.T) {
	t.Parallel()
	ps := newProcs(t, 3)
	leader := byID(ps, waitLeader(t, ps[0]))
	ctx := ctxE(t)
	acked := map[string]ackedValue{}
	for i := 0; i < 300; i++ {
		pool, owner := []string{"clusterip-ipv4", "nodeport"}[i%2], fmt.Sprintf("default/svc-%d", i)
		a, _, err := ps[i%3].client().Allocate(ctx, pool, "", owner, client.Options{IdempotencyKey: owner})
		require.NoError(t, err)
		acked[a.Value] = ackedValue{pool, owner}
	}
	var s *proc // the survivor: a follower
	for _, p := range ps {
		if p != leader {
			s = p
		}
	}
	var commit uint64 // the highest commit index: every acknowledged write
	for _, p := range ps {
		st, err := p.client().Cluster(ctx)
		require.NoError(t, err)
		commit = max(commit, st.CommitIndex)
	}
	require.Eventually(t, func() bool { // the survivor applied every acknowledged write
		st, err := s.client().Cluster(ctx)
		return err == nil && st.AppliedIndex >= commit
	}, 20*time.Second, 50*time.Millisecond)
	var lost []*proc
	for _, p := range ps {
		if p != s {
			p.kill9(t)
			require.NoError(t, os.RemoveAll(p.dir))
			lost = append(lost, p)
		}
	}

	// Step 1 of the runbook: stop the survivor and copy its data directory.
	s.stop(t)
	saved := s.dir + ".before-recover"
	cp, err := exec.Command("cp", "-a", s.dir, saved).CombinedOutput()
	require.NoError(t, err, "cp -a: %s", cp)
	_, err = os.Stat(filepath.Join(saved, "state"))
	require.NoError(t, err, "the copy holds the node's state")

	// Step 3: recover it as the only voter, and start it as usual.
	out, stderr, code := rangealloc(t, "", "recover", "--data-dir", s.dir, "--members", fmt.Sprintf("%s=%s=%s", s.id, s.raft, s.http))
	require.Equal(t, 0, code, "recover: %s%s", out, stderr)
	t.Logf("rangealloc recover:\n%s", out)
	for _, want := range []string{"recovered node " + s.id, "old configuration:", "new configuration:", "last entry kept: index ",
		"left out: " + lost[0].id + ", " + lost[1].id} {
		assert.Contains(t, out, want)
	}
	s.start(t)
	require.Eventually(t, func() bool {
		_, _, err := s.client().Allocate(ctx, "nodeport", "", "after-recover", client.Options{IdempotencyKey: "after-recover"})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the survivor is writable within 10 s of its restart")
	requireServes(t, s, acked)
	// Step 4: a backup of the survivor, which has applied every entry it kept.
	backup := filepath.Join(t.TempDir(), "survivor.snap")
	out, stderr, code = rangealloc(t, "http://"+s.http, "snapshot", "save", backup)
	require.Equal(t, 0, code, "backup of the survivor: %s%s", out, stderr)
	requireHolds(t, backup, acked)

	// Step 5: the lost nodes, emptied, join again under their old IDs.
	for _, p := range lost {
		p.args = []string{"--join", s.http}
		p.start(t)
	}
	for _, p := range lost {
		waitVoter(t, s, p.id)
	}
	cst, err := s.client().Cluster(ctx)
	require.NoError(t, err)
	require.Len(t, cst.Members, 3)

	// It tolerates one failure again: with any one node killed, a write
	// goes through another.
	for i, down := range ps {
		down.kill9(t)
		up := ps[(i+1)%3]
		owner := fmt.Sprintf("default/with-%s-down", down.id)
		var got string
		require.Eventually(t, func() bool {
			a, _, err := up.client().Allocate(ctx, "nodeport", "", owner, client.Options{IdempotencyKey: owner})
			got = a.Value
			return err == nil
		}, 20*time.Second, 100*time.Millisecond, "writable with %s down", down.id)
		assert.NotContains(t, acked, got, "no acknowledged value is handed out again")
		down.start(t)
		waitReady(t, down)
	}
	requireServes(t, ps[1], acked)
	sameRangeAllocation(t, ps, "nodeport")
}

// requireHolds checks that the backup in file holds every acknowledged value.
func requireHolds(t *testing.T, file string, acked map[string]ackedValue) {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	f := fsm.New(nil)
	require.NoError(t, f.Restore(io.NopCloser(bytes.NewReader(data))))
	for v, a := range acked {
		got, err := f.Get(a.pool, v)
		require.NoError(t, err, "the backup holds %s", v)
		assert.Equal(t, a.owner, got.Owner, "owner of %s", v)
	}
}

// requireServes checks, with linearizable reads through p, that every
// acknowledged value is held by its owner.
func requireServes(t *testing.T, p *proc, acked map[string]ackedValue) {
	t.Helper()
	for v, a := range acked {
		got, _, err := p.client().Get(ctxE(t), a.pool, v, client.Options{})
		require.NoError(t, err, "acknowledged %s", v)
		assert.Equal(t, a.owner, got.Owner, "owner of %s", v)
	}
}

// waitReady waits until p answers /readyz with 200.
func waitReady(t *testing.T, p *proc) {
	t.Helper()
	require.Eventually(t, func() bool {
		ok, _, err := p.client().Ready(context.Background())
		return err == nil && ok
	}, 30*time.Second, 100*time.Millisecond, "%s is ready", p.id)
}

// TestE2ERecoverRefuses: recover refuses a running node's data directory,
// an empty one, and members that leave the node out, each with a message
// naming the problem; afterwards the node starts in its old three-voter
// configuration.
func TestE2ERecoverRefuses(t *testing.T) {
	t.Parallel()
	ps := newProcs(t, 3)
	waitLeader(t, ps[0])
	p := ps[0]
	self := fmt.Sprintf("%s=%s=%s", p.id, p.raft, p.http)
	cases := []struct {
		name, dir, members, says string
		stopped                  bool
	}{
		{"running node", p.dir, self, "is in use: a node is running", false},
		{"empty data directory", t.TempDir(), self, "node-id does not exist", true},
		{"members without the node", p.dir, fmt.Sprintf("%s=%s=%s", ps[1].id, ps[1].raft, ps[1].http),
			`the members do not name this node, "` + p.id + `"`, true},
		{"a member without a Raft port", p.dir, p.id + "=127.0.0.1=" + p.http, `Raft address "127.0.0.1"`, true},
	}
	for _, c := range cases {
		if c.stopped && p.cmd.ProcessState == nil {
			p.stop(t)
		}
		out, stderr, code := rangealloc(t, "", "recover", "--data-dir", c.dir, "--members", c.members)
		assert.Equal(t, 1, code, "%s: %s", c.name, out)
		assert.Contains(t, stderr, "Error: recover refused: ", c.name)
		assert.Contains(t, stderr, c.says, c.name)
	}
	p.start(t)
	waitReady(t, p)
	st, err := p.client().Cluster(ctxE(t))
	require.NoError(t, err)
	var voters []string
	for _, m := range st.Members {
		if m.Voter {
			voters = append(voters, m.ID)
		}
	}
	assert.Equal(t, "n1 n2 n3", strings.Join(voters, " "), "the old configuration")
}
