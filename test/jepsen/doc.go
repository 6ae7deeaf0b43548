// Package jepsen is a Jepsen-style partition suite for rangealloc: three
// real `rangealloc server` processes, each in its own network namespace,
// concurrent HTTP clients in the root namespace, and a nemesis that
// partitions, kills and pauses the nodes on a schedule drawn from a seed.
// The recorded history is judged by package test/checker.
//
// The nemesis also plays the faults of an appliance's life: a node's data
// dir wiped, its raft.db truncated, a page or a snapshot corrupted (the
// node must refuse to start, and the operator's runbook bring it back; see
// storage.go), and a join of a fourth node that runs a cluster of its own
// (it must be refused; see join.go). The fourth node gets a namespace of
// its own, 10.77.R.4, the first time it is needed.
//
// The network of a run (R is a free octet, claimed by creating the bridge):
//
//	root namespace                         namespace rjepsen-<pid>-R-n1 ... -n3
//	┌──────────────────────────────┐       ┌─────────────────────────────┐
//	│ clients ── bridge rjbR       │       │ rjpRn1 10.77.R.1            │
//	│           10.77.R.254/24     │─veth──│ rangealloc server n1        │
//	│             ├─ rjvRn1 ───────┘       │ iptables INPUT DROP         │
//	│             ├─ rjvRn2 ─── … n2 10.77.R.2                          │
//	│             └─ rjvRn3 ─── … n3 10.77.R.3                          │
//	└──────────────────────────────┘       └─────────────────────────────┘
//
// The servers run with mutual TLS between them, HTTPS and a token file,
// as a secure install does: the harness makes a CA, the nodes'
// certificates and the tokens per run, and every client sends a token of
// the role it needs (see security.go). -jepsen.insecure runs them the old
// way instead, plain HTTP and Raft with --insecure and no tokens, for
// comparison.
//
// Partitions are DROP rules in the receiving nodes' INPUT chains, between node
// addresses only: clients always reach every node, as in Jepsen, so an
// isolated leader still receives requests and must not acknowledge them.
//
// Invariants the harness keeps:
//   - Traffic goes only to 10.77.R.0/24 addresses it created.
//   - Everything it creates (namespaces, links, processes) is named after
//     the run and the test process's PID, deleted by t.Cleanup and by a
//     SIGINT/SIGTERM handler, and swept by the next run once that PID is gone.
//   - The nemesis schedule is a pure function of the seed and the options;
//     only which node is "the leader" is resolved while running.
package jepsen
