package jepsen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
)

// A storage fault kills a node, damages its data dir, and starts it again
// with its usual flags. The server must then either refuse to start (exit
// non-zero, its log naming the damage in a line with refusalLine) or start
// and serve; a wipe or a raft.db cut to nothing must be refused, since a
// node that starts from nothing can re-bootstrap and vote in terms it
// voted in before. After a refusal the harness does what the runbook tells
// an operator (remove the member through a live node, empty its data dir,
// start it with --join instead of --peers) and waits until the node is a
// voter again and has caught up.
//
// Today's build (before the server's storage checks) starts from nothing,
// or panics on a damaged file: the checks "storage loss refused" and
// "damaged node refused or served" flag it.

// refusalLine is what a server that refuses to start on a damaged data
// dir logs.
const refusalLine = "refusing to start"

// Bounds of the waits of a storage fault.
const (
	// verdictWithin bounds the wait for a restarted node to refuse or to
	// serve. A wiped node may ask its peers first, for a few seconds.
	verdictWithin = 30 * time.Second
	// runbookWithin bounds the runbook, from the removal to the caught-up
	// voter.
	runbookWithin = 30 * time.Second
)

// Verdict is what a node did when started on a damaged data dir.
type Verdict int

// Verdicts.
const (
	Refused Verdict = iota // exited non-zero, its log saying refusalLine
	Served                 // ran, knew a leader and applied what the cluster had before the fault
	Exited                 // exited without refusing: a panic, an error, status 0
	Hung                   // none of those within verdictWithin
)

func (v Verdict) String() string { return [...]string{"refused", "served", "exited", "hung"}[v] }

// Damage is what became of one storage fault.
type Damage struct {
	Fault Fault
	Node  string
	Role  string // leader or follower, when the fault began
	At    int64  // the kill, on the run's clock
	What  string // what was done to the data dir
	// Loss is set when the data dir lost everything the node wrote (a
	// wipe, a raft.db cut to 0 bytes): the node must refuse to start.
	Loss    bool
	Verdict Verdict
	Why     string // the refusal line, or what the node did instead
	// Runbook says what the runbook did ("" when the node served); when
	// RunbookErr is set, it did not bring the node back.
	Runbook    string
	RunbookErr error
}

// storage carries out a storage fault: kill, damage, hold, restart with
// the usual flags, wait for the verdict, and run the runbook unless the
// node served.
//
// A loss of the leader's data (a wipe, raft.db cut to nothing) is
// preceded by the situation that makes it dangerous: one follower is cut
// off for the hold, so that the leader and the other follower acknowledge
// entries it lacks. The cut heals as the wiped leader restarts. The
// cut-off follower, which has been campaigning all along, asks first: if
// the restarted node grants its vote from an empty (or emptied) store, it
// wins, and its log overwrites entries the cluster had acknowledged.
func (n *Nemesis) storage(ctx context.Context, s Step, leader int, term uint64) error {
	victim, role := leader, "leader"
	if !s.OnLeader {
		victim, role = n.others(leader)[s.Pick%2], "follower"
	}
	srv := n.C.Servers[victim]
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	target, err := n.C.AppliedIndex(actx, leader)
	cancel()
	if err != nil {
		n.Logf("skip %s: leader's applied index: %v", s.Fault, err)
		return nil
	}
	d := Damage{Fault: s.Fault, Node: srv.ID, Role: role, At: n.Now(), Loss: s.Fault == Wipe || s.Fault == TruncateLog && s.Variant == TruncateEmpty}
	w := Window{Fault: s.Fault, Start: d.At, MinorityOut: true,
		Detail: fmt.Sprintf("kill -9 %s %s (term %d, applied %d), damage its data dir, restart it", role, srv.ID, term, target)}
	lagger := -1
	if d.Loss && s.OnLeader {
		lagger = n.others(leader)[s.Pick%2]
		w.Detail = fmt.Sprintf("cut follower %s off for the hold, then kill -9 leader %s (term %d, applied %d), damage its data dir, restart it and heal the cut",
			n.C.Servers[lagger].ID, srv.ID, term, target)
	}
	n.mark("fault %s: %s", s.Fault, w.Detail)
	off, err := n.damage(ctx, s, victim, lagger, &d)
	if err != nil {
		return err
	}
	d.Verdict, d.Why = n.await(ctx, victim, off, target)
	n.mark("%s %s: %s", srv.ID, d.Verdict, d.Why)
	if err := n.bringBack(ctx, victim, &d); err != nil {
		return err
	}
	w.End = n.Now()
	n.mu.Lock()
	n.windows = append(n.windows, w)
	n.damages = append(n.damages, d)
	n.mu.Unlock()
	n.mark("heal %s", s.Fault)
	return nil
}

// damage cuts lagger off for the hold (unless it is -1), kills node
// victim, damages its data dir as s says, holds it down (when no node was
// cut off), and starts it again with its usual flags, healing the cut. It
// fills in d.What and returns the size of the node's log before the start.
func (n *Nemesis) damage(ctx context.Context, s Step, victim, lagger int, d *Damage) (int64, error) {
	srv := n.C.Servers[victim]
	if lagger >= 0 {
		if err := n.C.Lab.Drop(lagger, Both, n.others(lagger)...); err != nil {
			return 0, err
		}
		sleep(ctx, s.Hold)
	}
	if err := srv.Kill(); err != nil {
		return 0, err
	}
	var err error
	switch s.Fault {
	case Wipe:
		d.What, err = wipeDir(srv.DataDir)
	case TruncateLog:
		d.What, err = truncateLog(srv.DataDir, s.Variant)
	case Corrupt:
		d.What, err = corrupt(srv.DataDir, s.Variant)
	case PowerCutOne:
		d.What, err = n.C.cutPower(victim)
	}
	if err != nil {
		return 0, fmt.Errorf("%s of %s: %w", s.Fault, srv.ID, err)
	}
	n.mark("%s: %s", srv.ID, d.What)
	if lagger < 0 {
		sleep(ctx, s.Hold)
	}
	off := srv.LogSize()
	if err := srv.StartDamaged(); err != nil {
		return 0, err
	}
	if lagger >= 0 {
		if err := n.C.Lab.Heal(); err != nil {
			return 0, err
		}
		n.mark("healed the cut of %s", n.C.Servers[lagger].ID)
	}
	return off, nil
}

// bringBack acts on d's verdict about node i: a node that served is
// settled; one that refused, exited or hung (it is killed first) is
// brought back by the runbook, whose outcome goes into d.
func (n *Nemesis) bringBack(ctx context.Context, i int, d *Damage) error {
	srv := n.C.Servers[i]
	switch d.Verdict {
	case Served:
		srv.Settle()
		return nil
	case Hung:
		if err := srv.Kill(); err != nil {
			return err
		}
	}
	d.Runbook, d.RunbookErr = n.runbook(ctx, i)
	if d.RunbookErr != nil {
		n.mark("runbook for %s failed: %s: %v", srv.ID, d.Runbook, d.RunbookErr)
	} else {
		n.mark("runbook for %s: %s", srv.ID, d.Runbook)
	}
	return nil
}

// await waits for node i, started on a damaged data dir, to refuse to
// start or to serve: to know a leader and to have applied target (what the
// cluster had applied before the fault). off is the size of its log before
// the start.
func (n *Nemesis) await(ctx context.Context, i int, off int64, target uint64) (Verdict, string) {
	srv := n.C.Servers[i]
	deadline := time.Now().Add(verdictWithin)
	last := "no answer"
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if exited, err := srv.Exit(); exited {
			log := srv.LogSince(off)
			if line := firstLineWith(log, refusalLine); err != nil && line != "" {
				return Refused, fmt.Sprintf("%v: %s", err, brief(line, srv.DataDir))
			}
			status := "status 0"
			if err != nil {
				status = err.Error()
			}
			if line := firstLineWith(log, "panic:", "fatal error:", "Error:"); line != "" {
				return Exited, fmt.Sprintf("exited (%s) without %q: %s", status, refusalLine, brief(line, srv.DataDir))
			}
			return Exited, fmt.Sprintf("exited (%s) without %q; its log ends: %s", status, refusalLine, lastLines(log, 3))
		}
		actx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := n.C.ctl[i].Cluster(actx)
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case st.Leader.ID != "" && st.AppliedIndex >= target:
			return Served, fmt.Sprintf("started and served: leader %s, applied %d (the cluster had applied %d before the fault)",
				st.Leader.ID, st.AppliedIndex, target)
		default:
			last = fmt.Sprintf("leader %q, applied %d of %d", st.Leader.ID, st.AppliedIndex, target)
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return Hung, fmt.Sprintf("neither refused to start nor served within %s (last: %s)", verdictWithin, last)
}

// runbook brings back node i, which is stopped, the way the runbook tells
// an operator: remove the member through a live node, remove its data dir,
// start it with --join (a live member) instead of --peers, and wait until
// the leader lists it as a voter and it has applied what the leader had
// committed when it started. It returns what it did.
func (n *Nemesis) runbook(ctx context.Context, i int) (string, error) {
	srv := n.C.Servers[i]
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, runbookWithin)
	defer cancel()
	via := -1
	err := poll(ctx, 200*time.Millisecond, "remove "+srv.ID, func() (bool, string) {
		l, _ := n.C.Leader(ctx)
		if l < 0 {
			return false, "no leader"
		}
		err := n.C.admin[l].RemoveMember(ctx, srv.ID)
		var ce *client.Error
		if err == nil || errors.As(err, &ce) && ce.Code == "MemberNotFound" {
			via = l
			return true, ""
		}
		return false, err.Error()
	})
	if err != nil {
		return "", err
	}
	did := fmt.Sprintf("removed %s via %s", srv.ID, n.C.Servers[via].ID)
	if err := os.RemoveAll(srv.DataDir); err != nil {
		return did, err
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	st, err := n.C.ctl[via].Cluster(actx)
	cancel()
	if err != nil {
		return did, fmt.Errorf("leader's commit index: %w", err)
	}
	target := st.CommitIndex
	if err := srv.StartJoin(n.C.Servers[via].API); err != nil {
		return did, err
	}
	did += fmt.Sprintf(", emptied its data dir, started it with --join %s", n.C.Servers[via].API)
	var exit error
	err = poll(ctx, 200*time.Millisecond, srv.ID+" a caught-up voter", func() (bool, string) {
		if exited, err := srv.Exit(); exited {
			exit = fmt.Errorf("%s exited (%v); its log ends: %s", srv.ID, err, lastLines(srv.LogSince(0), 4))
			return true, ""
		}
		l, _ := n.C.Leader(ctx)
		if l < 0 {
			return false, "no leader"
		}
		ms, err := n.C.Members(ctx, l)
		if err != nil {
			return false, err.Error()
		}
		voter := slices.ContainsFunc(ms, func(m api.ClusterMember) bool { return m.ID == srv.ID && m.Voter })
		st, err := n.C.ctl[i].Cluster(ctx)
		if err != nil {
			return false, fmt.Sprintf("voter %t: %v", voter, err)
		}
		return voter && st.AppliedIndex >= target, fmt.Sprintf("voter %t, applied %d of %d", voter, st.AppliedIndex, target)
	})
	if err = errors.Join(err, exit); err != nil {
		return did, err
	}
	return did + fmt.Sprintf("; a voter that applied %d after %s", target, time.Since(start).Round(100*time.Millisecond)), nil
}

// firstLineWith returns the first line of log that contains any of ss,
// or "".
func firstLineWith(log string, ss ...string) string {
	for _, l := range strings.Split(log, "\n") {
		for _, s := range ss {
			if strings.Contains(l, s) {
				return strings.TrimSpace(l)
			}
		}
	}
	return ""
}

// brief shortens a server's log line for the summary: the data dir's
// path becomes <data-dir>, and the line is cut to 240 bytes.
func brief(line, dataDir string) string {
	line = strings.ReplaceAll(line, dataDir, "<data-dir>")
	if len(line) > 240 {
		line = line[:240] + "…"
	}
	return line
}

// lastLines returns the last n non-empty lines of log, joined by " | ",
// each cut to 200 bytes.
func lastLines(log string, n int) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l[:min(len(l), 200)])
		}
	}
	return strings.Join(out[max(len(out)-n, 0):], " | ")
}
