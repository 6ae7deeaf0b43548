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
)

// AllFaults is every fault, in a fixed order.
var AllFaults = []Fault{IsolateLeader, IsolateFollower, BridgeFault, OneWay, KillLeader, KillAll, PauseLeader, SnapshotCatchUp}

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

// Majority reports whether a majority of the nodes stays connected and up
// while the fault lasts.
func (f Fault) Majority() bool { return f != KillAll }

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
}

// Step is one fault of the schedule, then a healed rest.
type Step struct {
	Fault Fault
	// Pick chooses among the candidates when the fault starts: the
	// follower (Pick mod 2 of the two), the bridge node (Pick mod 3).
	Pick int
	// Dir is the direction a one-way fault drops.
	Dir  Direction
	Hold time.Duration
	Rest time.Duration
}

func (s Step) String() string {
	extra := ""
	switch s.Fault {
	case IsolateFollower, SnapshotCatchUp, BridgeFault:
		extra = fmt.Sprintf(" pick=%d", s.Pick)
	case OneWay:
		extra = " " + s.Dir.String()
	}
	return fmt.Sprintf("%s%s hold=%s rest=%s", s.Fault, extra, s.Hold, s.Rest)
}

// Plan draws the whole schedule from the seed, before the run: first every
// fault of kinds once, in a seeded order (so even a short run sees each),
// then faults drawn at random until the holds and rests add up to total.
func Plan(seed uint64, kinds []Fault, total time.Duration) []Step {
	rng := rand.New(rand.NewPCG(seed, 0x6e656d65736973)) // "nemesis"
	between := func(lo, hi time.Duration) time.Duration {
		return (lo + time.Duration(rng.Int64N(int64(hi-lo)))).Round(time.Millisecond)
	}
	step := func(f Fault) Step {
		h := holds[f]
		s := Step{Fault: f, Pick: rng.IntN(6), Hold: between(h[0], h[1]), Rest: between(time.Second, 2*time.Second)}
		if f == OneWay {
			s.Dir = []Direction{Inbound, Outbound}[rng.IntN(2)]
		}
		return s
	}
	var plan []Step
	var sum time.Duration
	for _, i := range rng.Perm(len(kinds)) {
		s := step(kinds[i])
		plan, sum = append(plan, s), sum+s.Hold+s.Rest
	}
	for len(kinds) > 0 && sum < total {
		s := step(kinds[rng.IntN(len(kinds))])
		plan, sum = append(plan, s), sum+s.Hold+s.Rest
	}
	return plan
}
