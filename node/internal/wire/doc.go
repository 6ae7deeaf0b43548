// Package wire holds the message types of a node's internal forwarding
// RPC (net/rpc with gob over the Raft port): what a follower sends the
// leader and what comes back. net/rpc needs them exported; keeping them
// here keeps them out of package node's API.
//
// A message's fields are its wire format: gob matches them by name, so a
// field is only ever added, and a node of an older release leaves it at
// its zero value. Package forward sends them; package node serves them.
package wire
