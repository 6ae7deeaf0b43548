package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/forward"
	"github.com/rangealloc/rangealloc/node/internal/storage"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/durable"
	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// How a node without state takes part in a cluster, and why it is safe.
//
// The invariant: every voter of a configuration has held this cluster's
// data. Raft counts a voter's log and its vote; a voter that lost its disk
// and took part again would have forgotten both, so a quorum that needed
// it could forget an acknowledged write, or elect two leaders in one term.
// A node that finds its data directory empty therefore never takes part
// as a voter it may have been before:
//
//   - Alone (no --peers, no --join), it founds a one-node cluster with a
//     new cluster ID: a node that was a member elsewhere is then of another
//     cluster, and the handshake keeps it out of the old one.
//   - With --peers, it founds the cluster together with its peers, or
//     refuses. It asks every peer (found). A peer with state means the
//     cluster exists, and since peers bootstrap only after every peer said
//     it was ready, and this node has no record of ever being ready, its
//     data is gone: it refuses to start. Once every peer has answered
//     without state, it writes the founding marker (so a crash from here
//     on does not make it a stranger) and says it is ready; once every
//     peer has said so (or has state), it bootstraps. So every founder has answered
//     before any bootstrapped, and all of them become voters.
//   - With --join, the leader asks it first (memberChanges.add): a node
//     with another cluster's state is refused (NodeNotEmpty), and a node
//     without state whose ID is a voter is refused (MemberDataLost). A
//     newcomer is added as a non-voter, whose log and vote count for
//     nothing, and promoted to voter by the leader once it has caught up
//     (promoteLoop): by then it has held the data.
//
// Until it has decided, the node's Raft port is shut (transport
// Options.RaftClosed): it answers probes on the forwarding port, and
// nothing reaches its Raft. And it knows its cluster's ID before the port
// opens (a lone node draws one; founders take the least of the candidates
// they offered each other; a joining node takes its leader's), so the
// handshake keeps every other cluster out from its first Raft connection:
// a node with an empty ID would accept any cluster, and a former voter
// restarted alone could be taken over by the leader of its old one.

// foundingFile marks a node that had seen every peer without state and
// said it was ready to found the cluster.
const foundingFile = "founding"

// founder brings a node without state into a cluster, founding one or
// joining one, and keeps the cluster's ID. It owns what is the founding's
// alone: the candidate cluster ID it offers, the cluster's ID, whether
// this process bootstrapped a founding not yet seen finished
// (bootstrapped, unfinished), and whether the node founds from a backup.
//
// The order of events, by the node's start-up steps (node.go):
//
//	openDataDir   loadClusterID. With state: pendingRestore (a founding
//	              restore cut short) and resumeFounding (a founding
//	              whose writes were cut short). A lone node without
//	              state: prepareFounding (foundfrom.go).
//	takePlace     Without state, takePart, one of:
//	                founding with peers: found (probe every peer; once
//	                  each answered without state, offerCandidate; once
//	                  each is ready, take the least candidate), then
//	                  keepClusterID and bootstrap;
//	                joining: join (a member carries it to the leader's
//	                  memberChanges.add), which keeps the leader's ID;
//	                alone: keepClusterID of a new ID, then bootstrap.
//	              Founding from a backup: restoreFounding, once the
//	              leader has established.
//	leadership    establish: nameCluster, then, on the node that
//	              bootstrapped, finishFounding (followLoop too).
//
// It reaches the rest of the node through the fields below alone.
type founder struct {
	cfg      Config
	id       string // this node's ID
	logger   hclog.Logger
	life     *lifecycle // the node's start-up phase: offerCandidate and restoreFounding move it
	fsm      *fsm.FSM   // read only: the replicated cluster ID, pools and feature level
	shutdown <-chan struct{}
	// The leader's writes a founding makes, through the node's group
	// commit (nameCluster), its restore and its feature levels
	// (restoreFounding).
	submit  func(context.Context, *fsm.Request) (*fsm.Result, error)
	restore func(ctx context.Context, b *fsm.Backup, id string, fp uint64) error
	raise   func(context.Context)

	// Set by attach once Raft runs, before takePart.
	raft   *raft.Raft
	addr   string          // the advertised Raft address
	fwd    *forward.Client // carries the Join call
	probes *prober

	// candidate is the cluster ID this founder offers its peers (a string).
	candidate atomic.Value
	// cluster is the cluster's ID (a string), "" until learned; the
	// handshake of every connection between nodes carries it.
	cluster atomic.Value
	// bootstrapped is true when this node created the cluster's initial
	// configuration and has not yet seen its founding finished (the
	// unfinishedFile marker): its leadership then writes the founders'
	// member rows, creates cfg.Pools and raises the feature level
	// (establish). Set before Raft can elect this node.
	bootstrapped bool
	// unfinished is true while unfinishedFile exists.
	unfinished atomic.Bool
	// restoring: this node founds its cluster from a backup, or finishes
	// doing so. Set before any goroutine starts.
	restoring atomic.Bool
	// established is closed once the first establish of this process has
	// run: a founding restore waits for it, so that the state it keeps
	// (members, cluster ID, level) is the founding's.
	established   chan struct{}
	establishOnce sync.Once
}

// attach gives the founder what exists once Raft runs: Raft itself, the
// advertised Raft address, and the clients of the forwarding port.
func (f *founder) attach(r *raft.Raft, addr string, fwd *forward.Client, probes *prober) {
	f.raft, f.addr, f.fwd, f.probes = r, addr, fwd, probes
}

// markEstablished says the first establish of this process has run.
func (f *founder) markEstablished() {
	f.establishOnce.Do(func() { close(f.established) })
}

// warnLoneFounder warns when a node started with neither Peers nor Join
// is one of several voters: if its data directory is lost, those flags
// make it found a new, empty cluster of its own (DESIGN, "Who may take
// part") instead of refusing to start, and clients that call it would be
// given values the real cluster holds.
func (f *founder) warnLoneFounder() {
	if len(f.cfg.Peers) > 0 || len(f.cfg.Join) > 0 || f.cfg.JoinVia != nil {
		return
	}
	if voters := countVoters(f.raft); voters > 1 {
		f.logger.Warn("this node runs without --join or --peers, but is one of several voters: if its data directory is lost, "+
			"it will found a new, empty cluster instead of refusing to start; start it with --join <another member's HTTP address> "+
			"(a node with state ignores it)", "voters", voters)
	}
}

// takePart brings a node without state into a cluster: it bootstraps,
// founds with its peers, or joins, and returns once it may take part, or
// with the reason it must not.
func (f *founder) takePart(ctx context.Context) error {
	// A marker left by a bootstrap that never reached the disk: this
	// directory holds no cluster, so nothing of one is unfinished. A
	// bootstrap below writes it again.
	if err := durable.Remove(filepath.Join(f.cfg.DataDir, unfinishedFile)); err != nil {
		return err
	}
	switch {
	case len(f.cfg.Join) > 0 || f.cfg.JoinVia != nil:
		if err := f.join(ctx); err != nil {
			return err
		}
		// A founding marker from an earlier start with Peers (a founding
		// that never happened) must not outlive the join, as below.
		return durable.Remove(filepath.Join(f.cfg.DataDir, foundingFile))
	case len(f.cfg.Peers) > 0:
		id, err := f.found(ctx)
		if err != nil {
			return err
		}
		if err := f.keepClusterID(id); err != nil {
			return err
		}
	default:
		// A lone node without state founds a new cluster, whatever
		// cluster-id says: an ID left behind names a cluster whose data
		// this directory no longer holds (or one that never bootstrapped),
		// and keeping it would let that cluster's members take this one
		// for theirs.
		if err := f.keepClusterID(uuid.NewString()); err != nil {
			return err
		}
	}
	if err := f.bootstrap(); err != nil {
		return err
	}
	// the log store holds state now, and says so; a founding marker left behind
	// would let a later, partly emptied directory skip the questions.
	return durable.Remove(filepath.Join(f.cfg.DataDir, foundingFile))
}

// keepClusterID makes id this node's cluster ID, in memory and in the
// data directory, before its Raft port opens.
func (f *founder) keepClusterID(id string) error {
	if err := durable.WriteFile(filepath.Join(f.cfg.DataDir, storage.ClusterFile), []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("keep the cluster ID: %w", err)
	}
	f.cluster.Store(id)
	return nil
}

// bootstrap writes the initial configuration of a new cluster: the fixed
// voter set, or this node alone when it has no peers.
func (f *founder) bootstrap() error {
	servers := []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(f.id), Address: raft.ServerAddress(f.addr)}}
	if len(f.cfg.Peers) > 0 {
		servers = nil
		for _, p := range f.cfg.Peers {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
		}
	}
	// Set before Raft can elect this node: establish, on the goroutine
	// that follows leadership, reads it, and the call below is what orders
	// the two. The marker makes it outlive a crash before the founding's
	// writes are done.
	if err := durable.WriteFile(filepath.Join(f.cfg.DataDir, unfinishedFile), []byte(unfinishedText), 0o600); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	f.bootstrapped = true
	f.unfinished.Store(true)
	err := f.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	f.logger.Info("bootstrapped a new cluster", "voters", len(servers))
	return nil
}

// found waits until every peer is ready to found the cluster (see above),
// and returns the cluster's ID: the one a peer with state already has, or
// the least of the candidates the founders offered.
func (f *founder) found(ctx context.Context) (string, error) {
	// The marker says this node saw every peer without state before: it
	// need not see that again, but it still waits for every peer to be
	// ready, or a peer that has not seen everyone yet would find it with
	// state and refuse itself.
	marker := filepath.Join(f.cfg.DataDir, foundingFile)
	if b, err := os.ReadFile(marker); err == nil {
		if c := strings.TrimSpace(string(b)); fsm.ValidateClusterID(c) == nil {
			f.offerCandidate(c)
		}
	}
	var others []Peer
	for _, p := range f.cfg.Peers {
		if p.ID != f.id {
			others = append(others, p)
		}
	}
	empty, ready := map[string]bool{}, map[string]bool{}
	candidates, existing := map[string]string{}, ""
	lastLog := time.Now()
	for {
		waiting := map[string]string{}
		for _, r := range f.probes.probeAll(ctx, others) {
			switch {
			case r.err != nil:
				waiting[r.peer.ID] = r.err.Error()
			case r.reply.ID != r.peer.ID:
				waiting[r.peer.ID] = fmt.Sprintf("the node at %s is %q, not %q", r.peer.RaftAddr, r.reply.ID, r.peer.ID)
			case r.reply.HasState && f.life.get() < phaseOffering:
				return "", f.refuseFounding(r.peer, r.reply)
			case r.reply.HasState && !slices.Contains(r.reply.Voters, f.id):
				// Not the cluster this founding made, which has every
				// founder a voter: one founded since by other means (a
				// peer founded alone from a backup, say). Taking its ID
				// and bootstrapping the founders' voter set would let
				// the others, empty, elect a leader of their own under it.
				return "", f.refuseFounding(r.peer, r.reply)
			case r.reply.HasState:
				empty[r.peer.ID], ready[r.peer.ID] = true, true
				existing = max(existing, r.reply.ClusterID)
			case r.reply.Ready && r.reply.Candidate != "":
				// (A peer ready without a candidate would be one whose
				// offer was read half-made: its candidate must count.)
				empty[r.peer.ID], ready[r.peer.ID] = true, true
				candidates[r.peer.ID] = r.reply.Candidate
			default:
				empty[r.peer.ID] = true
				waiting[r.peer.ID] = "not ready to found yet"
			}
		}
		if f.life.get() < phaseOffering && len(empty) == len(others) {
			if err := f.refuseLostCluster(); err != nil {
				return "", err
			}
			c := uuid.NewString()
			if err := durable.WriteFile(marker, []byte(c+"\n"), 0o600); err != nil {
				return "", fmt.Errorf("write %s: %w", marker, err)
			}
			f.offerCandidate(c)
			f.logger.Info("every peer answered without state; ready to found the cluster")
			continue
		}
		if f.life.get() >= phaseOffering && len(ready) == len(others) {
			if existing != "" { // a peer bootstrapped already, with the least candidate
				return existing, nil
			}
			id := f.candidate.Load().(string)
			for _, c := range candidates {
				if c != "" && c < id {
					id = c
				}
			}
			return id, nil
		}
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			f.logger.Info("founding the cluster: waiting for peers", "waiting", waitingList(waiting))
		}
		if err := sleepOr(ctx, f.shutdown, 200*time.Millisecond); err != nil {
			return "", fmt.Errorf("founding the cluster: still waiting for peers %s: %w", waitingList(waiting), err)
		}
	}
}

// offerCandidate makes this founder ready, offering c as the cluster's
// ID: the candidate is stored before the readiness, and foundingOffer
// reads them in the other order, so that a peer told "ready" is told the
// candidate too. Told "ready" with no candidate, a peer would leave this
// one's out of the least it takes, and the founders could bootstrap under
// two cluster IDs, each refusing the other's handshake.
func (f *founder) offerCandidate(c string) {
	f.candidate.Store(c)
	f.life.advance(phaseOffering)
}

// foundingOffer returns whether this founder is ready and its candidate
// (see offerCandidate).
func (f *founder) foundingOffer() (bool, string) {
	ready := f.life.get() >= phaseOffering
	candidate, _ := f.candidate.Load().(string)
	return ready, candidate
}

func waitingList(w map[string]string) string {
	var out []string
	for id, why := range w {
		out = append(out, id+": "+why)
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// refuseFounding explains why a node without state must not found or
// join through --peers: a peer holds the cluster's state.
func (f *founder) refuseFounding(p Peer, r *wire.ProbeReply) error {
	cluster := r.ClusterID
	if cluster == "" {
		cluster = "(not yet named)"
	}
	for _, v := range r.Voters {
		if v == f.id {
			return &storage.Error{Path: f.cfg.DataDir, Problem: fmt.Sprintf(
				"the directory holds no Raft state, but this node (%s) is a voter of cluster %s: peer %s at %s holds the cluster's state "+
					"(last index %d). This node's data is gone, and it must not vote or serve as if it had none",
				f.id, cluster, p.ID, p.RaftAddr, r.LastIndex)}
		}
	}
	return fmt.Errorf("refusing to start: peer %s at %s holds the state of cluster %s (last index %d), and this node (%s) "+
		"has none and is not one of its voters: start it with --join %s instead of --peers to add it as a new member",
		p.ID, p.RaftAddr, cluster, r.LastIndex, f.id, orDash(p.APIAddr))
}

func orDash(s string) string {
	if s == "" {
		return "<a member's HTTP address>"
	}
	return s
}

// join asks the members of cfg.Join in turn to add this node, until one
// does, or one refuses it for good.
func (f *founder) join(ctx context.Context) error {
	me := fsm.Member{ID: f.id, RaftAddr: f.addr, APIAddr: f.cfg.APIAddr, Nonvoter: f.cfg.Nonvoter}
	targets := f.cfg.Join
	if len(targets) == 0 {
		var err error
		if targets, err = f.cfg.JoinVia(ctx); err != nil {
			return err
		}
	}
	var last error
	for attempt := 0; ; attempt++ {
		for _, addr := range targets {
			if me.Nonvoter {
				// A member of an older release would drop the flag and
				// have this node promoted: ask only members that know it.
				if r, err := f.probes.probe(ctx, addr); err == nil && max(1, r.FeatureLevel) < fsm.KindLevel(fsm.KindSetMemberNonvoter) {
					return fmt.Errorf("refusing to start: --non-voter: the member at %s runs release %s, which cannot keep a member a non-voter; "+
						"finish the upgrade (rangealloc cluster finalize-upgrade) first", addr, orUnknown(r.Version))
				}
			}
			var reply wire.JoinReply
			_, err := f.fwd.Call(ctx, addr, wire.MethodJoin, me, &reply, nil)
			if err == nil {
				err = forward.FromWire(reply.Err)
			}
			var fe *fsm.Error
			switch {
			case err == nil:
				if reply.ClusterID != "" {
					if err := f.keepClusterID(reply.ClusterID); err != nil {
						return err
					}
				}
				f.logger.Info("joined the cluster as a non-voter; the leader promotes this node once it has caught up",
					"via", addr, "cluster_id", reply.ClusterID)
				return nil
			case errors.As(err, &fe) && fe.Code == fsm.CodeMemberDataLost:
				return &storage.Error{Path: f.cfg.DataDir, Problem: "the directory holds no Raft state, but " + fe.Message}
			case errors.As(err, &fe) && (fe.Code == fsm.CodeNodeNotEmpty || fe.Code == fsm.CodeVersionMismatch):
				return fmt.Errorf("refusing to start: joining through %s: %w", addr, err)
			}
			last = err
			if attempt%25 == 0 {
				f.logger.Warn("join attempt failed; retrying", "via", addr, "error", err)
			}
		}
		if err := sleepOr(ctx, f.shutdown, 200*time.Millisecond); err != nil {
			return fmt.Errorf("joining the cluster through %s: %w (last failure: %v)", strings.Join(targets, ", "), err, last)
		}
	}
}

// checkNewMember refuses a member row the state machine would refuse, or
// one without a Raft address.
func checkNewMember(m fsm.Member) error {
	if err := fsm.ValidateMember(m); err != nil {
		return err
	}
	if m.RaftAddr == "" {
		return &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: "member raft address is empty"}
	}
	return nil
}

// promoteLag is how close to the leader's last index a non-voter's
// applied index must be before it is promoted (health.go).
const promoteLag = 250

// ClusterID returns the ID of this node's cluster, "" until it has learned one.
func (n *Node) ClusterID() string { return n.founder.clusterID() }

// clusterID returns the cluster's ID, "" until learned.
func (f *founder) clusterID() string {
	id, _ := f.cluster.Load().(string)
	return id
}

// loadClusterID reads the cluster ID kept in the data directory.
func (f *founder) loadClusterID() error {
	b, err := os.ReadFile(filepath.Join(f.cfg.DataDir, storage.ClusterFile))
	if errors.Is(err, os.ErrNotExist) {
		f.cluster.Store("")
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", storage.ClusterFile, err)
	}
	f.cluster.Store(strings.TrimSpace(string(b)))
	return nil
}

// learnClusterID keeps the cluster ID the state machine learned, for a
// node that had none (a cluster from before IDs existed). One that had
// another keeps its own and says so loudly: its handshake then keeps it
// apart from the cluster whose state it holds, and an operator must look.
func (f *founder) learnClusterID(id string) {
	switch old := f.clusterID(); {
	case old == id:
	case old != "":
		f.logger.Error("the replicated state names another cluster than this data directory; keeping this directory's",
			"kept", old, "state", id)
	default:
		if err := f.keepClusterID(id); err != nil {
			f.logger.Error("could not keep the cluster ID", "error", err)
		}
		f.logger.Info("member of cluster", "cluster_id", id)
	}
}

// nameCluster makes the leader record the cluster's ID in the replicated
// state when it has none: the ID the node was founded with, or a new one
// for a cluster from before IDs existed.
func (f *founder) nameCluster(ctx context.Context) {
	if f.fsm.ClusterID() != "" {
		return
	}
	id := f.clusterID()
	if id == "" {
		id = uuid.NewString()
	}
	res, err := f.submit(ctx, &fsm.Request{Kind: fsm.KindSetClusterID, ClusterID: id})
	switch {
	case err != nil:
		f.logger.Warn("could not name the cluster", "error", err)
	case res.Err != nil:
		f.logger.Warn("could not name the cluster", "error", res.Err)
	}
}

// unfinishedFile marks a node that bootstrapped a cluster whose founding
// writes (the founders' member rows, the configured pools, the feature
// level) it has not yet seen done. Written, synced, before the bootstrap;
// removed once the founding's writes are seen done (finishFounding), and
// by a node that starts without state. A node that finds it at start, with
// state, founds again as leader: a crash or a power cut between the
// bootstrap and those writes would otherwise leave the cluster without
// its configured pools for good, since only the process that bootstrapped
// creates them. Each write carries a request ID, so writing them again
// changes nothing that was done.
const unfinishedFile = "founding-unfinished"

const unfinishedText = "this node bootstrapped a cluster whose founding writes (member rows, configured pools, feature level) it has not seen done\n"

// resumeFounding, on a node with state, takes up a founding the marker
// says is unfinished. It runs before Raft starts.
func (f *founder) resumeFounding() error {
	_, err := os.Stat(filepath.Join(f.cfg.DataDir, unfinishedFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("read %s: %w", unfinishedFile, err)
	}
	f.bootstrapped = true
	f.unfinished.Store(true)
	f.logger.Info("this node bootstrapped the cluster and its founding is unfinished: as leader it writes the configured pools")
	return nil
}

// finishFounding removes the unfinished-founding marker once the
// founding's writes are seen done: by this node's own leadership
// (written, each answered), or in the replicated state, where every
// configured pool exists or the feature level was raised (a founding
// leader's last write).
func (f *founder) finishFounding(written bool) {
	if !f.unfinished.Load() {
		return
	}
	if !written && f.fsm.FeatureLevel() <= 1 {
		for _, p := range f.cfg.Pools {
			if _, err := f.fsm.Pool(p.Name); err != nil {
				return
			}
		}
	}
	if err := durable.Remove(filepath.Join(f.cfg.DataDir, unfinishedFile)); err != nil {
		f.logger.Warn("could not remove the unfinished-founding marker; trying again later", "error", err)
		return
	}
	f.unfinished.Store(false)
}
