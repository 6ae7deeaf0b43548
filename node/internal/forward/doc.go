// Package forward is the client side of a node's forwarding: a follower
// hands the calls it cannot serve (writes, reads above Stale, cluster
// calls, restores) to the leader, and newcomers probe and join through it.
//
// The calls travel over an internal RPC on the leader's Raft port (the
// 'F' protocol of transport.Mux), not over the HTTP API: an embedded node
// needs no HTTP server, the leader's Raft address is always known from
// Raft itself (the member table may lag), and one port per node is one
// firewall rule. The RPC is net/rpc with gob, which multiplexes concurrent
// calls over one connection per leader; a Client keeps that connection
// (pool.go) and a second set for probes, which name no cluster. Package
// node serves the other end; package wire holds the messages.
//
// Writes go in batches, one SubmitBatch call per batch (batch.go). A
// caller gives up on its deadline, or as soon as this node learns of
// another leader (Config.Leader): a call to a paused or partitioned leader
// would otherwise wait out the caller's whole deadline. A call given up
// before it was sent is a definite failure; one given up after may have
// been applied, an unknown outcome, and its caller retries with the same
// request ID. A connection on which nothing arrived while a call waited
// is closed, and the next call dials afresh.
//
// Leaders of older releases lack some calls: net/rpc answers "can't find
// method". A follower then sends one Submit per write (no SubmitBatch),
// removes a member without a request ID when the ID was one it drew (no
// RemoveMemberRequest), and refuses the rest as VersionMismatch.
package forward
