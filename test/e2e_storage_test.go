package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exitsRefusing starts p and requires it to exit non-zero within d,
// printing "refusing to start" and want.
func exitsRefusing(t *testing.T, p *proc, d time.Duration, want string) {
	t.Helper()
	p.start(t)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		require.Error(t, err, "%s must exit non-zero; log:\n%s", p.id, p.log)
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-done
		t.Fatalf("%s still runs after %v; log:\n%s", p.id, d, p.log)
	}
	assert.Contains(t, p.log.String(), "refusing to start")
	assert.Contains(t, p.log.String(), want)
	assert.NotContains(t, p.log.String(), "goroutine ", "a message, not a Go panic trace")
}

// TestE2EStorageLoss: through the real binary, with the flags an operator
// uses. A follower whose data directory was emptied, and one whose
// raft.db was cut to nothing, refuse to start; every acknowledged value
// survives; the runbook (remove, empty, --join) brings the node back.
func TestE2EStorageLoss(t *testing.T) {
	ps := newProcs(t, 3)
	leader := byID(ps, waitLeader(t, ps[0]))
	ctx := ctxE(t)
	acked := map[string]string{}
	for i := 0; i < 30; i++ {
		owner := fmt.Sprintf("acked-%d", i)
		a, _, err := leader.client().Allocate(ctx, "nodeport", "", owner, client.Options{IdempotencyKey: owner})
		require.NoError(t, err)
		acked[a.Value] = owner
	}
	var fs []*proc
	for _, p := range ps {
		if p != leader {
			fs = append(fs, p)
		}
	}
	for _, f := range fs { // both have applied what was acknowledged
		require.Eventually(t, func() bool {
			_, _, err := f.client().Get(ctx, "nodeport", firstKey(acked), client.Options{Consistency: "stale"})
			return err == nil
		}, 10*time.Second, 50*time.Millisecond)
	}

	// A follower whose data directory was emptied, started with its usual
	// flags, then the runbook; then one whose raft.db was cut to nothing.
	damage := []struct {
		name   string
		damage func(p *proc)
		says   string
	}{
		{"data directory emptied", func(p *proc) { require.NoError(t, os.RemoveAll(p.dir)) }, "is a voter of cluster"},
		{"raft.db truncated", func(p *proc) { require.NoError(t, os.Truncate(filepath.Join(p.dir, "raft.db"), 0)) },
			"raft.db: empty (0 bytes), but this data directory has held Raft state"},
	}
	for i, d := range damage {
		p := fs[i]
		p.kill9(t)
		d.damage(p)
		exitsRefusing(t, p, 30*time.Second, d.says)

		_, stderr, code := rangealloc(t, "http://"+leader.http, "cluster", "remove", p.id)
		require.Equal(t, 0, code, "%s: remove: %s", d.name, stderr)
		require.NoError(t, os.RemoveAll(p.dir))
		p.args = []string{"--join", leader.http}
		p.start(t)
		require.Eventually(t, func() bool {
			st, err := leader.client().Cluster(ctx)
			if err != nil {
				return false
			}
			for _, m := range st.Members {
				if m.ID == p.id {
					return m.Voter
				}
			}
			return false
		}, 30*time.Second, 100*time.Millisecond, "%s: %s is a voter again", d.name, p.id)
	}
	for v, owner := range acked {
		got, _, err := fs[0].client().Get(ctx, "nodeport", v, client.Options{})
		require.NoError(t, err, "acknowledged %s", v)
		assert.Equal(t, owner, got.Owner)
	}
	var want []byte
	for _, p := range ps {
		require.Eventually(t, func() bool {
			ra, err := p.client().RangeAllocation(ctx, "nodeport", client.Options{Consistency: "stale"})
			if err != nil {
				return false
			}
			if want == nil {
				want = ra.Data
			}
			return string(ra.Data) == string(want)
		}, 20*time.Second, 100*time.Millisecond, "%s holds the same RangeAllocation", p.id)
	}
}

func firstKey(m map[string]string) string {
	for k := range m {
		return k
	}
	return ""
}

// TestE2EMistakenJoin: a node started on its own, then added to a cluster
// with `rangealloc cluster join`, is refused with NodeNotEmpty and the
// membership is unchanged.
func TestE2EMistakenJoin(t *testing.T) {
	ps := newProcs(t, 3)
	waitLeader(t, ps[0])
	bare := newProcs(t, 1)[0] // founds a cluster of its own
	waitLeader(t, bare)
	addr := "http://" + ps[1].http
	before, _, code := rangealloc(t, addr, "cluster", "-o", "json")
	require.Equal(t, 0, code)
	_, stderr, code := rangealloc(t, addr, "cluster", "join", "n1", bare.raft, bare.http)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "Error: NodeNotEmpty: node n1 at "+bare.raft+" holds state of another cluster")
	after, _, code := rangealloc(t, addr, "cluster", "-o", "json")
	require.Equal(t, 0, code)
	assert.Equal(t, memberIDs(before), memberIDs(after), "membership unchanged")
}

func memberIDs(clusterJSON string) string {
	var ids []string
	for _, line := range strings.Split(clusterJSON, "\n") {
		if strings.Contains(line, `"raftAddr"`) {
			ids = append(ids, strings.TrimSpace(line))
		}
	}
	return strings.Join(ids, "\n")
}
