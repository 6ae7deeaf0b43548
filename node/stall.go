package node

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
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

// stallWatch times the log and stable store's writes in flight. Every
// write calls begin and end; the node's stallLoop calls check.
type stallWatch struct {
	stalled atomic.Bool   // a write has been in flight longer than the timeout
	stalls  atomic.Uint64 // stalls so far

	mu sync.Mutex
	// mu guards the following.
	next   uint64               // the ID of the next write
	starts map[uint64]time.Time // when each write in flight began; a few at most
	began  time.Time            // when the current stall began (the write's start)
}

// begin notes a write starting and returns its ID, for end.
func (w *stallWatch) begin() uint64 {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.starts == nil {
		w.starts = map[uint64]time.Time{}
	}
	w.next++
	w.starts[w.next] = now
	return w.next
}

// end notes write id returning.
func (w *stallWatch) end(id uint64) {
	w.mu.Lock()
	delete(w.starts, id)
	w.mu.Unlock()
}

// oldest is when the oldest write in flight began; ok is false when none
// is. mu must be held.
func (w *stallWatch) oldest() (at time.Time, ok bool) {
	for _, t := range w.starts {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// Stall transitions, as check reports them.
const (
	stallNone  = iota // no change
	stallBegan        // a write has been in flight longer than the timeout
	stallEnded        // no write in flight is older than the timeout any more
)

// check decides, at now, whether the disk is stalled: a write in flight
// for longer than timeout. It returns the transition, if any, and how
// long the write that stalled had been running (at its start) or ran (at
// its end).
func (w *stallWatch) check(now time.Time, timeout time.Duration) (transition int, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	since, busy := w.oldest()
	late := busy && now.Sub(since) > timeout
	switch {
	case late && !w.stalled.Load():
		w.began = since
		w.stalled.Store(true)
		w.stalls.Add(1)
		return stallBegan, now.Sub(w.began)
	case !late && w.stalled.Load():
		w.stalled.Store(false)
		return stallEnded, now.Sub(w.began)
	}
	return stallNone, 0
}

// stallCheckEvery is how often stallLoop looks: a tenth of the timeout,
// within [10ms, 100ms]. A look costs a mutex and a clock read.
func stallCheckEvery(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 10*time.Millisecond), 100*time.Millisecond)
}

// stallLoop watches the store's writes, and holds this node's Raft
// messages while one is stalled.
func (n *Node) stallLoop() {
	timeout := n.cfg.DiskStallTimeout
	t := time.NewTicker(stallCheckEvery(timeout))
	defer t.Stop()
	for {
		var now time.Time
		select {
		case <-n.shutdown:
			return
		case now = <-t.C:
		}
		switch tr, d := n.stall.check(now, timeout); tr {
		case stallBegan:
			n.handOffForStall(stallHandOffWait)
			n.mux.HoldRaft(true)
			n.logger.Error("disk stalled: a write to the Raft log store has not returned; this node sends no Raft message "+
				"until it does, so that the others elect a leader", "waiting", d.Round(time.Millisecond), "disk_stall_timeout", timeout,
				"data_dir", n.cfg.DataDir)
		case stallEnded:
			n.mux.HoldRaft(false)
			n.logger.Warn("disk answers again; this node takes part in Raft again, as a follower if another node leads",
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
func (n *Node) handOffForStall(wait time.Duration) {
	if !n.IsLeader() {
		return
	}
	done := make(chan struct{})
	n.goFunc(func() {
		defer close(done)
		to, ok := n.voterWithSpace()
		if !ok {
			return
		}
		hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(n.id),
			Addr: n.trans.EncodePeer(raft.ServerID(n.id), raft.ServerAddress(n.addr))}
		err := n.raftTrans.TimeoutNow(to.ID, to.Address, &raft.TimeoutNowRequest{RPCHeader: hdr}, &raft.TimeoutNowResponse{})
		if err != nil {
			n.logger.Warn("could not ask a voter to take over from this stalled leader; the others elect on their timeouts",
				"to", to.ID, "error", err)
			return
		}
		n.logger.Info("asked a voter to take over from this stalled leader", "to", to.ID)
	})
	select {
	case <-done:
	case <-time.After(wait):
	}
}

// stallHandOffWait bounds how long a stalled leader waits for its
// hand-off before it holds its Raft messages.
const stallHandOffWait = 500 * time.Millisecond

// startStallWatch starts stallLoop unless Config.DiskStallTimeout is 0.
func (n *Node) startStallWatch() {
	if n.cfg.DiskStallTimeout > 0 {
		n.goFunc(n.stallLoop)
	}
}

// DiskStalled reports whether a write to this node's Raft log or stable
// store has gone unanswered for longer than Config.DiskStallTimeout.
func (n *Node) DiskStalled() bool { return n.stall.stalled.Load() }
