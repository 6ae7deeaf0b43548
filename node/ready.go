package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Reasons a node is not ready (GET /readyz).
const (
	ReasonBootstrapping = "bootstrapping" // it has not founded or joined a cluster yet
	ReasonNoLeader      = "no_leader"     // it knows no leader
	ReasonNotAMember    = "not_a_member"  // it is not in the cluster's configuration
	ReasonCatchingUp    = "catching_up"   // it has not applied what the leader has committed
	ReasonDiskFull      = "disk_full"     // its free disk is below Config.MinFreeDisk: it refuses client writes
	ReasonDiskStalled   = "disk_stalled"  // a write to its Raft log store has not returned within Config.DiskStallTimeout
)

// Readiness says whether a node can serve, and if not, why.
type Readiness struct {
	Ready  bool
	Reason string // one of the Reason constants when not ready
	Detail string // a sentence for people
}

// leaderWordTTL is how fresh the leader's commit index must be for a
// follower to call itself ready.
const leaderWordTTL = time.Second

// leaderWord is what a follower last heard from the leader: its commit
// index. Raft caps a follower's own commit index at its last entry, so
// after a restart a follower that has not yet received the log would
// otherwise believe it has applied everything.
type leaderWord struct {
	mu     sync.Mutex
	leader string
	commit uint64
	at     time.Time
}

func (w *leaderWord) set(leader string, commit uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.leader, w.commit, w.at = leader, commit, time.Now()
}

func (w *leaderWord) get() (leader string, commit uint64, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leader, w.commit, w.at
}

// followLoop, on a follower, asks the leader for its commit index four
// times a second.
func (n *Node) followLoop() {
	t := time.NewTicker(leaderWordTTL / 4)
	defer t.Stop()
	for {
		select {
		case <-n.shutdown:
			return
		case <-t.C:
		}
		addr, id := n.raft.LeaderWithID()
		if n.life.starting() || addr == "" || id == raft.ServerID(n.id) {
			continue
		}
		n.founder.finishFounding(false)
		ctx, cancel := context.WithTimeout(context.Background(), leaderWordTTL)
		r, err := n.probes.probe(ctx, string(addr))
		cancel()
		if err == nil && r.Leader && r.ID == string(id) {
			n.lead.set(r.ID, r.CommitIndex)
		}
	}
}

// Readiness reports whether this node can serve: it has joined a
// cluster, has disk space above its floor, knows a leader, is in the configuration, and has applied at
// least the leader's commit index (a leader: since it applied an entry of
// its term; a follower: as the leader said within the last second).
func (n *Node) Readiness() Readiness {
	not := func(reason, format string, args ...any) Readiness {
		return Readiness{Reason: reason, Detail: fmt.Sprintf(format, args...)}
	}
	if n.life.starting() {
		return not(ReasonBootstrapping, "this node has not founded or joined a cluster yet")
	}
	if n.DiskStalled() {
		return not(ReasonDiskStalled, "a write to the Raft log store in %s has not returned within %v (--disk-stall-timeout): "+
			"this node sends no Raft message until it does", n.cfg.DataDir, n.cfg.DiskStallTimeout)
	}
	if e := n.disk.lowError(); e != nil {
		return not(ReasonDiskFull, "%s", e.Message)
	}
	addr, leader := n.raft.LeaderWithID()
	if addr == "" {
		return not(ReasonNoLeader, "no leader known")
	}
	if member, _ := inConfiguration(n.raft, n.id); !member {
		return not(ReasonNotAMember, "this node is not in the cluster's configuration")
	}
	applied := n.fsm.AppliedIndex()
	if leader == raft.ServerID(n.id) {
		switch {
		case !n.leader.ready.Load():
			return not(ReasonCatchingUp, "this leader has not applied an entry of its term yet")
		case !n.IsLeader() || !n.leader.serving():
			return not(ReasonCatchingUp, "this leader has not yet written its configured pools and service network")
		}
		return Readiness{Ready: true}
	}
	who, commit, at := n.lead.get()
	switch {
	case who != string(leader) || time.Since(at) > leaderWordTTL:
		return not(ReasonCatchingUp, "no word from leader %s on its commit index in the last %v", leader, leaderWordTTL)
	case applied < commit:
		return not(ReasonCatchingUp, "applied index %d is behind the leader's commit index %d", applied, commit)
	}
	return Readiness{Ready: true}
}
