package node

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// Member is a cluster member as the cluster status shows it.
type Member struct {
	ID       string
	RaftAddr string
	APIAddr  string
	Voter    bool
	Leader   bool

	// Health, as the leader sees it; a follower's view knows only itself
	// and the leader, and leaves Known false for the others.
	Known bool
	// Reachable: the leader's last probe of it succeeded, within the
	// health threshold.
	Reachable bool
	// LastContact is how long ago the leader last heard from it (-1: never).
	LastContact time.Duration
	// MatchIndex is the last log index it holds; Lag how many entries it
	// is behind the leader's last index.
	MatchIndex uint64
	Lag        uint64
	// Healthy: reachable, on the leader's term, and within 250 entries.
	Healthy bool
	// Version is its release; FeatureLevel the highest feature level its
	// binary supports (0: unknown).
	Version      string
	FeatureLevel int
	// DiskFree is its free disk space in bytes (0: unknown); DiskLow is
	// true while it is below its --min-free-disk.
	DiskFree uint64
	DiskLow  bool
}

// ClusterStatus is this node's view of the cluster.
type ClusterStatus struct {
	ID           string // this node's ID
	ClusterID    string // "" until the first leader named the cluster
	LeaderID     string
	LeaderAPI    string
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	// FeatureLevel is the cluster's replicated feature level: the entry
	// kinds and snapshot formats it may use.
	FeatureLevel int
	Members      []Member
}

// Cluster returns this node's view of the cluster: the Raft configuration
// joined with the member table's API addresses, and each member's health
// as the leader sees it (asked of the leader by a follower; when there is
// no leader to ask, a node knows only its own).
func (n *Node) Cluster() (ClusterStatus, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return ClusterStatus{}, err
	}
	_, leaderID := n.raft.LeaderWithID()
	term, _ := strconv.ParseUint(n.raft.Stats()["term"], 10, 64)
	st := ClusterStatus{ID: n.id, ClusterID: n.ClusterID(), LeaderID: string(leaderID), Term: term,
		CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.fsm.AppliedIndex(), FeatureLevel: n.fsm.FeatureLevel()}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	h, err := n.leaderHealth(ctx)
	if err != nil {
		me := n.probeReply()
		h = &wire.HealthReply{Members: map[string]wire.MemberHealth{n.id: {Reachable: true, MatchIndex: me.LastIndex,
			Version: me.Version, FeatureLevel: me.FeatureLevel, DiskFree: me.DiskFree, DiskLow: me.DiskLow}}}
	} else {
		st.FeatureLevel = h.FeatureLevel
	}
	for _, s := range f.Configuration().Servers {
		m := Member{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter, Leader: s.ID == leaderID, LastContact: -1}
		if row, ok := n.fsm.Member(m.ID); ok {
			m.APIAddr = row.APIAddr
		}
		if mh, ok := h.Members[m.ID]; ok {
			m.Known, m.Reachable, m.Healthy, m.LastContact = true, mh.Reachable, mh.Healthy, mh.LastContact
			m.MatchIndex, m.Lag, m.Version, m.FeatureLevel = mh.MatchIndex, mh.Lag, mh.Version, mh.FeatureLevel
			m.DiskFree, m.DiskLow = mh.DiskFree, mh.DiskLow
		}
		if m.Leader {
			st.LeaderAPI = m.APIAddr
		}
		st.Members = append(st.Members, m)
	}
	return st, nil
}

// AddMember adds a node to the cluster, or does nothing when it is a
// member already, and records its addresses in the member table. The
// leader asks the node first (memberChanges.add): it must run, and hold no
// other cluster's state. It joins as a non-voter and becomes a voter once
// it has caught up.
func (n *Node) AddMember(ctx context.Context, m fsm.Member) error {
	if err := checkNewMember(m); err != nil { // before it travels: an older leader does not check
		return err
	}
	if m.Nonvoter { // before it travels: a leader of an older release would drop the flag
		if err := checkKindLevel(fsm.KindSetMemberNonvoter, n.fsm.FeatureLevel()); err != nil {
			return err
		}
	}
	return n.onLeader(ctx, wire.MethodAddMember, m, "", func() error { return n.members.add(ctx, m) })
}

// RemoveMember removes a member from the member table and the Raft
// configuration. A requestID (the API's Idempotency-Key) makes it safe to
// retry: a retry of a call that went through, or part way, answers as that
// call did, finishing what it left undone, and the ID of another request
// is refused (fsm.CodeIdempotencyKeyReused). "" draws one, which the
// node's own retries of the call (through a new leader) carry.
func (n *Node) RemoveMember(ctx context.Context, id, requestID string) error {
	if err := checkRequestID(requestID); err != nil {
		return err
	}
	if requestID == "" {
		requestID = drawRequestID()
	}
	args := &removeArgs{ID: id, RequestID: requestID}
	return n.onLeader(ctx, wire.MethodRemoveMemberRequest, args, requestID, func() error { return n.members.remove(ctx, id, requestID) })
}

// memberChanges adds and removes members on the leader: the checks a
// newcomer must pass, the change of the Raft configuration and the member
// row. One change runs at a time (mu, the Node's memberMu, which a
// feature-level raise holds too): a join adds its member to the
// configuration before it writes the row, and neither a removal nor a
// raise may decide on a membership between the two.
type memberChanges struct {
	mu     *sync.Mutex
	raft   *raft.Raft
	fsm    *fsm.FSM
	levels *featureLevels
	logger hclog.Logger

	// What it acts through: a probe of the newcomer, the cluster's ID it
	// must hold if it holds state, the node's write path, a wait for a
	// Raft future, and a linearizable look at the request table.
	probe     func(ctx context.Context, addr string) (*wire.ProbeReply, error)
	clusterID func() string
	submit    func(context.Context, *fsm.Request) (*fsm.Result, error)
	wait      func(raft.Future) error
	linearize func(context.Context) error
}

// newMemberChanges builds n's member changes, once Raft runs.
func newMemberChanges(n *Node) *memberChanges {
	return &memberChanges{mu: &n.memberMu, raft: n.raft, fsm: n.fsm, levels: n.levels, logger: n.logger,
		probe: n.probes.probe, clusterID: n.ClusterID, submit: n.submit, wait: n.wait, linearize: n.linearize}
}

// add checks a newcomer over its Raft port, then adds it as a non-voter
// (autopilot makes it a voter once it has caught up) and writes its
// member row: the leader's side of a join.
func (c *memberChanges) add(ctx context.Context, m fsm.Member) error {
	// Checked here, where every path meets (AddMember, and the Join and
	// AddMember calls forwarded from other nodes): a member the state
	// machine would refuse must not reach the Raft configuration first.
	if err := checkNewMember(m); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	kind := fsm.KindSetMember
	if m.Nonvoter {
		kind = fsm.KindSetMemberNonvoter
		if err := checkKindLevel(kind, c.fsm.FeatureLevel()); err != nil {
			return err
		}
	}
	r, err := c.probe(ctx, m.RaftAddr)
	if err != nil {
		return &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: fmt.Sprintf(
			"cannot reach %s at Raft address %s to check it before adding it (%v): start it with --join first", m.ID, m.RaftAddr, err)}
	}
	if r.ID != m.ID {
		return &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: fmt.Sprintf(
			"the node at Raft address %s is %q, not %q", m.RaftAddr, r.ID, m.ID)}
	}
	mine := c.clusterID()
	member := r.ClusterID != "" && r.ClusterID == mine
	if r.HasState && !member {
		return &fsm.Error{Code: fsm.CodeNodeNotEmpty, Op: -1, Node: &fsm.NodeDetails{ClusterID: r.ClusterID, LastIndex: r.LastIndex},
			Message: fmt.Sprintf("node %s at %s holds state of another cluster (cluster %q, last index %d): it was started on its own "+
				"or belongs elsewhere; empty its data directory and start it with --join to add it", m.ID, m.RaftAddr, r.ClusterID, r.LastIndex)}
	}
	if err := c.levels.checkJoinLevel(m.ID, r.Version, r.FeatureLevel); err != nil {
		return err
	}
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	var cur *raft.Server
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == m.ID {
			cur = &s
		}
	}
	switch {
	case cur != nil && cur.Suffrage == raft.Voter && m.Nonvoter:
		return &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: fmt.Sprintf(
			"member %s is a voter: to keep it a non-voter, remove it (rangealloc cluster remove %s) and add it again", m.ID, m.ID)}
	case cur != nil && cur.Suffrage == raft.Voter && !r.HasState:
		return &fsm.Error{Code: fsm.CodeMemberDataLost, Op: -1, Message: fmt.Sprintf(
			"member %s is a voter of cluster %s, and the node at %s has no state: its data is gone. Remove the member "+
				"(rangealloc cluster remove %s), then join the node again", m.ID, mine, m.RaftAddr, m.ID)}
	case cur == nil:
		if err := c.wait(c.raft.AddNonvoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), f.Index(), 0)); err != nil {
			return fmt.Errorf("add non-voter %s: %w", m.ID, err)
		}
		c.logger.Info("added a non-voter; it becomes a voter once it has caught up", "id", m.ID, "raft", m.RaftAddr)
	case string(cur.Address) != m.RaftAddr:
		add := c.raft.AddNonvoter
		if cur.Suffrage == raft.Voter {
			add = c.raft.AddVoter
		}
		if err := c.wait(add(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), f.Index(), 0)); err != nil {
			return fmt.Errorf("move member %s to %s: %w", m.ID, m.RaftAddr, err)
		}
	}
	res, err := c.submit(ctx, &fsm.Request{Kind: kind, Member: m})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	return nil
}

// remove removes a member: its row, then its server. A requestID makes
// a retry answer as the first call did (RemoveMember).
func (c *memberChanges) remove(ctx context.Context, id, requestID string) error {
	// One membership change at a time: a join adds its member to the
	// configuration before it writes the row, and a retry below must not
	// see a member between the two.
	c.mu.Lock()
	defer c.mu.Unlock()
	req := &fsm.Request{Kind: fsm.KindRemoveMember, ID: requestID, Member: fsm.Member{ID: id}}
	retry := false
	if requestID != "" {
		// The request table must be the cluster's latest: a call that
		// wrote its entry under this ID, answered or not, must be found.
		if err := c.linearize(ctx); err != nil {
			return err
		}
		_, retry = c.fsm.RequestFingerprint(requestID)
	}
	if retry {
		// A call under this ID got past the checks below and wrote its
		// entry. The entry again answers what it answered then, or refuses
		// an ID used for another request; what that call may have left
		// undone, the configuration change, follows.
		if err := c.removeRow(ctx, req); err != nil {
			return err
		}
	}
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	inConfig, voter, voters := false, false, 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
		if string(s.ID) == id {
			inConfig, voter = true, s.Suffrage == raft.Voter
		}
	}
	_, inTable := c.fsm.Member(id)
	if retry && inTable {
		// The call under this ID removed the row, so the member was added
		// again since: that call's answer stands, and the member stays.
		return nil
	}
	switch {
	case !retry && !inConfig && !inTable:
		return &fsm.Error{Code: fsm.CodeMemberNotFound, Op: -1, Message: fmt.Sprintf("member %q not found", id)}
	case voter && voters == 1:
		return &fsm.Error{Code: fsm.CodeLastVoter, Op: -1, Message: fmt.Sprintf(
			"member %q is the cluster's only voter: removing it would leave no one to commit anything", id)}
	}
	// The row goes first, while this node surely leads: removing the
	// leader itself from Raft makes it step down, and the row would then
	// wait for an election. A retry finishes whichever half is left. Under
	// an ID the entry is written even for a member in the configuration
	// without a row, to remember the ID.
	if !retry && (inTable || requestID != "") {
		if err := c.removeRow(ctx, req); err != nil {
			return err
		}
	}
	if inConfig {
		if err := c.wait(c.raft.RemoveServer(raft.ServerID(id), 0, 0)); err != nil {
			return fmt.Errorf("remove server %s: %w", id, err)
		}
		c.logger.Info("removed member", "id", id)
	}
	return nil
}

// removeRow removes a member's row; a row already gone is no error.
func (c *memberChanges) removeRow(ctx context.Context, req *fsm.Request) error {
	res, err := c.submit(ctx, req)
	if err != nil {
		return err
	}
	if res.Err != nil && res.Err.Code != fsm.CodeMemberNotFound {
		return res.Err
	}
	return nil
}

// TransferLeadership hands leadership to the member id, or to the most
// up-to-date follower when id is "".
func (n *Node) TransferLeadership(ctx context.Context, id string) error {
	return n.onLeader(ctx, wire.MethodTransfer, id, "", func() error {
		if id == n.id {
			return nil // it leads already
		}
		f := n.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return err
		}
		others := 0
		for _, s := range f.Configuration().Servers {
			if s.ID == raft.ServerID(n.id) {
				continue
			}
			if s.Suffrage == raft.Voter {
				others++
			}
			if string(s.ID) != id {
				continue
			}
			if s.Suffrage != raft.Voter {
				return &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: fmt.Sprintf("member %q is not a voter: only a voter can lead", id)}
			}
			return n.wait(n.raft.LeadershipTransferToServer(s.ID, s.Address))
		}
		if id != "" {
			return &fsm.Error{Code: fsm.CodeMemberNotFound, Op: -1, Message: fmt.Sprintf("member %q not found", id)}
		}
		if others == 0 {
			return &fsm.Error{Code: fsm.CodeLastVoter, Op: -1, Message: "no other voter to hand leadership to"}
		}
		return n.wait(n.raft.LeadershipTransfer())
	})
}

// onLeader runs fn when this node leads, or calls the leader's RPC method
// with args; it retries while there is no leader, until ctx ends. These
// calls are idempotent, so a retry after an unknown outcome is safe. A
// call under a request ID (id, a member removal) that ends while an
// attempt may have been applied returns an UnknownOutcomeError naming
// it; the others say only that no leader answered in time.
func (n *Node) onLeader(ctx context.Context, method wire.Method, args any, id string, fn func() error) error {
	_, err := route(ctx, n, call[struct{}]{
		name: string(method),
		id:   id,
		local: func(context.Context) (struct{}, bool, error) {
			err := fn()
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
				err = fmt.Errorf("%w: %v", ErrNotLeader, err)
			}
			// Failed part way (a row written, its server not removed):
			// a refusal, though, comes before anything is written.
			return struct{}{}, id != "" && err != nil, err
		},
		remote: func(ctx context.Context, addr string) (struct{}, bool, error) {
			maybe, err := n.fwd.Cluster(ctx, addr, method, args)
			return struct{}{}, id != "" && maybe, err
		},
	})
	return err
}

// Stats returns Raft's statistics (see raft.Raft.Stats) plus the state
// machine's applied index and the log store's bounds.
func (n *Node) Stats() map[string]string {
	s := n.raft.Stats()
	s["fsm_applied_index"] = strconv.FormatUint(n.fsm.AppliedIndex(), 10)
	if first, err := n.store.FirstIndex(); err == nil {
		s["log_first_index"] = strconv.FormatUint(first, 10)
	}
	return s
}

// Snapshot takes a Raft snapshot now and compacts the log.
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }
