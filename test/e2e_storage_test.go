package test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/node"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
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
// uses. A follower's data directory is damaged in each way below and the
// node started with its usual flags: it must exit non-zero naming the
// file and the reason, never with a Go panic trace (each damage is then
// undone from a copy). Last, a follower whose directory was emptied
// refuses, and the runbook (remove, empty, --join) brings it back. Every
// acknowledged value survives, and the replicas agree.
func TestE2EStorageLoss(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, testE2EStorageLoss)
}

func testE2EStorageLoss(t *testing.T, store string) {
	ps := newProcsArgs(t, 3, "--log-store", store, "--snapshot-threshold", "16", "--snapshot-interval", "200ms", "--trailing-logs", "4")
	leader := byID(ps, waitLeader(t, ps[0]))
	ctx := ctxE(t)
	acked := map[string]string{}
	for i := 0; i < 60; i++ {
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
	f := fs[0]
	require.Eventually(t, func() bool { // it applied everything and took a snapshot
		snaps, _ := filepath.Glob(filepath.Join(f.dir, "snapshots", "*", "state.bin"))
		_, _, err := f.client().Get(ctx, "nodeport", lastKey(acked), client.Options{Consistency: "stale"})
		return err == nil && len(snaps) > 0
	}, 20*time.Second, 100*time.Millisecond)
	f.stop(t)
	saved := filepath.Join(t.TempDir(), "saved")
	require.NoError(t, os.CopyFS(saved, os.DirFS(f.dir)))
	newest := func() string { return newestSnapshotState(t, f.dir) }
	type damage struct {
		name   string
		damage func()
		says   string
	}
	damages := []damage{
		{"raft.db truncated", func() { require.NoError(t, os.Truncate(filepath.Join(f.dir, "raft.db"), 0)) },
			"raft.db: empty (0 bytes), but this data directory has held Raft state"},
		{"raft.db cut to half", func() {
			path := filepath.Join(f.dir, "raft.db")
			require.NoError(t, os.Truncate(path, boltInUse(t, path)/2))
		}, "raft.db: corrupt bolt file"},
	}
	if store == node.LogStoreWAL {
		segment := func() string {
			segs, err := filepath.Glob(filepath.Join(f.dir, "wal", "*.wal"))
			require.NoError(t, err)
			require.NotEmpty(t, segs)
			return segs[len(segs)-1]
		}
		damages = []damage{
			{"wal deleted", func() { require.NoError(t, os.RemoveAll(filepath.Join(f.dir, "wal"))) },
				"wal: missing, but this data directory has held Raft state"},
			{"wal metadata deleted", func() { require.NoError(t, os.Remove(filepath.Join(f.dir, "wal", "wal-meta.db"))) },
				"wal-meta.db: missing, but this data directory has held Raft state"},
			{"wal segment cut short", func() { require.NoError(t, os.Truncate(segment(), 4096)) },
				"segment file cut short"},
		}
	}
	damages = append(damages, []damage{
		{"a snapshot byte flipped", func() {
			b, err := os.ReadFile(newest())
			require.NoError(t, err)
			b[len(b)/2] ^= 0x10
			require.NoError(t, os.WriteFile(newest(), b, 0o600))
		}, "state.bin: snapshot fails its checksum"},
		{"snapshots deleted", func() { require.NoError(t, os.RemoveAll(filepath.Join(f.dir, "snapshots"))) },
			"no snapshot holds the entries before it"},
	}...)
	for _, d := range damages {
		d.damage()
		exitsRefusing(t, f, 30*time.Second, d.says)
		require.NoError(t, os.RemoveAll(f.dir))
		require.NoError(t, os.CopyFS(f.dir, os.DirFS(saved)))
	}
	f.start(t) // undamaged, it starts and catches up
	require.Eventually(t, func() bool {
		r, err := http.Get("http://" + f.http + "/readyz")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "%s is ready again", f.id)

	// An emptied data directory, then the runbook.
	f.kill9(t)
	require.NoError(t, os.RemoveAll(f.dir))
	exitsRefusing(t, f, 30*time.Second, "is a voter of cluster")
	_, stderr, code := rangealloc(t, "http://"+leader.http, "cluster", "remove", f.id)
	require.Equal(t, 0, code, "remove: %s", stderr)
	require.NoError(t, os.RemoveAll(f.dir))
	f.args = []string{"--join", leader.http}
	f.start(t)
	waitVoter(t, leader, f.id)
	for v, owner := range acked {
		got, _, err := f.client().Get(ctx, "nodeport", v, client.Options{})
		require.NoError(t, err, "acknowledged %s", v)
		assert.Equal(t, owner, got.Owner)
	}
	sameRangeAllocation(t, ps, "nodeport")
}

// boltInUse returns how many bytes of the bolt file at path hold pages
// (its high-water mark). bolt grows a file ahead of its pages, so half
// the file's size can lie beyond every page in use: a file cut there is
// whole, and a node serves from it, as it should.
func boltInUse(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	require.NoError(t, err)
	defer db.Close()
	var size int64
	require.NoError(t, db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }))
	return size
}

// newestSnapshotState returns the state.bin of the snapshot in dataDir
// with the highest term, index and time. Their directories are named
// <term>-<index>-<ms>, so the last in lexical order is not the newest
// once the index gains a digit ("2-96-…" sorts after "2-112-…").
func newestSnapshotState(t *testing.T, dataDir string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "snapshots"))
	require.NoError(t, err)
	var best string
	var bestKey [3]uint64
	for _, e := range entries {
		parts := strings.Split(e.Name(), "-")
		if !e.IsDir() || len(parts) != 3 {
			continue // a snapshot being written ends in .tmp
		}
		var key [3]uint64
		ok := true
		for i, p := range parts {
			v, err := strconv.ParseUint(p, 10, 64)
			ok = ok && err == nil
			key[i] = v
		}
		if ok && (best == "" || slices.Compare(key[:], bestKey[:]) > 0) {
			best, bestKey = e.Name(), key
		}
	}
	require.NotEmpty(t, best, "a snapshot in %s", dataDir)
	return filepath.Join(dataDir, "snapshots", best, "state.bin")
}

// TestE2EReimagedNode is the re-imaged node of an appliance: three nodes,
// B killed, 200 allocations acknowledged by the leader L and follower A,
// L and A killed, A's data directory emptied, A and B started with their
// usual flags. A must refuse; when L returns, all 200 values are there.
func TestE2EReimagedNode(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, testE2EReimagedNode)
}

func testE2EReimagedNode(t *testing.T, store string) {
	ps := newProcsArgs(t, 3, "--log-store", store)
	l := byID(ps, waitLeader(t, ps[0]))
	var a, b *proc
	for _, p := range ps {
		switch {
		case p == l:
		case b == nil:
			b = p
		default:
			a = p
		}
	}
	ctx := ctxE(t)
	b.kill9(t)
	acked := map[string]string{}
	for i := 0; i < 200; i++ {
		owner := fmt.Sprintf("acked-%d", i)
		got, _, err := l.client().Allocate(ctx, "clusterip-ipv4", "", owner, client.Options{IdempotencyKey: owner})
		require.NoError(t, err)
		acked[got.Value] = owner
	}
	l.kill9(t)
	a.kill9(t)
	require.NoError(t, os.RemoveAll(a.dir))
	b.start(t)
	exitsRefusing(t, a, 30*time.Second, "is a voter of cluster")
	l.start(t)
	waitLeader(t, b)
	for v, owner := range acked {
		got, _, err := b.client().Get(ctx, "clusterip-ipv4", v, client.Options{})
		require.NoError(t, err, "acknowledged %s", v)
		assert.Equal(t, owner, got.Owner)
	}
	got, _, err := b.client().Allocate(ctx, "clusterip-ipv4", "", "after", client.Options{})
	require.NoError(t, err)
	assert.NotContains(t, acked, got.Value, "no acknowledged value is handed out again")
}

// waitVoter waits until the cluster, asked through p, has member id as a voter.
func waitVoter(t *testing.T, p *proc, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := p.client().Cluster(ctxE(t))
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if m.ID == id {
				return m.Voter
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "%s is a voter", id)
}

// sameRangeAllocation waits until every node holds the bitmap of pool
// that a linearizable read returns, once no write is going on.
func sameRangeAllocation(t *testing.T, ps []*proc, pool string) {
	t.Helper()
	var want []byte
	require.Eventually(t, func() bool {
		for _, p := range ps {
			if ra, err := p.client().RangeAllocation(ctxE(t), pool, client.Options{}); err == nil {
				want = ra.Data
				return true
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "a linearizable read of the RangeAllocation of %s", pool)
	for _, p := range ps {
		require.Eventually(t, func() bool {
			ra, err := p.client().RangeAllocation(ctxE(t), pool, client.Options{Consistency: "stale"})
			return err == nil && string(ra.Data) == string(want)
		}, 20*time.Second, 100*time.Millisecond, "%s holds the same RangeAllocation of %s", p.id, pool)
	}
}

func lastKey(m map[string]string) string {
	k := ""
	for v := range m {
		k = max(k, v)
	}
	return k
}

// TestE2EMistakenJoin: a node started on its own, then added to a cluster
// with `rangealloc cluster join`, is refused with NodeNotEmpty and the
// membership is unchanged.
func TestE2EMistakenJoin(t *testing.T) {
	t.Parallel()
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

// TestE2EBootstrapping: a founder whose peers have not started yet serves
// HTTP and says why it is not ready; writes get 503 NoLeader.
func TestE2EBootstrapping(t *testing.T) {
	t.Parallel()
	p := &proc{id: "n1", http: freePort(t), raft: freePort(t), dir: filepath.Join(t.TempDir(), "n1")}
	p.args = []string{"--peers", fmt.Sprintf("n1=%s=%s,n2=%s=%s,n3=%s=%s", p.raft, p.http, freePort(t), freePort(t), freePort(t), freePort(t))}
	p.start(t)
	var body string
	require.Eventually(t, func() bool {
		r, err := http.Get("http://" + p.http + "/readyz")
		if err != nil {
			return false
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		return r.StatusCode == http.StatusServiceUnavailable
	}, 10*time.Second, 50*time.Millisecond)
	assert.Contains(t, body, `"reason":"bootstrapping"`)
	r, err := http.Get("http://" + p.http + "/healthz")
	require.NoError(t, err)
	r.Body.Close()
	assert.Equal(t, http.StatusOK, r.StatusCode)
	_, _, err = p.client().Allocate(ctxE(t), "nodeport", "", "too-early", client.Options{})
	var ce *client.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "NoLeader", ce.Code)
	assert.Equal(t, http.StatusServiceUnavailable, ce.Status)
}
