package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// How a cluster of two releases stays whole during a rolling upgrade.
//
// The cluster's feature level (fsm/feature.go) is replicated. A leader
// proposes an entry kind only when the level has it (checkKindLevel), and
// snapshots are written in the format of the level, so a node of the
// previous release never receives what it cannot read. The level goes up
// only through FinalizeUpgrade, which first asks every member of the
// configuration which level its binary supports: one that is older or
// does not answer keeps it where it is. Until then any node may be rolled
// back to the previous release; after it, not (the level never goes
// down). A new cluster, all of one release, starts at its founders'
// common level (raiseOnFounding). A node joins only if its binary supports
// the cluster's level (checkJoinLevel). memberMu keeps a join and a raise
// from deciding on a membership the other is changing.

// featureLevels decides the cluster's feature level on the leader: what
// a proposal may carry (checkKind), whom a join may add (checkJoinLevel),
// and how far the level may rise (raise). The level itself is the state
// machine's; memberMu is the Node's (a join and a raise hold it).
type featureLevels struct {
	fsm      *fsm.FSM
	self     string // this node's ID
	max      int    // the highest level this binary supports (Config.maxFeatureLevel)
	memberMu *sync.Mutex
	logger   hclog.Logger

	// What it acts through: the leader's catch-up (Node.catchUp), the
	// members of the configuration and a probe of each, the node's
	// write path, whether it still leads, and a sleep that ends at
	// shutdown.
	catchUp       func(context.Context) error
	configuration func() ([]raft.Server, error)
	probeAll      func(context.Context, []Peer) []probeResult
	submit        func(context.Context, *fsm.Request) (*fsm.Result, error)
	leading       func() bool
	sleep         func(context.Context, time.Duration) error
	// probeLeader probes the leader this node knows of (an error when it
	// knows none).
	probeLeader func(context.Context) (*wire.ProbeReply, error)
}

// checkKindLevel refuses a request of a kind the cluster's level does not
// have yet. The raise itself is exempt: FinalizeUpgrade checks members.
func checkKindLevel(k fsm.Kind, level int) *fsm.Error {
	if need := fsm.KindLevel(k); need > level && k != fsm.KindSetFeatureLevel {
		return &fsm.Error{Code: fsm.CodeVersionMismatch, Op: -1, Message: fmt.Sprintf(
			"%s needs feature level %d, and the cluster is at %d: upgrade every member, then run rangealloc cluster finalize-upgrade",
			k, need, level)}
	}
	return nil
}

// checkKind is checkKindLevel on this leader's level. A follower proposes
// a kind once it has applied the level that has it, which a leader just
// elected may not have applied yet: before it refuses, the leader catches
// up and looks again. A catch-up that fails for a lost lead, or ends with
// ctx, refuses nothing: the outcome's err says so, and nothing was
// proposed.
func (l *featureLevels) checkKind(ctx context.Context, k fsm.Kind) outcome {
	e := checkKindLevel(k, l.fsm.FeatureLevel())
	if e == nil {
		return outcome{}
	}
	if err := l.catchUp(ctx); err != nil {
		if lostLead(err) || errors.Is(err, raft.ErrRaftShutdown) {
			err = ErrNotLeader
		}
		return outcome{err: err, definite: true}
	}
	if e = checkKindLevel(k, l.fsm.FeatureLevel()); e != nil {
		return outcome{res: &fsm.Result{Err: e}}
	}
	return outcome{}
}

// catchUp makes this leader's state machine apply everything committed
// before the call, within ctx. A leader that has applied an entry of its
// term waits for its commit index; one that has not (its commit index may
// be below what the leader before it committed) commits an empty entry.
func (n *Node) catchUp(ctx context.Context) error {
	if n.leader.ready.Load() {
		return n.fsm.WaitApplied(ctx, n.raft.CommitIndex())
	}
	done := make(chan error, 1)
	go func() { done <- n.wait(n.raft.Apply(fsm.EncodeBatch(nil), 0)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// atLeast tells whether the cluster's feature level is at least
// level, for a proposer choosing an entry kind. This node's own view may
// lag a raise committed just before (finalize-upgrade, or a new cluster's
// founding, which raises its level in an entry). So when its view is
// lower, a leader catches up (catchUp), and a follower asks the leader,
// which leads only once it has applied an entry of its term, for the level
// it has applied. Both are best effort: on any failure this node's view
// answers, and it is never above the cluster's.
func (l *featureLevels) atLeast(ctx context.Context, level int) bool {
	if l.fsm.FeatureLevel() >= level {
		return true
	}
	if l.leading() {
		_ = l.catchUp(ctx)
	} else if r, err := l.probeLeader(ctx); err == nil && r.Leader && r.ClusterLevel >= level {
		return true
	}
	return l.fsm.FeatureLevel() >= level
}

// refusedForLevel tells whether res is checkKindLevel's refusal, which a
// proposer decides without the request table.
func refusedForLevel(res *fsm.Result) bool {
	return res != nil && res.Err != nil && res.Err.Code == fsm.CodeVersionMismatch
}

// FinalizeUpgrade raises the cluster's feature level to the highest that
// every member's binary supports, and returns the level the cluster is at
// then. It refuses (CodeVersionMismatch) while a member does not answer,
// or while every member is not yet on a release with a higher level than
// the cluster's: it names them. After it, no member can go back to an
// older release.
func (n *Node) FinalizeUpgrade(ctx context.Context) error {
	if !n.IsLeader() {
		// Ask the members from here first: a leader of an older release
		// has no finalize to run, and this node can name who holds the
		// level back.
		if _, _, err := n.levels.planRaise(ctx); err != nil {
			return err
		}
	}
	return n.onLeader(ctx, wire.MethodFinalizeUpgrade, 0, "", func() error {
		_, err := n.levels.raise(ctx)
		return err
	})
}

// planRaise returns the cluster's level and the level every member
// supports, or why the level stays: a silent member, or one whose release
// supports no higher level than the cluster's.
func (l *featureLevels) planRaise(ctx context.Context) (cur, target int, err error) {
	cur = l.fsm.FeatureLevel()
	target, behind, err := l.commonLevel(ctx)
	if err != nil {
		return cur, cur, err
	}
	if target <= cur && cur < l.max {
		return cur, cur, &fsm.Error{Code: fsm.CodeVersionMismatch, Op: -1, Message: fmt.Sprintf(
			"the cluster stays at feature level %d: members %s support no higher level; upgrade them first", cur, strings.Join(behind, ", "))}
	}
	return cur, max(cur, target), nil
}

// raise, on the leader, raises the level to what every member supports
// and returns it.
func (l *featureLevels) raise(ctx context.Context) (int, error) {
	l.memberMu.Lock()
	defer l.memberMu.Unlock()
	cur, target, err := l.planRaise(ctx)
	if err != nil || target == cur {
		return cur, err // an error, or nothing newer to finalize
	}
	res, err := l.submit(ctx, &fsm.Request{Kind: fsm.KindSetFeatureLevel, FeatureLevel: uint64(target)})
	if err != nil {
		return cur, err
	}
	if res.Err != nil {
		return cur, res.Err
	}
	l.logger.Info("raised the cluster's feature level", "from", cur, "to", target)
	return target, nil
}

// commonLevel asks every member of the configuration which feature level
// its binary supports and returns the least, with the members below this
// build's. A member that does not answer is an error: its release is not
// known.
func (l *featureLevels) commonLevel(ctx context.Context) (int, []string, error) {
	servers, err := l.configuration()
	if err != nil {
		return 0, nil, err
	}
	var peers []Peer
	for _, s := range servers {
		if string(s.ID) != l.self {
			peers = append(peers, Peer{ID: string(s.ID), RaftAddr: string(s.Address)})
		}
	}
	level := l.max
	var behind, silent []string
	for _, r := range l.probeAll(ctx, peers) {
		switch {
		case r.err != nil:
			silent = append(silent, fmt.Sprintf("%s (%v)", r.peer.ID, r.err))
		case r.reply.ID != r.peer.ID:
			silent = append(silent, fmt.Sprintf("%s (the node at %s is %q)", r.peer.ID, r.peer.RaftAddr, r.reply.ID))
		default:
			lv := max(1, r.reply.FeatureLevel)
			if lv < l.max {
				behind = append(behind, fmt.Sprintf("%s (release %s, level %d)", r.peer.ID, orUnknown(r.reply.Version), lv))
			}
			level = min(level, lv)
		}
	}
	sort.Strings(behind)
	sort.Strings(silent)
	if len(silent) > 0 {
		return 0, nil, &silentError{&fsm.Error{Code: fsm.CodeVersionMismatch, Op: -1, Message: fmt.Sprintf(
			"cannot raise the feature level: members %s did not say which release they run", strings.Join(silent, ", "))}}
	}
	return level, behind, nil
}

// silentError is commonLevel's refusal while a member has not answered:
// the founding leader waits for it, where an older release would not
// change by waiting.
type silentError struct{ err *fsm.Error }

func (e *silentError) Error() string { return e.err.Error() }
func (e *silentError) Unwrap() error { return e.err }

func orUnknown(v string) string {
	if v == "" {
		return "before versions"
	}
	return v
}

// checkJoinLevel refuses a newcomer whose binary does not support the
// cluster's feature level: it would stop at the first entry it cannot read.
func (l *featureLevels) checkJoinLevel(id, release string, supported int) *fsm.Error {
	if cur := l.fsm.FeatureLevel(); max(1, supported) < cur {
		return &fsm.Error{Code: fsm.CodeVersionMismatch, Op: -1, Message: fmt.Sprintf(
			"node %s runs release %s, which supports feature level %d, and the cluster is at %d: install this cluster's release on it",
			id, orUnknown(release), max(1, supported), cur)}
	}
	return nil
}

// raiseOnFounding makes a new cluster's first leader raise the level to
// what its founders support, retrying while one has not answered yet
// (until establish's deadline; then finalize-upgrade raises it).
func (l *featureLevels) raiseOnFounding(ctx context.Context) {
	for {
		level, err := l.raise(ctx)
		if err == nil {
			l.logger.Info("the cluster's feature level", "level", level)
			return
		}
		var silent *silentError
		if !errors.As(err, &silent) || !l.leading() || l.sleep(ctx, time.Second) != nil {
			l.logger.Info("the new cluster stays at feature level 1 for now; rangealloc cluster finalize-upgrade raises it", "reason", err)
			return
		}
	}
}

// maxFeatureLevel is the highest level this node's binary supports, as it
// tells others: fsm.MaxFeatureLevel, unless Config.MaxFeatureLevel makes
// it pretend to be an older release.
func (c *Config) maxFeatureLevel() int {
	if l := c.MaxFeatureLevel; l > 0 && l < fsm.MaxFeatureLevel {
		return l
	}
	return fsm.MaxFeatureLevel
}

// newFeatureLevels builds n's feature-level decisions: what they read and
// what they act through.
func newFeatureLevels(n *Node) *featureLevels {
	return &featureLevels{fsm: n.fsm, self: n.id, max: n.cfg.maxFeatureLevel(), memberMu: &n.memberMu, logger: n.logger,
		catchUp: n.catchUp,
		configuration: func() ([]raft.Server, error) {
			f := n.raft.GetConfiguration()
			if err := f.Error(); err != nil {
				return nil, err
			}
			return f.Configuration().Servers, nil
		},
		probeAll: func(ctx context.Context, peers []Peer) []probeResult { return n.probes.probeAll(ctx, peers) },
		submit:   n.submit, leading: n.IsLeader,
		sleep: func(ctx context.Context, d time.Duration) error { return sleepOr(ctx, n.shutdown, d) },
		probeLeader: func(ctx context.Context) (*wire.ProbeReply, error) {
			addr, _ := n.raft.LeaderWithID()
			if addr == "" {
				return nil, ErrNoLeader
			}
			return n.probes.probe(ctx, string(addr))
		}}
}
