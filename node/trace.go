package node

import (
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// The stages of a write, timed into go-metrics (the process's global sink,
// as hashicorp/raft's own metrics are; the server exports them as
// rangealloc_node_*). With Raft's timings they make the latency budget
// of docs/PERFORMANCE.md:
//
//	follower: forward.call ─────────────────────────────────────────┐
//	leader:     forward.serve ────────────────────────────────────┐ │
//	              leader.queue → leader.raft (Raft: store, replicate,
//	              commit, apply) → leader.answer                  │ │
//
// Each is a mean over what it timed; the client's time minus
// forward.call is the HTTP layer, forward.call minus forward.serve the
// forwarding RPC's codec and network.
var (
	// keyQueue: the oldest request of an entry, from reaching the group
	// commit to its entry's hand-off to Raft.
	keyQueue = []string{"node", "leader", "queue"}
	// keyRaft: an entry from raft.Apply to its future resolving (stored,
	// replicated, committed and applied on the leader).
	keyRaft = []string{"node", "leader", "raft"}
	// keyAnswer: from an entry's future resolving to a waiting caller
	// having its outcome.
	keyAnswer = []string{"node", "leader", "answer"}
	// keyForwardServe: a forwarded write as the leader serves it, from
	// the decoded call to its reply (before the RPC encodes it).
	keyForwardServe = []string{"node", "forward", "serve"}
)

// The follower's forward.call, and forward.batch (the writes each
// forwarded batch carries), are package node/internal/forward's.

// since times a stage ending now.
func since(key []string, start time.Time) {
	metrics.MeasureSince(key, start)
}
