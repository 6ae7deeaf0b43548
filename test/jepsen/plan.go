package jepsen

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Fault is a kind of fault the nemesis injects.
type Fault string

// Faults. "The leader" is whoever leads when the fault starts.
const (
	IsolateLeader   Fault = "isolate-leader"   // the leader loses both peers
	IsolateFollower Fault = "isolate-follower" // one follower loses both peers
	BridgeFault     Fault = "bridge"           // one node sees both others, which do not see each other
	OneWay          Fault = "one-way"          // the leader drops its peers' packets in one direction only
	KillLeader      Fault = "kill-leader"      // kill -9 the leader, restart it after the hold
	KillAll         Fault = "kill-all"         // kill -9 all three, restart them after the hold
	PauseLeader     Fault = "pause-leader"     // SIGSTOP the leader, SIGCONT after the hold
	SnapshotCatchUp Fault = "snapshot-catchup" // cut a follower off until the leader has snapshotted past it
	Wipe            Fault = "wipe"             // kill -9 a node, remove its data dir, start it again
	TruncateLog     Fault = "truncate-log"     // kill -9 a node, cut its raft.db short, start it again
	Corrupt         Fault = "corrupt"          // kill -9 a node, damage a file of its data dir, start it again
	MistakenJoin    Fault = "mistaken-join"    // ask the cluster to add a fourth node that runs a cluster of its own
	PowerCutOne     Fault = "power-cut-one"    // kill -9 a node and cut its disk's power: what was not fsynced is lost
	PowerCutAll     Fault = "power-cut-all"    // kill -9 all three and cut every disk's power
	DiskStall       Fault = "disk-stall"       // freeze a node's disk (every operation on it blocks) for the hold
)

// AllFaults is every fault, in a fixed order.
var AllFaults = []Fault{IsolateLeader, IsolateFollower, BridgeFault, OneWay, KillLeader, KillAll, PauseLeader, SnapshotCatchUp,
	Wipe, TruncateLog, Corrupt, MistakenJoin, PowerCutOne, PowerCutAll, DiskStall}

// Storage reports whether f damages one node's data dir (see storage.go).
func (f Fault) Storage() bool {
	return f == Wipe || f == TruncateLog || f == Corrupt || f == PowerCutOne
}

// Disk reports whether f needs the nodes' data dirs on fault file systems
// (test/faultfs; see power.go).
func (f Fault) Disk() bool { return f == PowerCutOne || f == PowerCutAll || f == DiskStall }

// ParseFaults parses "all" or a comma-separated list of faults.
func ParseFaults(s string) ([]Fault, error) {
	if s == "" || s == "all" {
		return AllFaults, nil
	}
	var out []Fault
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		ok := false
		for _, k := range AllFaults {
			ok = ok || Fault(f) == k
		}
		if !ok {
			return nil, fmt.Errorf("unknown fault %q; want all or some of %v", f, AllFaults)
		}
		out = append(out, Fault(f))
	}
	return out, nil
}

// MinorityOut reports whether the fault cuts off, stops or pauses a
// minority of the nodes while the majority stays connected and up: an
// operation acknowledged meanwhile is evidence that the cluster worked
// around the fault. Not kill-all (no majority), not mistaken-join (every
// node stays up and connected).
func (f Fault) MinorityOut() bool { return f != KillAll && f != MistakenJoin && f != PowerCutAll }

// holds is how long each fault lasts: [min, max).
var holds = map[Fault][2]time.Duration{
	IsolateLeader:   {1500 * time.Millisecond, 3 * time.Second},
	IsolateFollower: {1000 * time.Millisecond, 2500 * time.Millisecond},
	BridgeFault:     {1500 * time.Millisecond, 3 * time.Second},
	OneWay:          {1500 * time.Millisecond, 3 * time.Second},
	KillLeader:      {500 * time.Millisecond, 2 * time.Second},
	KillAll:         {500 * time.Millisecond, 1500 * time.Millisecond},
	PauseLeader:     {2500 * time.Millisecond, 4 * time.Second}, // long enough for a new leader's writes before reads arrive
	SnapshotCatchUp: {2 * time.Second, 3 * time.Second},         // at least; then until the leader snapshotted past the follower
	// A storage fault's node is down this long after the damage; a loss
	// on the leader first has a follower cut off this long.
	Wipe:        {100 * time.Millisecond, 500 * time.Millisecond},
	TruncateLog: {100 * time.Millisecond, 500 * time.Millisecond},
	Corrupt:     {100 * time.Millisecond, 500 * time.Millisecond},
	// The fourth node stays up this long after the answer.
	MistakenJoin: {100 * time.Millisecond, 300 * time.Millisecond},
	// A node whose power was cut is down this long; so are all three.
	PowerCutOne: {100 * time.Millisecond, 500 * time.Millisecond},
	PowerCutAll: {300 * time.Millisecond, time.Second},
	// Longer than the servers' --disk-stall-timeout plus 3 s, the bound
	// on the wait for writes to resume (see stallTimeout).
	DiskStall: {5 * time.Second, 6 * time.Second},
}

// rests is the healed pause after a fault, [min, max): 1–2 s, less after
// the faults below the line. A storage fault ends with the runbook's wait
// until the node is a caught-up voter, and a mistaken join takes no node
// out, so neither needs the others' time to settle; the shorter rests keep
// the CI seeds within half a minute of their time before these faults.
func rests(f Fault) [2]time.Duration {
	switch {
	case f == MistakenJoin:
		return [2]time.Duration{200 * time.Millisecond, 500 * time.Millisecond}
	case f.Storage() || f == PowerCutAll:
		return [2]time.Duration{500 * time.Millisecond, 1500 * time.Millisecond}
	}
	return [2]time.Duration{time.Second, 2 * time.Second}
}

// overhead is what a fault takes beyond its hold on a quiet machine: for
// a storage fault, the wait for the restarted node's verdict and the
// runbook (remove, wipe, join, catch up); for mistaken-join, starting the
// fourth node. Plan counts it, so that the new faults replace random
// draws of the others instead of lengthening the run by their whole time.
var overhead = map[Fault]time.Duration{Wipe: 2 * time.Second, TruncateLog: time.Second, Corrupt: time.Second,
	MistakenJoin: time.Second, PowerCutOne: time.Second, PowerCutAll: 2 * time.Second}

// Step is one fault of the schedule, then a healed rest.
type Step struct {
	Fault Fault
	// Pick chooses among the candidates when the fault starts: the
	// follower (Pick mod 2 of the two), the bridge node (Pick mod 3).
	Pick int
	// Dir is the direction a one-way fault drops.
	Dir Direction
	// OnLeader: a storage fault or a disk stall hits the leader (else the
	// follower Pick mod 2); mistaken-join asks the leader (else that
	// follower).
	OnLeader bool
	// Variant is how a storage fault damages the node: the Truncation
	// or the Corruption.
	Variant int
	Hold    time.Duration
	Rest    time.Duration
}

// Truncations: how truncate-log cuts raft.db.
const (
	TruncateEmpty = iota // to 0 bytes
	TruncateHalf         // to half its size
)

// Corruptions: how corrupt damages a file. When the drawn one does not
// apply (no snapshot yet), the next that does is used.
const (
	ZeroPage    = iota // zero the 4 KiB page in the middle of raft.db
	FlipByte           // flip a byte in the middle of the newest snapshot's state.bin
	RemoveSnaps        // delete the snapshots directory
)

var variantNames = map[Fault][]string{
	TruncateLog: {"to-empty", "to-half"},
	Corrupt:     {"zero-page", "flip-byte", "remove-snapshots"},
}

func (s Step) String() string {
	extra := ""
	switch s.Fault {
	case IsolateFollower, SnapshotCatchUp, BridgeFault:
		extra = fmt.Sprintf(" pick=%d", s.Pick)
	case OneWay:
		extra = " " + s.Dir.String()
	case Wipe, TruncateLog, Corrupt, MistakenJoin, PowerCutOne, DiskStall:
		extra = fmt.Sprintf(" follower pick=%d", s.Pick)
		if s.OnLeader {
			extra = " leader"
		}
		if names := variantNames[s.Fault]; names != nil {
			extra += " " + names[s.Variant]
		}
	}
	return fmt.Sprintf("%s%s hold=%s rest=%s", s.Fault, extra, s.Hold, s.Rest)
}

// Cost is what the step is expected to take: its hold, its rest, and the
// fault's overhead.
func (s Step) Cost() time.Duration { return s.Hold + s.Rest + overhead[s.Fault] }

// Plan draws the whole schedule from the seed, before the run: first every
// fault of kinds once, in a seeded order (so even a short run sees each),
// then faults drawn at random until the steps' costs add up to total.
func Plan(seed uint64, kinds []Fault, total time.Duration) []Step {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973)) // "nemesis"
	between := func(lo, hi time.Duration) time.Duration {
		return (lo + time.Duration(rng.Int64N(int64(hi-lo)))).Round(time.Millisecond)
	}
	step := func(f Fault) Step {
		h, r := holds[f], rests(f)
		s := Step{Fault: f, Pick: rng.IntN(6), Hold: between(h[0], h[1]), Rest: between(r[0], r[1])}
		switch {
		case f == OneWay:
			s.Dir = []Direction{Inbound, Outbound}[rng.IntN(2)]
		case f.Storage() || f == MistakenJoin || f == DiskStall:
			s.OnLeader = rng.IntN(2) == 0
			s.Variant = rng.IntN(max(len(variantNames[f]), 1))
		}
		return s
	}
	var plan []Step
	var sum time.Duration
	for _, i := range rng.Perm(len(kinds)) {
		s := step(kinds[i])
		plan, sum = append(plan, s), sum+s.Cost()
	}
	for len(kinds) > 0 && sum < total {
		s := step(kinds[rng.IntN(len(kinds))])
		plan, sum = append(plan, s), sum+s.Cost()
	}
	return plan
}
