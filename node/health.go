package node

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/forward"
	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// Member health, promotion and dead-member cleanup run on the leader,
// through hashicorp/raft-autopilot. Every healthInterval the leader probes
// each member over the forwarding port (the Probe call a joining node's
// checks use) and hands autopilot what it learned; autopilot decides who
// is healthy (reachable within healthThreshold, on the leader's term, and
// within promoteLag entries), promotes a non-voter once it has been
// healthy for promoteAfter, and, with Config.CleanupDeadAfter, removes a
// member unreachable for that long. Three rules of this package's own
// keep that safe:
//
//   - A probe counts only when the node at the member's address is that
//     member, of this cluster, and holds state: promotion keeps the
//     invariant that every voter has held the cluster's data.
//   - Only voters count as potential voters, so a removal never takes the
//     voters below minVoters: a dead voter goes once its replacement has
//     been promoted, not before.
//   - Autopilot's configuration changes are checked against the
//     configuration they were decided on (apRaft): a member removed or
//     moved meanwhile is not promoted back.

const (
	healthInterval  = time.Second
	healthThreshold = 5 * time.Second
	promoteAfter    = 2 * time.Second
	// minVoters is the floor of dead-member cleanup.
	minVoters = 3
)

// contact is what the leader knows of reaching one member.
type contact struct {
	since  time.Time        // when this leadership began to watch it
	lastOK time.Time        // its last good probe; zero: none yet
	reply  *wire.ProbeReply // that probe's answer
	why    string           // why the last probe did not count
	down   bool             // reported unreachable in the log
}

// health is the leader's view of its members; empty on a follower.
type health struct {
	mu       sync.Mutex
	contacts map[raft.ServerID]*contact
	state    *autopilot.State
	removing sync.Map // raft.ServerID → true while its removal runs
}

func (h *health) reset() {
	h.mu.Lock()
	h.contacts, h.state = map[raft.ServerID]*contact{}, nil
	h.mu.Unlock()
}

// memberWatch is the leader's watch of its members: autopilot, what it
// learned (health), and the delegate autopilot calls. It reads Raft and
// the state machine, and acts through the functions below: it probes
// members, and removes a dead one as rangealloc cluster remove would.
type memberWatch struct {
	id           string // this node's
	raft         *raft.Raft
	fsm          *fsm.FSM
	cleanupAfter time.Duration // Config.CleanupDeadAfter
	logger       hclog.Logger
	shutdown     <-chan struct{}
	goFunc       func(func())

	// leads tells whether this node still leads, in leadership gen.
	leads func(gen uint64) bool
	// probeAll probes members; self is this node's own probe answer.
	probeAll func(context.Context, []Peer) []probeResult
	self     func() *wire.ProbeReply
	// clusterID is the cluster's ID, which a member's probe must carry.
	clusterID func() string
	// remove removes a member: its row, then its server.
	remove func(ctx context.Context, id string) error

	ap *autopilot.Autopilot
	// mu keeps a start and a stop of consecutive leaderships in order.
	mu     sync.Mutex
	health health
}

// newMemberWatch creates n's autopilot; it runs while the node leads.
func newMemberWatch(n *Node) *memberWatch {
	w := &memberWatch{id: n.id, raft: n.raft, fsm: n.fsm, cleanupAfter: n.cfg.CleanupDeadAfter, logger: n.logger,
		shutdown: n.shutdown, goFunc: n.goFunc,
		leads:     func(gen uint64) bool { return n.leader.gen.Load() == gen && n.IsLeader() },
		probeAll:  n.probes.probeAll,
		self:      n.probeReply,
		clusterID: n.ClusterID,
		remove:    func(ctx context.Context, id string) error { return n.members.remove(ctx, id, "") },
	}
	w.health.reset()
	w.ap = autopilot.New(apRaft{n.raft}, w, autopilot.WithLogger(n.logger.Named("autopilot")),
		autopilot.WithUpdateInterval(healthInterval), autopilot.WithReconcileInterval(healthInterval),
		autopilot.WithPromoter(promoter{autopilot.DefaultPromoter().(*autopilot.StablePromoter), n.fsm}))
	return w
}

// follow starts autopilot when this node becomes the leader of
// generation gen, and stops it when it loses leadership. Starting probes
// every member once (a probe of a partitioned member waits out its
// timeout), so it runs beside the leader's first entry rather than before
// it; mu keeps a start and a stop of consecutive generations in order.
func (w *memberWatch) follow(leader bool, gen uint64) {
	if !leader {
		w.mu.Lock()
		<-w.ap.Stop()
		w.mu.Unlock()
		w.health.reset()
		return
	}
	w.goFunc(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-w.shutdown:
			return // close stops autopilot after closing shutdown
		default:
		}
		if !w.leads(gen) {
			return // lost it meanwhile
		}
		w.health.reset()
		w.ap.Start(context.Background()) // Stop cancels it
	})
}

// stop stops autopilot, on close.
func (w *memberWatch) stop() {
	w.mu.Lock()
	<-w.ap.Stop()
	w.mu.Unlock()
}

// The delegate: autopilot's view of the application.

func (d *memberWatch) AutopilotConfig() *autopilot.Config {
	return &autopilot.Config{CleanupDeadServers: d.cleanupAfter > 0, LastContactThreshold: healthThreshold,
		MaxTrailingLogs: promoteLag, MinQuorum: minVoters, ServerStabilizationTime: promoteAfter}
}

func (d *memberWatch) NotifyState(s *autopilot.State) {
	d.health.mu.Lock()
	d.health.state = s
	d.health.mu.Unlock()
}

// FetchServerStats probes every member but this one, and reports each by
// its last good probe.
func (d *memberWatch) FetchServerStats(ctx context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	var peers []Peer
	for id, s := range servers {
		if string(id) != d.id {
			peers = append(peers, Peer{ID: string(id), RaftAddr: string(s.Address)})
		}
	}
	results := d.probeAll(ctx, peers)
	now := time.Now()
	out := map[raft.ServerID]*autopilot.ServerStats{}
	if _, ok := servers[raft.ServerID(d.id)]; ok {
		out[raft.ServerID(d.id)] = &autopilot.ServerStats{LastTerm: d.lastTerm(), LastIndex: d.fsm.AppliedIndex()}
	}
	h := &d.health
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range results {
		id := raft.ServerID(r.peer.ID)
		c := h.contacts[id]
		if c == nil {
			c = &contact{since: now}
			h.contacts[id] = c
		}
		if why := d.probeProblem(r); why != "" {
			c.why = why
		} else {
			c.lastOK, c.reply, c.why = now, r.reply, ""
		}
		c.log(d.logger, r.peer.ID, now)
		if c.reply != nil {
			term := c.reply.LastTerm
			if c.reply.Protocol < 2 {
				// A node of the release before protocol 2 does not say its
				// term: judge it by reachability and lag alone.
				term = d.lastTerm()
			}
			out[id] = &autopilot.ServerStats{LastContact: now.Sub(c.lastOK), LastTerm: term, LastIndex: c.reply.Applied}
		}
	}
	return out
}

// probeProblem says why a probe does not count as hearing from the
// member: "" when it does.
func (d *memberWatch) probeProblem(r probeResult) string {
	switch {
	case r.err != nil:
		return r.err.Error()
	case r.reply.ID != r.peer.ID:
		return fmt.Sprintf("the node at %s is %q", r.peer.RaftAddr, r.reply.ID)
	case r.reply.ClusterID != d.clusterID():
		return fmt.Sprintf("the node at %s is of cluster %q", r.peer.RaftAddr, r.reply.ClusterID)
	case !r.reply.HasState:
		return fmt.Sprintf("the node at %s holds no state", r.peer.RaftAddr)
	}
	return ""
}

// log says once when member id becomes unreachable and once when it is
// back, instead of Raft's error per failed heartbeat.
func (c *contact) log(logger hclog.Logger, id string, now time.Time) {
	last := c.lastOK
	if last.IsZero() {
		last = c.since
	}
	switch gone := now.Sub(last); {
	case !c.down && gone > healthThreshold:
		c.down = true
		logger.Warn("member unreachable", "member", id, "for", gone.Round(time.Second), "error", c.why)
	case c.down && gone <= healthThreshold:
		c.down = false
		logger.Info("member reachable again", "member", id)
	}
}

// KnownServers is the Raft configuration, each member alive unless the
// leader has not reached it for CleanupDeadAfter.
func (d *memberWatch) KnownServers() map[raft.ServerID]*autopilot.Server {
	f := d.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	now := time.Now()
	out := map[raft.ServerID]*autopilot.Server{}
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	for _, s := range f.Configuration().Servers {
		srv := &autopilot.Server{ID: s.ID, Name: string(s.ID), Address: s.Address, NodeStatus: autopilot.NodeAlive,
			RaftVersion: raft.ProtocolVersionMax, NodeType: nodeTypeNonvoter, IsLeader: string(s.ID) == d.id}
		if s.Suffrage == raft.Voter {
			srv.NodeType = autopilot.NodeVoter
		}
		if c := d.health.contacts[s.ID]; c != nil && string(s.ID) != d.id {
			last := c.lastOK
			if last.IsZero() {
				last = c.since
			}
			if after := d.cleanupAfter; after > 0 && now.Sub(last) > after {
				srv.NodeStatus = autopilot.NodeFailed
			}
			if c.reply != nil {
				srv.Version = c.reply.Version
			}
		}
		out[s.ID] = srv
	}
	return out
}

// RemoveFailedServer removes a member autopilot found dead, as
// rangealloc cluster remove would: the member row, then the server.
func (d *memberWatch) RemoveFailedServer(s *autopilot.Server) {
	if _, busy := d.health.removing.LoadOrStore(s.ID, true); busy {
		return // autopilot asks every round; one removal at a time
	}
	d.goFunc(func() {
		defer d.health.removing.Delete(s.ID)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.remove(ctx, string(s.ID)); err != nil {
			d.logger.Warn("could not remove a dead member", "member", s.ID, "error", err)
			return
		}
		d.logger.Warn("removed a dead member", "member", s.ID, "unreachable_for_more_than", d.cleanupAfter)
	})
}

// nodeTypeNonvoter marks a member that is not a voter now: it does not
// count towards the cleanup floor until it is promoted.
const nodeTypeNonvoter autopilot.NodeType = "nonvoter"

// promoter is autopilot's stable promoter, except that it leaves alone
// the members kept non-voters, and counts only voters as potential voters.
type promoter struct {
	*autopilot.StablePromoter
	fsm *fsm.FSM // the member table: who is kept a non-voter
}

func (p promoter) IsPotentialVoter(t autopilot.NodeType) bool { return t == autopilot.NodeVoter }

func (p promoter) GetNodeTypes(_ *autopilot.Config, s *autopilot.State) map[raft.ServerID]autopilot.NodeType {
	out := map[raft.ServerID]autopilot.NodeType{}
	for id, srv := range s.Servers {
		out[id] = srv.Server.NodeType
	}
	return out
}

func (p promoter) CalculatePromotionsAndDemotions(c *autopilot.Config, s *autopilot.State) autopilot.RaftChanges {
	changes := p.StablePromoter.CalculatePromotionsAndDemotions(c, s)
	var keep []raft.ServerID
	for _, id := range changes.Promotions {
		if m, ok := p.fsm.Member(string(id)); ok && m.Nonvoter {
			continue
		}
		keep = append(keep, id)
	}
	changes.Promotions = keep
	return changes
}

// apRaft is the Raft autopilot changes. A promotion names the
// configuration it was decided on, so Raft refuses it if the member was
// removed or moved since; autopilot's own removal of servers unknown to
// the application is refused, since every server is known (a member added
// between autopilot's two reads would otherwise go at once).
type apRaft struct{ *raft.Raft }

func (r apRaft) AddVoter(id raft.ServerID, addr raft.ServerAddress, _ uint64, timeout time.Duration) raft.IndexFuture {
	f := r.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return errFuture{err}
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id && s.Address == addr && s.Suffrage == raft.Nonvoter {
			return r.Raft.AddVoter(id, addr, f.Index(), timeout)
		}
	}
	return errFuture{fmt.Errorf("promote %s: no longer a non-voter at %s", id, addr)}
}

func (r apRaft) RemoveServer(id raft.ServerID, _ uint64, _ time.Duration) raft.IndexFuture {
	return errFuture{fmt.Errorf("remove %s: not in the application's member list; left in place", id)}
}

type errFuture struct{ err error }

func (f errFuture) Error() error  { return f.err }
func (f errFuture) Index() uint64 { return 0 }

// lastTerm is the term of this node's last log entry.
func (d *memberWatch) lastTerm() uint64 {
	t, _ := strconv.ParseUint(d.raft.Stats()["last_log_term"], 10, 64)
	return t
}

// memberHealth is the leader's health of each member of the configuration.
func (d *memberWatch) memberHealth() map[string]wire.MemberHealth {
	f := d.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	last := d.raft.LastIndex()
	now := time.Now()
	out := map[string]wire.MemberHealth{}
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		var r *wire.ProbeReply
		mh := wire.MemberHealth{LastContact: -1}
		if id == d.id {
			r, mh.LastContact = d.self(), 0
		} else if c := d.health.contacts[s.ID]; c != nil && c.reply != nil {
			r, mh.LastContact = c.reply, now.Sub(c.lastOK)
		}
		if r != nil {
			mh.Reachable = mh.LastContact <= healthThreshold
			mh.MatchIndex, mh.Version, mh.FeatureLevel = r.LastIndex, r.Version, r.FeatureLevel
			mh.DiskFree, mh.DiskLow = r.DiskFree, r.DiskLow
			if last > r.LastIndex {
				mh.Lag = last - r.LastIndex
			}
		}
		if d.health.state != nil {
			if st := d.health.state.Servers[s.ID]; st != nil {
				mh.Healthy = st.Health.Healthy
			}
		}
		if id == d.id {
			mh.Healthy = true // the leader is on its own term and at its own index
		}
		out[id] = mh
	}
	return out
}

// Health answers a follower's cluster status with the leader's view.
func (s *rpcService) Health(_ int, reply *wire.HealthReply) error {
	if err := s.member(); err != nil {
		reply.Err = err
		return nil
	}
	if !s.n.IsLeader() {
		reply.Err = &wireErr{NotLeader: true, Msg: "not the leader"}
		return nil
	}
	reply.Members, reply.FeatureLevel = s.n.watch.memberHealth(), s.n.fsm.FeatureLevel()
	return nil
}

// leaderHealth asks the leader for its view; nil when it cannot.
func (n *Node) leaderHealth(ctx context.Context) (*wire.HealthReply, error) {
	if n.IsLeader() {
		return &wire.HealthReply{Members: n.watch.memberHealth(), FeatureLevel: n.fsm.FeatureLevel()}, nil
	}
	addr, _ := n.raft.LeaderWithID()
	if addr == "" {
		return nil, ErrNoLeader
	}
	var reply wire.HealthReply
	if _, err := n.fwd.Call(ctx, string(addr), wire.MethodHealth, 0, &reply, nil); err != nil {
		return nil, err
	}
	if reply.Err != nil {
		return nil, forward.FromWire(reply.Err)
	}
	return &reply, nil
}
