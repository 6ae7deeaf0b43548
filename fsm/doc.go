// Package fsm is rangealloc's Raft state machine: it decodes log entries,
// applies them to the pools, and answers with results.
//
// A log entry is a typed envelope (EntryType, then the payload). Today there
// is one type, EntryBatch: a batch of Requests the leader packed into one
// entry (group commit). Each Request is independent: a transaction of
// allocate/release operations applied all or nothing, a pool change, or a
// member-table change. Numbers of types and kinds are append-only; an entry
// this version cannot decode stops the node instead of being skipped, since
// skipping would let this replica diverge.
//
//	entry   = type(1) count(uvarint) request*
//	request = kind(1) id(str) seed(8) body
//	body    = txn: nops op*  |  create-pool: name range  |  delete-pool: name
//	          | set-member: id raftAddr apiAddr  |  remove-member: id
//	op      = kind(1) pool(str) value(str) owner(str) count(uvarint)
//	str     = len(uvarint) bytes
//
// Invariants:
//   - Apply is a pure function of (state, entry): no clock, no random source,
//     no map iteration order. Random starts come from the request's Seed
//     through splitmix64, so every replica makes the same choices.
//   - Every set bit of a pool has a record (owner, mode, revision); every
//     clear bit's record is zero.
//   - A failed transaction leaves no trace: its steps are reverted in
//     reverse order.
//   - A request with an ID is applied at most once. Its Result is
//     remembered (the most recent RequestTableSize requests, evicted in log
//     order; from feature level 3 on, that many keyed requests and as many
//     with IDs nodes drew) and returned again to a retry with the same
//     fingerprint; the same ID with another request fails with
//     IdempotencyKeyReused.
//   - Domain failures are Results, never errors of Apply.
//
// The state lives behind one RWMutex: ApplyBatch takes it once per batch,
// reads take it shared.
package fsm
