package test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/require"
)

// TestTruncatedTailRestart: a leader appends entries that reach no
// follower (every message it sends is lost), is killed, and the others
// elect a leader and write on. The old leader starts again and follows:
// Raft truncates its log's tail ("clearing log suffix"). It must then
// start again, and again, with every acknowledged value. raft-wal before
// v0.4.1 sealed a segment without its index on a tail truncation and
// refused to open it afterwards ("sealed segment has no index block").
func TestTruncatedTailRestart(t *testing.T) { forEachLogStore(t, truncatedTailRestart) }

func truncatedTailRestart(t *testing.T, store string) {
	c := cluster.New(t, 3, cluster.Options{Pools: testPools, LogStore: store})
	waitPools(t, c)
	ctx := ctxT(t, 60*time.Second)
	l := c.Leader()
	acked := allocateAcked(ctx, t, l.Node, 20)
	// The leader appends alone: every message it sends is lost. A write
	// it acknowledges anyway (it lost leadership first and forwarded it)
	// is kept with the others. Tried again until the leader appended at
	// least one entry alone.
	var rest []int
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, 10, "the leader never appended an entry alone")
		l = c.Leader()
		rest = rest[:0]
		for _, m := range c.Members {
			if m != l {
				rest = append(rest, m.Index)
				c.Faults.Drop(raft.ServerAddress(l.Addr), raft.ServerAddress(m.Addr), 1)
			}
		}
		for i := 0; i < 3 && l.Node.IsLeader(); i++ {
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			owner := fmt.Sprintf("alone-%d-%d", attempt, i)
			got, err := l.Node.Allocate(short, "ip", "", owner, 0, owner)
			cancel()
			if err == nil {
				acked[got[0].Value] = owner
			}
		}
		st := l.Node.Stats()
		last, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
		commit, _ := strconv.ParseUint(st["commit_index"], 10, 64)
		if last > commit {
			break
		}
		c.Heal()
	}
	c.Kill(l.Index)
	c.Heal()
	nl := c.LeaderAmong(rest...)
	for i := 0; i < 20; i++ {
		owner := fmt.Sprintf("after-%d", i)
		got, err := nl.Node.Allocate(ctx, "ip", "", owner, 0, owner)
		require.NoError(t, err)
		acked[got[0].Value] = owner
	}

	logs := &lockedBuffer{}
	cfg := c.Config(l.Index)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: l.ID, Level: hclog.Warn, Output: logs})
	c.SetConfig(l.Index, cfg)
	c.Start(l.Index)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "clearing log suffix") },
		20*time.Second, 20*time.Millisecond, "the old leader truncates its log's tail to follow the new leader")
	for i := 0; i < 2; i++ {
		c.Restart(l.Index) // fails the test if the node refuses to start
		c.Leader()
	}
	c.EnsureSame(t)
	requireAcked(ctx, t, c.Members[l.Index].Node, acked)
}
