package jepsen

import (
	"fmt"
	"strings"

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
	// SnapshotInstalls counts the servers' "Installed remote snapshot" lines.
	SnapshotInstalls int
	// OKUnderFault counts the acknowledged operations that began and
	// ended while a fault was in force that left a majority connected.
	OKUnderFault int
}

// Gather counts the evidence of a run from its history, its fault windows
// and the servers' logs.
func Gather(h checker.History, windows []Window, logs []string) Evidence {
	var e Evidence
	elections := 0
	for _, l := range logs {
		elections += strings.Count(l, enteredLeader)
		e.SnapshotInstalls += strings.Count(l, snapshotInstalled)
	}
	e.LeaderChanges = max(elections-1, 0)
	for _, op := range h {
		switch op.Outcome {
		case checker.Unknown:
			e.Unknown++
		case checker.OK:
			for _, w := range windows {
				if w.Majority && op.Call >= w.Start && op.Return <= w.End {
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
	return fmt.Sprintf("%d leader changes, %d unknown outcomes, %d snapshot installs, %d ok under a minority fault",
		e.LeaderChanges, e.Unknown, e.SnapshotInstalls, e.OKUnderFault)
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
