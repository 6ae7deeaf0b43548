// Package node runs one rangealloc server: a Raft member with its state
// machine (package fsm), the leader's group commit, and the forwarding of
// calls made on a follower. The embedding package at the module root and
// the HTTP API (package api) are thin layers over it.
//
// # One call, end to end
//
//	Allocate ─▶ submit ─▶ route ─┬─ leader:   propose ─▶ batchLoop ─▶ raft.Apply ─▶ fsm.Apply
//	                             │                         (group commit)        │
//	                             │            result ◀──── resolveLoop ◀─────────┘
//	                             └─ follower: fwd.Submit ─▶ SubmitBatch RPC ─▶ the leader's propose
//
// Every client call goes through route (route.go): served here when this
// node leads, else forwarded to the leader, and retried until it has an
// answer. classify alone decides what an attempt's failure means (done,
// retry, unknown outcome, stop). A write carries one request ID through
// every attempt, and the state machine remembers the IDs it applied, so a
// retry is answered, never applied twice. Reads at Linearizable go through
// the log too (read.go, linearize).
//
// # Files by concern
//
//	node.go                Node, Open (openDataDir, startRaft, takePlace), Close, leadership
//	phase.go               the start-up phase and its transitions
//	leader.go              a leader's steps: leader, ready (reads), settled (serves)
//	route.go               the one "on the leader, else forward, retry" loop
//	apply.go               submit: a write's route and its request ID
//	commit.go              the leader's group commit (batchLoop, resolveLoop)
//	read.go, write.go      reads at a consistency; writes, backup and restore
//	services.go            Kubernetes Services, reconcile, import
//	forward.go, fwdbatch.go  the forwarding RPC's server side: the leader's end of every call
//	membership.go          the founder: founding a cluster, joining one, the cluster ID
//	foundfrom.go           the founder: founding from a backup; refusing a lost cluster's node
//	probe.go               the Probe call: asking a node what it is, and this node's answer
//	members.go             the member table, and memberChanges: adding and removing members on the leader
//	feature.go             feature levels and rolling upgrades
//	health.go              member health, promotion and cleanup (raft-autopilot)
//	ready.go               readiness (/readyz and rangealloc.Node.Ready)
//	disk.go, stall.go      a full disk and a stalled disk
//	backup.go, recover.go  scheduled backups; recovering a cluster that lost its quorum
//	internal/storage       the data directory: log stores, snapshots, markers, checks
//	internal/forward       the forwarding RPC's client: a connection per leader, batched writes
//	internal/wire          the messages of the forwarding RPC
//	internal/nodeerr       the sentinel errors (ErrClosed, …), for the subpackages to share
//
// # Invariants
//
//   - No value is handed out twice: every write is one Raft entry, applied
//     in log order by a deterministic state machine.
//   - An acknowledged write is on a quorum's disks. A data directory that
//     cannot prove what it held is refused at start (internal/storage).
//   - A node serves, and says it is ready, only once it has applied what
//     the leader committed and the leader has written the configured pools
//     (ready.go).
//   - Every goroutine is started by goFunc and stops on shutdown.
package node
