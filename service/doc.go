// Package service plans the allocation side of one Kubernetes Service write
// (create, update or delete) the way kube-apiserver v1.34 does it, without
// doing any of it: it says which ClusterIPs, nodePorts and
// healthCheckNodePort the write keeps, which named values it requests, which
// it needs picked dynamically, and which of the stored record's values it
// releases. The Raft state machine applies one Service write as one log
// entry: it calls PlanWrite, reserves every requested value, picks the
// dynamic ones, releases the rest, and stores the record Complete returns.
//
// Invariants:
//   - Pure and deterministic: no clock, no randomness, no I/O, and no map
//     iteration order reaches an output. The same inputs give the same Plan,
//     with Needs and Release in the same order, on every replica.
//   - Needs are ordered clusterIPs (by index), then nodePorts (by the first
//     spec.ports entry naming them), then healthCheckNodePort. Release is
//     ordered the same way over the stored record.
//   - A value is listed once: TCP and UDP entries of one port number share
//     one nodePort Need. Keep is true exactly when the stored record holds
//     the value already; such values are never released.
//   - Release holds only values of the stored record, each at most once, and
//     none that a Need keeps.
//   - A rejected write returns Errors (Kubernetes' field errors and texts)
//     and an empty Plan; nothing is to be allocated or released.
package service
