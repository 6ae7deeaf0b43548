// Package storage keeps a node's data directory: the Raft log and stable
// store (raft.db, a bbolt file, or wal/, an append-only log), the
// snapshots, and the markers that say the directory has held state.
//
//	<data-dir>/
//	  node-id, cluster-id    the node's and the cluster's IDs
//	  state                  written before the first write to the log store
//	  log-store              which store the directory uses: bolt or wal
//	  raft.db or wal/        Raft's log, term and vote
//	  snapshots/             Raft's snapshots
//
// Its invariant: a directory a node could serve an older state from, or
// vote twice from, is refused before anything opens it (Check returns an
// *Error). Store wraps the log store so that the marker is on disk before
// the first write, a write after Close is dropped rather than a panic, and
// every write is timed (StallWatch) for the node's disk-stall watch.
//
// It imports nothing of the node.
package storage
