package jepsen

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rangealloc/rangealloc/test/checker"
)

// Evidence is what a run must have seen for its verdict to mean anything:
// a run in which no leader changed, every outcome was known, no follower
// installed a snapshot, or nothing succeeded under a fault, passes the
// checkers without having tested what they are for.
type Evidence struct {
	// LeaderChanges counts the elections won after the first (the
	// servers' "entering leader state" lines, minus one).
	LeaderChanges int
	// Unknown counts the attempts whose outcome was unknown.
	Unknown int
	// SnapshotInstalls counts the servers' "Installed remote snapshot"
	// lines, but for RebuildInstalls.
	SnapshotInstalls int
	// RebuildInstalls counts the first snapshot each node installed after
	// a start on a data dir that a storage fault damaged or the runbook
	// emptied: a node that starts from nothing catches up that way as a
	// matter of course, so these installs are no evidence that a follower
	// with state was brought forward by InstallSnapshot.
	RebuildInstalls int
	// OKUnderFault counts the acknowledged operations that began and
	// ended while a fault had a minority out (Window.MinorityOut).
	OKUnderFault int
	// Recovery is the slowest return to service after a heal (a figure,
	// not a check).
	Recovery Recovery
}

// Recovery is the longest time, over every heal and every node, from the
// heal to the return of the first write sent to that node after it that
// the cluster answered: acknowledged, or refused by the state machine
// (anything but NoLeader, a refused connection, or an unknown outcome).
type Recovery struct {
	Wait  time.Duration
	Node  string
	Fault Fault
	// Never is set when a node answered no write sent after a heal before
	// the run ended; Node and Fault then name the first such case.
	Never bool
}

func (r Recovery) String() string {
	switch {
	case r.Never:
		return fmt.Sprintf("%s answered no write after the heal of %s", r.Node, r.Fault)
	case r.Node == "":
		return "no heal"
	}
	return fmt.Sprintf("%v (%s after %s)", r.Wait.Round(time.Millisecond), r.Node, r.Fault)
}

// answered reports whether the cluster answered a write.
func answered(op checker.Op) bool {
	switch {
	case op.Kind != checker.KindAllocate && op.Kind != checker.KindRelease && !checker.IsServiceKind(op.Kind):
		return false
	case op.Outcome == checker.OK:
		return true
	}
	return op.Outcome == checker.Fail && op.Err != "NoLeader" && op.Err != "ConnRefused"
}

// recovery finds the slowest return to service after the heals of windows.
func recovery(h checker.History, windows []Window) Recovery {
	var nodes []string
	for _, op := range h {
		if op.Node != "" && !slices.Contains(nodes, op.Node) {
			nodes = append(nodes, op.Node)
		}
	}
	slices.Sort(nodes)
	var r Recovery
	for _, w := range windows {
		for _, n := range nodes {
			first := int64(-1)
			for _, op := range h {
				if op.Node == n && op.Call >= w.End && answered(op) && (first < 0 || op.Return < first) {
					first = op.Return
				}
			}
			switch {
			case first < 0 && !r.Never:
				r = Recovery{Node: n, Fault: w.Fault, Never: true}
			case first >= 0 && !r.Never && (r.Node == "" || time.Duration(first-w.End) > r.Wait):
				r = Recovery{Wait: time.Duration(first - w.End), Node: n, Fault: w.Fault}
			}
		}
	}
	return r
}

// Gather counts the evidence of a run from its history, its fault windows
// and the servers' logs.
func Gather(h checker.History, windows []Window, logs []string) Evidence {
	var e Evidence
	elections := 0
	for _, l := range logs {
		elections += strings.Count(l, enteredLeader)
		rebuilt := false // since the last start, which was after damage; no install yet
		for _, line := range strings.Split(l, "\n") {
			switch {
			case strings.HasPrefix(line, startLine):
				rebuilt = strings.Contains(line, afterDamage)
			case strings.Contains(line, snapshotInstalled) && rebuilt:
				e.RebuildInstalls++
				rebuilt = false
			case strings.Contains(line, snapshotInstalled):
				e.SnapshotInstalls++
			}
		}
	}
	e.LeaderChanges = max(elections-1, 0)
	e.Recovery = recovery(h, windows)
	for _, op := range h {
		switch op.Outcome {
		case checker.Unknown:
			e.Unknown++
		case checker.OK:
			for _, w := range windows {
				if w.MinorityOut && op.Call >= w.Start && op.Return <= w.End {
					e.OKUnderFault++
					break
				}
			}
		}
	}
	return e
}

// Check fails the evidence when any of its counts is zero; Checked counts
// the four kinds of evidence.
func (e Evidence) Check() checker.Report {
	rep := checker.Report{Name: "not vacuous", OK: true, Checked: 4}
	need := func(n int, what string) {
		if n == 0 {
			rep.OK = false
			rep.Problems = append(rep.Problems, "vacuous run: "+what)
		}
	}
	need(e.LeaderChanges, "no leader change")
	need(e.Unknown, "no operation with an unknown outcome")
	need(e.SnapshotInstalls, "no follower installed a snapshot")
	need(e.OKUnderFault, "no operation succeeded while a fault left a majority connected")
	return rep
}

func (e Evidence) String() string {
	return fmt.Sprintf("%d leader changes, %d unknown outcomes, %d snapshot installs (and %d by rebuilt nodes), %d ok under a minority fault; slowest recovery after a heal: %s",
		e.LeaderChanges, e.Unknown, e.SnapshotInstalls, e.RebuildInstalls, e.OKUnderFault, e.Recovery)
}

// ExpandLists adds, for every acknowledged list, one get per value of its
// pool at the list's times, holding the owner listed ("" for a value not
// listed). A list is one linearizable read of the whole pool, so each of
// its values must read as a get would; the checker's per-value model then
// judges lists too. The added gets carry Attempt -1.
func ExpandLists(h checker.History, ps PoolSet) checker.History {
	out := append(checker.History(nil), h...)
	for _, op := range h {
		if op.Kind != "list" || op.Outcome != checker.OK {
			continue
		}
		for _, v := range ps.Values(op.Pool) {
			out = append(out, checker.Op{Client: op.Client, Kind: "get", Pool: op.Pool, Value: v, Call: op.Call,
				Return: op.Return, Outcome: checker.OK, Result: op.Listed[v], Attempt: -1})
		}
	}
	return out
}

// Counts tallies a history's attempts by kind and outcome.
func Counts(h checker.History) map[string]int {
	c := map[string]int{}
	for _, op := range h {
		c[op.Kind]++
		c[op.Outcome.String()]++
		if op.Attempt > 0 {
			c["retry"]++
		}
	}
	return c
}

// CheckStorage judges the storage faults. "storage loss refused": a node
// whose data dir lost everything (a wipe, a raft.db cut to 0 bytes) must
// not start. "damaged node refused or served": after every storage fault
// the node refused to start, saying so, and the runbook brought it back,
// or it started and served.
func CheckStorage(ds []Damage) (loss, handled checker.Report) {
	loss = checker.Report{Name: "storage loss refused", OK: true}
	handled = checker.Report{Name: "damaged node refused or served", OK: true, Checked: len(ds)}
	for _, d := range ds {
		at := fmt.Sprintf("%s of %s at %.3fs (%s)", d.Fault, d.Node, float64(d.At)/1e9, d.What)
		if d.Loss {
			loss.Checked++
			if d.Verdict == Served || d.Verdict == Hung {
				loss.Problems = append(loss.Problems, fmt.Sprintf("%s: not refused: %s", at, d.Why))
			}
		}
		if d.Verdict == Exited || d.Verdict == Hung {
			handled.Problems = append(handled.Problems, fmt.Sprintf("%s: %s: %s", at, d.Verdict, d.Why))
		}
		if d.RunbookErr != nil {
			handled.Problems = append(handled.Problems, fmt.Sprintf("%s: the runbook did not bring %s back: %s: %v", at, d.Node, d.Runbook, d.RunbookErr))
		}
	}
	loss.OK, handled.OK = len(loss.Problems) == 0, len(handled.Problems) == 0
	return loss, handled
}

// CheckJoins judges the mistaken joins: each must be answered 409
// NodeNotEmpty with the newcomer's clusterId and lastIndex, and leave the
// membership as it was.
func CheckJoins(js []JoinAttempt) checker.Report {
	rep := checker.Report{Name: "mistaken join refused", Checked: len(js)}
	for _, j := range js {
		rep.Problems = append(rep.Problems, j.problems()...)
	}
	rep.OK = len(rep.Problems) == 0
	return rep
}

// FaultRuns counts the faults carried out, by kind.
func FaultRuns(windows []Window) map[Fault]int {
	runs := map[Fault]int{}
	for _, w := range windows {
		runs[w.Fault]++
	}
	return runs
}
