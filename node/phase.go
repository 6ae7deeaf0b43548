package node

import (
	"fmt"
	"sync/atomic"
)

// phase is where a node is in its start-up. It only moves forward; each
// transition is made in one place:
//
//	               no state                          state
//	                  │                                │
//	            phaseTakingPart ◀─ start               │
//	founding with     │                                │
//	peers, every peer │ offerCandidate                 │
//	without state ──▶ phaseOffering                    │
//	                  │ takePart returns               │
//	                  ▼                                ▼
//	 founding from ─▶ phaseRestoring ◀──── a founding restore is pending
//	 a backup         │ restoreFounding
//	                  ▼
//	            phaseServing ◀─────────── otherwise, from the start
//
// Beside the phase, the founder (membership.go) keeps three facts of the
// founding: bootstrapped (this process founded the cluster and its
// founding is unfinished: its leadership writes the founders' rows and
// the configured pools), unfinished (the marker of that exists) and
// established (the first establish of this process has run).
type phase uint32

const (
	// phaseTakingPart: a node without state has not founded or joined a
	// cluster yet (takePart). It says it has no state to probes.
	phaseTakingPart phase = iota
	// phaseOffering: founding with peers, every peer answered without
	// state, and this node offers its candidate cluster ID (the candidate
	// is stored before the phase moves, see offerCandidate).
	phaseOffering
	// phaseRestoring: a member founding its cluster from a backup. A
	// founder from a backup turns every forwarded call away until the
	// restore is done, from before it founds (founder.restoring): the
	// restore would replace what was written or read before it.
	phaseRestoring
	// phaseServing: a member that serves.
	phaseServing
)

func (p phase) String() string {
	switch p {
	case phaseTakingPart:
		return "taking part"
	case phaseOffering:
		return "offering a cluster ID"
	case phaseRestoring:
		return "founding from a backup"
	case phaseServing:
		return "serving"
	}
	return fmt.Sprintf("phase(%d)", uint32(p))
}

// lifecycle holds a node's phase.
type lifecycle struct{ p atomic.Uint32 }

func (l *lifecycle) get() phase { return phase(l.p.Load()) }

// advance moves the phase to p, never back.
func (l *lifecycle) advance(p phase) {
	for {
		cur := l.p.Load()
		if phase(cur) >= p || l.p.CompareAndSwap(cur, uint32(p)) {
			return
		}
	}
}

// starting reports whether the node has not founded or joined a cluster.
func (l *lifecycle) starting() bool { return l.get() < phaseRestoring }
