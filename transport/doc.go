// Package transport is rangealloc's Raft network layer.
//
// It has three parts: Mux (with DialRPC), NewTCPTransport, and Faults with
// Wrap.
//
// Mux listens on one TCP port per node and carries two protocols on it, told
// apart by the first byte a dialer writes, the way Consul and Nomad tell
// their RPC types apart:
//
//	dialer                      writes   Mux hands the rest of the stream to
//	Mux.Raft().Dial(addr, t)    'R'  ->  Mux.Raft().Accept()  (raft.StreamLayer)
//	DialRPC(addr, t)            'F'  ->  Mux.RPC().Accept()   (net.Listener)
//	anything else, or silence   ?    ->  closed and logged
//
// NewTCPTransport puts raft.NetworkTransport on Mux.Raft().
//
// With Options.ServerTLS and ClientTLS, TLS starts at each connection's
// first byte, below both protocols: the protocol byte and the cluster-ID
// handshake travel inside the session, a plaintext or wrong-CA peer is
// closed during the TLS handshake, and PeerID names the node a
// connection's certificate was issued to.
//
// Faults is a fault table shared by every node of an in-process cluster, and
// Wrap gates one node's raft.Transport by it. Each node wraps its own
// transport and every call it makes is judged twice, once per direction:
//
//	local ──request──▶ target    judged by the table for (local -> target)
//	local ◀─response── target    judged by the table for (target -> local)
//
// so a one-way Cut(a, b) loses a's requests to b and the responses to b's
// requests to a, and nothing else. Pipelined AppendEntries are judged the
// same way, request by request and response by response.
//
// Invariants:
//   - No input from the network can panic the Mux; a connection is handed to
//     a protocol only after it has named one.
//   - Every goroutine has an owner that stops and waits for it: Mux.Close
//     for the accept loop and the connections still naming a protocol, the
//     pipeline's Close for the relay of a wrapped AppendPipeline.
//   - A message across a cut never reaches the other side while the cut
//     stands, and a response that does not pass the table is never handed
//     to raft: the caller sees an error and a zeroed response.
//   - Drop decisions come from the Faults' own seeded generator, so a run's
//     faults are reproducible from its seed (up to goroutine scheduling).
package transport
