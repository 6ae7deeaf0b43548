package test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestE2ELogStoreChoice: through the real binary, the log store chosen at
// the first start is recorded; a later --log-store naming the other one
// refuses to start and changes nothing; without the flag the recorded one
// is used. (A name that is no store: TestE2ELifecycleFlags.)
func TestE2ELogStoreChoice(t *testing.T) {
	t.Parallel()
	p := newProcsArgs(t, 1, "--log-store", "wal")[0]
	p.noEnvStore = true // the restart below has no --log-store
	waitLeader(t, p)
	ctx := ctxE(t)
	a, _, err := p.client().Allocate(ctx, "nodeport", "", "before", client.Options{})
	require.NoError(t, err)
	p.stop(t)
	record, err := os.ReadFile(filepath.Join(p.dir, "log-store"))
	require.NoError(t, err)
	assert.Equal(t, "wal\n", string(record))
	assert.DirExists(t, filepath.Join(p.dir, "wal"))
	assert.NoFileExists(t, filepath.Join(p.dir, "raft.db"))

	before := treeNames(t, p.dir)
	p.args = []string{"--log-store", "bolt"}
	exitsRefusing(t, p, 30*time.Second, "--log-store bolt, but "+filepath.Join(p.dir, "log-store")+" records wal")
	assert.Equal(t, before, treeNames(t, p.dir), "a refusal changes nothing")

	p.args = nil // the recorded store
	p.start(t)
	waitLeader(t, p)
	got, _, err := p.client().Get(ctx, "nodeport", a.Value, client.Options{})
	require.NoError(t, err)
	assert.Equal(t, "before", got.Owner)
}

// treeNames lists the paths under dir with their sizes.
func treeNames(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	require.NoError(t, filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		names = append(names, fmt.Sprintf("%s %d", path, fi.Size()))
		return nil
	}))
	sort.Strings(names)
	return names
}

// TestE2EKill9WAL: three nodes on the wal log store, writes going on
// through every node while the leader, then a follower, is killed with
// SIGKILL (a torn wal tail is the normal outcome) and started again. Each
// starts, and every acknowledged value is on every node.
func TestE2EKill9WAL(t *testing.T) {
	t.Parallel()
	ps := newProcsArgs(t, 3, "--log-store", "wal")
	leader := byID(ps, waitLeader(t, ps[0]))
	ctx := ctxE(t)
	var mu sync.Mutex
	acked := map[string]string{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				owner := fmt.Sprintf("w%d-%d", w, i)
				a, _, err := p.client().Allocate(ctx, "nodeport", "", owner, client.Options{IdempotencyKey: owner})
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				mu.Lock()
				acked[a.Value] = owner
				mu.Unlock()
			}
		}()
	}
	var follower *proc
	for _, p := range ps {
		if p != leader {
			follower = p
		}
	}
	for _, victim := range []*proc{leader, follower} {
		time.Sleep(700 * time.Millisecond)
		victim.kill9(t)
		time.Sleep(300 * time.Millisecond)
		victim.start(t)
		waitLeader(t, victim)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	require.NotEmpty(t, acked)
	for _, p := range ps {
		for v, owner := range acked {
			got, _, err := p.client().Get(ctx, "nodeport", v, client.Options{Consistency: "stale"})
			if err != nil { // not applied yet: ask through the leader
				got, _, err = p.client().Get(ctx, "nodeport", v, client.Options{})
			}
			require.NoError(t, err, "%s: acknowledged %s", p.id, v)
			assert.Equal(t, owner, got.Owner, "%s: %s", p.id, v)
		}
	}
	sameRangeAllocation(t, ps, "nodeport")
}
