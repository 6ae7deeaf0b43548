package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/storage"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"
)

// threeNodes starts a cluster of three voters a, b and c, and returns
// them with their configurations.
func threeNodes(t *testing.T) ([]*Node, []Config) {
	t.Helper()
	return threeNodesOf(t, "")
}

// threeNodesOf is threeNodes on the given log store ("" as testConfig
// picks).
func threeNodesOf(t *testing.T, store string) ([]*Node, []Config) {
	t.Helper()
	root := t.TempDir()
	var cfgs []Config
	var peers []Peer
	for _, id := range []string{"a", "b", "c"} {
		cfg := testConfig(t, filepath.Join(root, id))
		cfg.ID = id
		if store != "" {
			cfg.LogStore = store
		}
		cfgs = append(cfgs, cfg)
		peers = append(peers, Peer{ID: id, RaftAddr: cfg.RaftAddr})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nodes := make([]*Node, 3)
	errs := make(chan error, 3)
	for i := range cfgs {
		cfgs[i].Peers = peers
		go func(i int) {
			var err error
			nodes[i], err = Open(ctx, cfgs[i])
			errs <- err
		}(i)
	}
	for range cfgs {
		require.NoError(t, <-errs)
	}
	for _, n := range nodes {
		t.Cleanup(func() { _ = n.Halt() })
	}
	require.Eventually(t, func() bool {
		ps, err := nodes[0].Pools(ctx, Linearizable)
		return err == nil && len(ps) == 2
	}, 20*time.Second, 20*time.Millisecond, "bootstrap pools")
	return nodes, cfgs
}

// caughtUp waits until n has applied everything the leader among nodes
// has committed: every write acknowledged so far.
func caughtUp(t *testing.T, n *Node, nodes []*Node) {
	t.Helper()
	var commit atomic.Uint64 // the condition runs on a goroutine of its own
	require.Eventually(t, func() bool {
		for _, o := range nodes {
			if o.IsLeader() {
				commit.Store(o.raft.CommitIndex())
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "a leader")
	require.Eventually(t, func() bool { return n.AppliedIndex() >= commit.Load() }, 10*time.Second, 10*time.Millisecond)
}

// dirDigest returns the SHA-256 of every file under dir, by path; of
// raft.db (and of the wal's bbolt file), that of its buckets' keys and
// values: opening it for writing,
// as every start does, commits a transaction that changes its bytes and
// nothing it holds.
func dirDigest(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if d.Name() == storage.BoltFile || d.Name() == "wal-meta.db" {
			out[path] = boltDigest(t, path)
			return nil
		}
		b, err := os.ReadFile(path)
		out[path] = sha256.Sum256(b)
		return err
	}))
	return out
}

func boltDigest(t *testing.T, path string) [32]byte {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	require.NoError(t, err)
	defer db.Close()
	h := sha256.New()
	require.NoError(t, db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			h.Write(name)
			return b.ForEach(func(k, v []byte) error {
				h.Write(k)
				h.Write(v)
				return nil
			})
		})
	}))
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// TestRecoverKeepsEveryEntry: a node of three whose two peers are gone is
// recovered as the only voter. Its allocations, some in a snapshot and
// some only in the log, are all there when it starts again, alone and
// writable, and a dry run before changed nothing.
func TestRecoverKeepsEveryEntry(t *testing.T) {
	for _, store := range []string{LogStoreBolt, storage.LogStoreWAL} {
		t.Run(store, func(t *testing.T) { testRecoverKeepsEveryEntry(t, store) })
	}
}

func testRecoverKeepsEveryEntry(t *testing.T, store string) {
	nodes, cfgs := threeNodesOf(t, store)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := nodes[0]
	var acked []fsm.Allocation
	allocate := func(n int) {
		for i := 0; i < n; i++ {
			got, err := a.Allocate(ctx, "nodeport", "", fmt.Sprintf("owner-%d", len(acked)), 0, "")
			require.NoError(t, err)
			acked = append(acked, got...)
		}
	}
	allocate(30)
	caughtUp(t, a, nodes)
	require.NoError(t, a.Snapshot())
	allocate(30) // only in the log
	caughtUp(t, a, nodes)
	applied := a.AppliedIndex()
	for _, n := range nodes {
		require.NoError(t, n.Halt())
	}

	members := []Peer{{ID: "a", RaftAddr: cfgs[0].RaftAddr, APIAddr: "127.0.0.1:7080"}}
	before := dirDigest(t, cfgs[0].DataDir)
	dry, err := Recover(RecoverConfig{DataDir: cfgs[0].DataDir, Members: members, DryRun: true})
	require.NoError(t, err)
	assert.Equal(t, before, dirDigest(t, cfgs[0].DataDir), "a dry run changes nothing")

	res, err := Recover(RecoverConfig{DataDir: cfgs[0].DataDir, Members: members})
	require.NoError(t, err)
	assert.Equal(t, "a", res.ID)
	want := []ConfigServer{{ID: "a", RaftAddr: cfgs[0].RaftAddr, Voter: true}, {ID: "b", RaftAddr: cfgs[1].RaftAddr, Voter: true},
		{ID: "c", RaftAddr: cfgs[2].RaftAddr, Voter: true}}
	assert.Equal(t, want, res.Old)
	assert.Equal(t, want[:1], res.New)
	assert.Equal(t, []string{"b", "c"}, res.Dropped)
	assert.Empty(t, res.Warnings)
	assert.GreaterOrEqual(t, res.LastIndex, applied, "every applied entry is kept")
	assert.Equal(t, dry.LastIndex, res.LastIndex, "the dry run reports what is kept")
	assert.Equal(t, dry.New, res.New)

	n := openReady(t, cfgs[0]) // its usual configuration still names b and c: the recovered state wins
	st, err := n.Cluster()
	require.NoError(t, err)
	require.Len(t, st.Members, 1)
	assert.Equal(t, "a", st.LeaderID)
	for _, al := range acked {
		got, err := n.Get(ctx, Linearizable, al.Pool, al.Value)
		require.NoError(t, err, "%s survives", al.Value)
		assert.Equal(t, al.Owner, got.Owner)
	}
	got, err := n.Allocate(ctx, "nodeport", "", "after-recover", 0, "")
	require.NoError(t, err)
	for _, al := range acked {
		assert.NotEqual(t, al.Value, got[0].Value, "no value handed out twice")
	}
}

// TestRecoverRefuses: each input Recover cannot act on is refused with an
// error naming it, and the data directory is unchanged.
func TestRecoverRefuses(t *testing.T) {
	nodes, cfgs := threeNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := nodes[0].Allocate(ctx, "nodeport", "", "x", 0, "")
	require.NoError(t, err)
	running := cfgs[2].DataDir // c keeps running
	require.NoError(t, nodes[1].Halt())
	stopped := cfgs[1].DataDir // b
	empty := t.TempDir()
	noState := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(noState, "node-id"), []byte("z\n"), 0o600))
	self := func(id string, cfg Config) []Peer { return []Peer{{ID: id, RaftAddr: cfg.RaftAddr}} }

	cases := []struct {
		name    string
		dir     string
		members []Peer
		says    string
	}{
		{"running node", running, self("c", cfgs[2]), "is in use: a node is running"},
		{"empty directory", empty, []Peer{{ID: "z", RaftAddr: "127.0.0.1:1"}}, "node-id does not exist"},
		{"no state", noState, []Peer{{ID: "z", RaftAddr: "127.0.0.1:1"}}, "holds no Raft state"},
		{"members without this node", stopped, self("a", cfgs[0]), `the members do not name this node, "b"`},
		{"no members", stopped, nil, "no members given"},
		{"an ID twice", stopped, append(self("b", cfgs[1]), self("b", cfgs[1])...), `member ID "b" appears twice`},
		{"Raft address without a port", stopped, []Peer{{ID: "b", RaftAddr: "127.0.0.1"}}, `Raft address "127.0.0.1"`},
		{"Raft port out of range", stopped, []Peer{{ID: "b", RaftAddr: "127.0.0.1:70000"}}, `port "70000"`},
		{"HTTP address of another scheme", stopped, []Peer{{ID: "b", RaftAddr: cfgs[1].RaftAddr, APIAddr: "ftp://h:1"}}, `scheme "ftp"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before map[string][32]byte
			if c.dir != running { // a running node writes as it goes
				before = dirDigest(t, c.dir)
			}
			_, err := Recover(RecoverConfig{DataDir: c.dir, Members: c.members})
			require.ErrorIs(t, err, ErrRecoverRefused)
			assert.Contains(t, err.Error(), c.says)
			if before != nil {
				assert.Equal(t, before, dirDigest(t, c.dir), "nothing changed")
			}
		})
	}
	// The running node still serves, and the stopped one still starts in
	// its old configuration.
	_, err = nodes[2].Allocate(ctx, "nodeport", "", "y", 0, "")
	require.NoError(t, err)
	b, err := Open(ctx, cfgs[1])
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.Eventually(t, func() bool {
		st, err := b.Cluster()
		return err == nil && len(st.Members) == 3 && st.LeaderID != ""
	}, 10*time.Second, 20*time.Millisecond, "b is back in its three-voter cluster")
}

// TestStaleBackupWithoutLeader: a node whose two peers are gone has no
// leader; a stale backup still answers at once with every value it
// applied, where a linearizable one fails with ErrNoLeader.
func TestStaleBackupWithoutLeader(t *testing.T) {
	nodes, _ := threeNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var acked []fsm.Allocation
	for i := 0; i < 20; i++ {
		got, err := nodes[0].Allocate(ctx, "nodeport", "", fmt.Sprintf("owner-%d", i), 0, "")
		require.NoError(t, err)
		acked = append(acked, got...)
	}
	survivor := nodes[2]
	caughtUp(t, survivor, nodes)
	require.NoError(t, nodes[0].Halt())
	require.NoError(t, nodes[1].Halt())
	require.Eventually(t, func() bool {
		addr, _ := survivor.raft.LeaderWithID()
		return addr == ""
	}, 10*time.Second, 20*time.Millisecond, "the survivor knows no leader")

	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	var buf bytesBuffer
	require.ErrorIs(t, survivor.BackupAt(short, Linearizable, &buf), ErrNoLeader)
	require.NoError(t, survivor.BackupAt(ctx, Stale, &buf))
	restored := fsm.New(nil)
	require.NoError(t, restored.Restore(io.NopCloser(bytes.NewReader(buf.b))))
	for _, al := range acked {
		got, err := restored.Get(al.Pool, al.Value)
		require.NoError(t, err, "the backup holds %s", al.Value)
		assert.Equal(t, al.Owner, got.Owner)
	}
}
