package jepsen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Window is the time a fault was in force, on the run's clock.
type Window struct {
	Fault  Fault
	Detail string
	Start  int64
	End    int64
	// MinorityOut: a minority was cut off, down or paused while the
	// majority stayed connected and up (Fault.MinorityOut).
	MinorityOut bool
}

// Nemesis carries out a plan against a cluster and logs every fault and
// heal with its time.
type Nemesis struct {
	C   *Cluster
	Now func() int64
	Out io.Writer // nemesis.log
	// BeforeResume, when set, is called with the paused leader's index
	// burstLead before it is resumed.
	BeforeResume func(node int)

	// mu guards the following.
	mu      sync.Mutex
	windows []Window
	damages []Damage      // the storage faults' outcomes
	joins   []JoinAttempt // the mistaken joins' outcomes
	stalls  []Stall       // the disk stalls
}

// Logf writes one timestamped line to the nemesis log.
func (n *Nemesis) Logf(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fmt.Fprintf(n.Out, "%9.3fs %s\n", float64(n.Now())/1e9, fmt.Sprintf(format, args...))
}

// mark logs a fault or a heal in the nemesis log and in every server's
// log.
func (n *Nemesis) mark(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	n.Logf("%s", line)
	for _, s := range n.C.Servers {
		s.Mark(fmt.Sprintf("%.3fs %s", float64(n.Now())/1e9, line))
	}
}

// Windows returns the faults carried out so far.
func (n *Nemesis) Windows() []Window {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Window(nil), n.windows...)
}

// Damages returns the outcomes of the storage faults carried out so far.
func (n *Nemesis) Damages() []Damage {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Damage(nil), n.damages...)
}

// Joins returns the outcomes of the mistaken joins carried out so far.
func (n *Nemesis) Joins() []JoinAttempt {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]JoinAttempt(nil), n.joins...)
}

// Run carries out plan, one step after another, then heals everything.
// It stops early only when ctx ends (an interrupted run).
func (n *Nemesis) Run(ctx context.Context, plan []Step) error {
	for i, s := range plan {
		if ctx.Err() != nil {
			break
		}
		n.Logf("step %d/%d: %s", i+1, len(plan), s)
		if err := n.step(ctx, s); err != nil {
			n.Logf("error: %v", err)
			return errors.Join(err, n.HealAll())
		}
		sleep(ctx, s.Rest)
	}
	return n.HealAll()
}

// HealAll removes every partition, resumes paused servers and starts
// stopped ones.
func (n *Nemesis) HealAll() error {
	errs := []error{n.C.Lab.Heal()}
	for _, s := range n.C.Servers {
		if up, paused := s.Running(); paused {
			errs = append(errs, s.Resume())
		} else if !up {
			errs = append(errs, s.Start())
		}
	}
	n.mark("heal all")
	return errors.Join(errs...)
}

// restartDown starts every server that is down between steps: one that
// crashed (the crash is recorded already), or one that the runbook could
// not bring back. A supervisor would restart it too; without this, one
// crash takes the next fault below a majority, and every later step waits
// for a leader in vain.
func (n *Nemesis) restartDown() error {
	var errs []error
	for _, s := range n.C.Servers {
		if up, _ := s.Running(); !up {
			n.mark("restart %s, which is down", s.ID)
			errs = append(errs, s.Start())
		}
	}
	return errors.Join(errs...)
}

// step injects one fault, holds it, and heals it.
func (n *Nemesis) step(ctx context.Context, s Step) error {
	if err := n.restartDown(); err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	leader, term, err := n.C.WaitLeader(lctx)
	cancel()
	if err != nil {
		n.Logf("skip %s: %v", s.Fault, err)
		return nil
	}
	switch {
	case s.Fault == SnapshotCatchUp:
		return n.snapshotCatchUp(ctx, s, leader, n.others(leader)[s.Pick%2], term)
	case s.Fault.Storage():
		return n.storage(ctx, s, leader, term)
	case s.Fault == MistakenJoin:
		return n.mistakenJoin(ctx, s, leader, term)
	case s.Fault == PowerCutAll:
		return n.powerCutAll(ctx, s, leader, term)
	case s.Fault == DiskStall:
		return n.diskStall(ctx, s, leader, term)
	}
	detail, apply, heal := n.prepare(ctx, &s, leader, term)
	if apply == nil {
		return fmt.Errorf("unknown fault %q", s.Fault)
	}
	w := Window{Fault: s.Fault, Detail: detail, Start: n.Now(), MinorityOut: s.Fault.MinorityOut()}
	n.mark("fault %s: %s", s.Fault, detail)
	if err := apply(); err != nil {
		return fmt.Errorf("%s: %w", s.Fault, err)
	}
	sleep(ctx, s.Hold)
	err = heal()
	w.End = n.Now()
	n.mu.Lock()
	n.windows = append(n.windows, w)
	n.mu.Unlock()
	n.mark("heal %s", s.Fault)
	return err
}

// others returns every node but i.
func (n *Nemesis) others(i int) []int {
	var out []int
	for j := range n.C.Servers {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

// prepare says what fault s does to the cluster whose leader is leader,
// and returns functions that inject it and heal it (nil for an unknown
// fault). It may shorten s.Hold by the time heal takes.
func (n *Nemesis) prepare(ctx context.Context, s *Step, leader int, term uint64) (detail string, apply, heal func() error) {
	lab, srv, L := n.C.Lab, n.C.Servers[leader], n.C.Servers[leader].ID
	drop := func(i int, dir Direction, peers ...int) func() error {
		return func() error { return lab.Drop(i, dir, peers...) }
	}
	switch s.Fault {
	case IsolateLeader:
		return fmt.Sprintf("leader %s (term %d) cut off from both peers", L, term), drop(leader, Both, n.others(leader)...), lab.Heal
	case IsolateFollower:
		f := n.others(leader)[s.Pick%2]
		return fmt.Sprintf("follower %s cut off from both peers (leader %s, term %d)", n.C.Servers[f].ID, L, term),
			drop(f, Both, n.others(f)...), lab.Heal
	case BridgeFault:
		b := s.Pick % 3
		o := n.others(b)
		return fmt.Sprintf("%s sees %s and %s, which do not see each other (leader %s, term %d)",
				n.C.Servers[b].ID, n.C.Servers[o[0]].ID, n.C.Servers[o[1]].ID, L, term),
			func() error { return errors.Join(lab.Drop(o[0], Both, o[1]), lab.Drop(o[1], Both, o[0])) }, lab.Heal
	case OneWay:
		return fmt.Sprintf("leader %s (term %d) drops %s packets of both peers", L, term, s.Dir),
			drop(leader, s.Dir, n.others(leader)...), lab.Heal
	case KillLeader:
		return fmt.Sprintf("kill -9 leader %s (term %d)", L, term), srv.Kill, srv.Start
	case KillAll:
		return fmt.Sprintf("kill -9 n1, n2, n3 (leader %s, term %d)", L, term), n.C.Close, n.C.Start
	case PauseLeader:
		heal = srv.Resume
		if n.BeforeResume != nil && s.Hold > burstLead {
			s.Hold -= burstLead
			heal = func() error {
				n.mark("burst of reads to %s", L)
				n.BeforeResume(leader)
				sleep(ctx, burstLead)
				return srv.Resume()
			}
		}
		return fmt.Sprintf("SIGSTOP leader %s (term %d)", L, term), srv.Pause, heal
	}
	return "", nil, nil
}

// burstLead is how long before resuming a paused leader the nemesis calls
// BeforeResume: long enough for the requests to be queued at the node.
const burstLead = 300 * time.Millisecond

// snapshotCatchUp cuts follower f off and holds the partition until the
// leader has applied enough entries past the follower to have taken a
// snapshot and compacted its log beyond what f holds, so that f can only
// catch up by InstallSnapshot. After the heal it waits a few seconds for
// f to log the install.
func (n *Nemesis) snapshotCatchUp(ctx context.Context, s Step, leader, f int, term uint64) error {
	srv := n.C.Servers[f]
	before := countInLog(srv.LogPath, snapshotInstalled)
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	base, err := n.C.AppliedIndex(actx, leader)
	cancel()
	if err != nil {
		n.Logf("skip %s: leader's applied index: %v", s.Fault, err)
		return nil
	}
	t := n.C.Tuning
	need := base + uint64(2*t.SnapshotThreshold+t.TrailingLogs)
	detail := fmt.Sprintf("follower %s cut off until leader %s (term %d) applies past %d (now %d)", srv.ID, n.C.Servers[leader].ID, term, need, base)
	w := Window{Fault: s.Fault, Detail: detail, Start: n.Now(), MinorityOut: true}
	n.mark("fault %s: %s", s.Fault, detail)
	if err := n.C.Lab.Drop(f, Both, n.others(f)...); err != nil {
		return err
	}
	sleep(ctx, s.Hold)
	deadline := time.Now().Add(15 * time.Second)
	var applied uint64
	for ctx.Err() == nil && time.Now().Before(deadline) {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		l, _ := n.C.Leader(actx)
		if l >= 0 && l != f {
			applied, _ = n.C.AppliedIndex(actx, l)
		}
		cancel()
		if applied >= need {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	// Two snapshot checks more, so that a snapshot past need exists.
	sleep(ctx, 4*t.SnapshotInterval)
	err = n.C.Lab.Heal()
	w.End = n.Now()
	n.mu.Lock()
	n.windows = append(n.windows, w)
	n.mu.Unlock()
	n.mark("heal %s: leader applied %d", s.Fault, applied)
	for i := 0; i < 50 && ctx.Err() == nil; i++ {
		if countInLog(srv.LogPath, snapshotInstalled) > before {
			n.Logf("%s installed a snapshot from the leader", srv.ID)
			return err
		}
		sleep(ctx, 100*time.Millisecond)
	}
	n.Logf("%s caught up without installing a snapshot", srv.ID)
	return err
}

// Lines the servers log that the harness counts.
const (
	snapshotInstalled = "Installed remote snapshot"
	enteredLeader     = "entering leader state"
)

// countInLog counts the lines of a log file that contain s.
func countInLog(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(s))
}

// Monitor logs every change of leader or term it sees, polling until ctx
// ends.
func (n *Nemesis) Monitor(ctx context.Context) {
	var last string
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		l, term := n.C.Leader(actx)
		cancel()
		now := "no leader"
		if l >= 0 {
			now = fmt.Sprintf("leader %s term %d", n.C.Servers[l].ID, term)
		}
		if now != last && ctx.Err() == nil {
			n.Logf("observe %s", now)
			last = now
		}
		sleep(ctx, 250*time.Millisecond)
	}
}
