// Package transport is rangealloc's network layer: one TCP port per node
// carries both Raft and the node's internal forwarding RPC, told apart by
// the first byte a dialer writes (Mux), and a fault-injecting wrapper of
// raft.Transport (Wrap) that tests use to cut, drop or delay traffic per
// link and per direction.
//
//	dialer writes  'R' -> Mux.Raft()  (a raft.StreamLayer for raft.NetworkTransport)
//	               'F' -> Mux.RPC()   (a net.Listener for the forwarding RPC)
//
// TLS will wrap the listener and the dialers here, below both protocols.
package transport
