package node

import (
	"time"

	"github.com/rangealloc/rangealloc/node/internal/storage"
)

// A stalled disk: a write to the Raft log or stable store that has not
// returned within Config.DiskStallTimeout.
//
// hashicorp/raft's leader stores each batch of entries on its own disk
// from its leader loop, before it replicates them. When that write blocks,
// the loop blocks, and so does every write of the cluster; but the
// leader's heartbeats come from other goroutines and go on, so the
// followers never time out and never elect another leader
// (hashicorp/raft#503). etcd does not have this problem: its heartbeats
// come from the loop that writes its WAL, so a stalled disk silences them.
//
// A node does the same here. While a store write is older than the
// timeout, the node sends no Raft message at all: the Mux closes every
// Raft connection this node dialed and refuses new ones (HoldRaft). Its
// followers hear nothing, elect a leader among themselves, and writes
// resume within the timeout plus an election. Raft messages that other
// nodes send to this one still arrive, and its answers still leave.
//
// The write that stalled is never abandoned: it is still running when
// the node holds its messages, and Raft waits for it as it always does.
// When it returns, the node lets its messages out again; Raft carries on
// from where it was, learns the new term from the first answer it gets,
// and steps down. The entries it appended alone were never replicated,
// so never committed, and the new leader's log overwrites them as it
// would any follower's uncommitted tail. Nothing is lost and nothing is
// applied twice, because Raft's view of its log never differs from the
// disk's.
//
// Timing out the write instead (returning an error to Raft while the
// write goes on) makes Raft step down at once, but the abandoned write
// may still land later: Raft then believes its log ends before entries
// the disk holds, and raft-wal refuses the next append as out of order.
// That is what the node avoids.
//
// /readyz says disk_stalled meanwhile; rangealloc_disk_stalls_total
// counts the stalls. A follower's stalled disk stops nothing: the other
// two nodes commit without it.

// stallLoop watches the store's writes, and holds this node's Raft
// messages while one is stalled.
func (g *diskGuard) stallLoop() {
	timeout := g.stallTimeout
	t := time.NewTicker(storage.StallCheckEvery(timeout))
	defer t.Stop()
	for {
		var now time.Time
		select {
		case <-g.shutdown:
			return
		case now = <-t.C:
		}
		switch tr, d := g.stall.Check(now, timeout); tr {
		case storage.StallBegan:
			g.handOffForStall(stallHandOffWait)
			g.holdRaft(true)
			g.logger.Error("disk stalled: a write to the Raft log store has not returned; this node sends no Raft message "+
				"until it does, so that the others elect a leader", "waiting", d.Round(time.Millisecond), "disk_stall_timeout", timeout,
				"data_dir", g.dir)
		case storage.StallEnded:
			g.holdRaft(false)
			g.logger.Warn("disk answers again; this node takes part in Raft again, as a follower if another node leads",
				"stalled_for", d.Round(time.Millisecond))
		}
	}
}

// handOffForStall, on a leader whose disk has stalled, asks the voter
// with the longest log to start an election at once, with the TimeoutNow
// message that Raft's own leadership transfer ends with, instead of
// waiting out its heartbeat timeout. Raft's transfer cannot run: it needs
// the blocked leader loop. The voter still needs the votes Raft's rules
// give it: one whose log lacks committed entries loses, and the others
// then elect on their timeouts as before. It waits at most wait, probes
// included: a voter that does not answer must not keep the stalled
// leader's heartbeats going.
func (g *diskGuard) handOffForStall(wait time.Duration) {
	if !g.leading() {
		return
	}
	done := make(chan struct{})
	g.goFunc(func() {
		defer close(done)
		to, ok := g.voterWithSpace()
		if !ok {
			return
		}
		if err := g.timeoutNow(to); err != nil {
			g.logger.Warn("could not ask a voter to take over from this stalled leader; the others elect on their timeouts",
				"to", to.ID, "error", err)
			return
		}
		g.logger.Info("asked a voter to take over from this stalled leader", "to", to.ID)
	})
	select {
	case <-done:
	case <-time.After(wait):
	}
}

// stallHandOffWait bounds how long a stalled leader waits for its
// hand-off before it holds its Raft messages.
const stallHandOffWait = 500 * time.Millisecond

// DiskStalled reports whether a write to this node's Raft log or stable
// store has gone unanswered for longer than Config.DiskStallTimeout.
func (n *Node) DiskStalled() bool { return n.stall.Stalled() }
