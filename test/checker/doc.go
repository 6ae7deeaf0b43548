// Package checker judges histories of rangealloc operations recorded by
// Jepsen-style tests: the in-process partition test and the multi-process
// suite in test/jepsen.
//
// A history is a list of operations with invoke and complete times and an
// outcome: OK, Fail (a definite failure: nothing was applied), or Unknown
// (a timeout, 503 Unavailable, a broken connection: it may or may not have
// been applied). The checkers:
//
//   - CheckLinearizable: porcupine, with a per-value model (a value is free,
//     or held by one owner), partitioned by (pool, value).
//   - CheckNoDoubleOwner: no two acknowledged allocations of one value
//     without a release that could separate them.
//   - CheckNoLostAck: every acknowledged allocation that nothing could have
//     released is in the final state, with its owner.
//   - CheckIdempotentRetries: every answered attempt of one key gave the
//     same answer.
//   - CheckNoPhantom: every allocation in the final state is explained by
//     an allocation in the history (a retry applied twice leaves one that
//     is not).
//
// Conventions the workloads keep: every write has a unique key, every
// allocate a unique owner, and the attempts of one key share it.
package checker
