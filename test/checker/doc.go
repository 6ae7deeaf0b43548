// Package checker judges histories of rangealloc operations recorded by
// Jepsen-style tests: the in-process partition test in test/ and the
// multi-process partition suite.
//
// A History is a list of Op, one per attempt: allocate (static or
// dynamic), release (with an optional owner precondition), get and list,
// each with its call and return times and an Outcome: OK, Fail (a
// definite failure: nothing was applied) or Unknown (a timeout, 503
// Unavailable, a broken connection: it may or may not have been applied).
// WriteJSONL and ReadJSONL keep a history as one JSON op per line.
//
// The attempts of one idempotency key are one logical operation: from
// the first attempt's call to the last one's return, answered by the
// first OK attempt, else by the first failure the state machine decided,
// else Unknown if any attempt was. The checkers judge logical operations,
// except CheckIdempotentRetries, which also compares the attempts.
//
// The checkers, each returning what it found:
//
//   - CheckWellFormed: the history keeps the conventions the others rely
//     on: one request per key, one allocate per owner.
//   - CheckLinearizable: porcupine, against a model of one value (free,
//     or held by one owner), each (pool, value) checked alone. Unknown
//     operations never return, porcupine's convention for a crashed
//     client. A dynamic allocate with an unknown outcome has no known
//     value: it joins the values answers show its owner holding; if none
//     do, answers that name no holder may find a value held by an unseen
//     owner (see partitionHistory). Lists read every value they could.
//   - CheckNoDoubleOwner: no two acknowledged allocations of one value
//     without a release that could come between them.
//   - CheckNoLostAck: every acknowledged allocation that no release could
//     have freed is in the final state, with its owner.
//   - CheckIdempotentRetries: every answered attempt of a key got the same
//     answer, and no dynamic allocate's owner was seen (in answers, reads
//     or the final state) holding two values: its request was applied
//     once, though the client or the node retried it.
//   - CheckNoPhantom: every allocation in the final state is explained by
//     an allocation in the history and was not released since.
//   - CheckAll runs them all.
//
// Service writes (KindServiceCreate, KindServiceUpdate, KindServiceDelete,
// services.go) are judged apart, against the Services and pools read at
// the end of a run (ServiceState), not by CheckAll:
//
//   - CheckServiceState: no value is named by two Services' records,
//     every value a record names is held by services/<namespace>/<name>,
//     and no value held by a Service owner is orphaned.
//   - CheckServiceReplicas: every node has the same records and owners.
//   - CheckServiceAcks: a Service whose last write was answered (no write
//     of unknown outcome or overlapping it) is in the final state as that
//     write left it; a final record is no older than any acknowledged PUT
//     of it and names what one of the PUTs that answered its revision
//     answered (a log entry may hold several writes); retries of a key got
//     the same answer.
//
// The checkers other than CheckLinearizable are linear or quadratic in
// the operations on one value, so they still judge histories too long or
// too concurrent for porcupine; they are sound (a problem they report is
// a real violation, given a complete, well-formed history) but not
// complete.
package checker
