package node

import "sync/atomic"

// leadership is what this node knows of its own leadership. Each time
// Raft says this node became or stopped being the leader, leaderLoop
// starts a new generation (gen) and clears ready. A leader then moves
// through two steps, in order, within its generation:
//
//	leader ──▶ ready   it applied an entry of its term: its state holds
//	                   everything committed before it took over, so it
//	                   serves linearizable reads (linearize)
//	       ──▶ settled its establish wrote what the configuration says
//	                   (its member row, the configured pools, the service
//	                   network): now it is ready for /readyz and tells
//	                   followers it leads (Probe), so that a call made once
//	                   a node says ready finds the configured pools
type leadership struct {
	ready   atomic.Bool
	gen     atomic.Uint64
	settled atomic.Uint64 // the generation whose establish is done
}

// settle records that the establish of generation gen is done. An
// establish of an older generation can still be running (its calls retry
// through the new leader): settled only ever moves forward.
func (l *leadership) settle(gen uint64) {
	for {
		cur := l.settled.Load()
		if cur >= gen || l.settled.CompareAndSwap(cur, gen) {
			return
		}
	}
}

// serving reports whether the current generation is ready and settled;
// with Raft saying this node leads, it leads and serves.
func (l *leadership) serving() bool {
	return l.ready.Load() && l.settled.Load() == l.gen.Load()
}
