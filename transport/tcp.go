package transport

import (
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// DefaultTimeout is the I/O deadline NewTCPTransport gives each Raft RPC,
// and so how long a call across a real partition hangs before it fails. A
// Faults cut holds calls for as long by default, to behave the same.
const DefaultTimeout = 10 * time.Second

// DefaultMaxPool is how many idle connections per peer NewTCPTransport
// keeps for reuse.
const DefaultMaxPool = 3

// NewTCPTransport returns raft's NetworkTransport over stream (usually
// Mux.Raft()), with DefaultMaxPool pooled connections per peer, a
// DefaultTimeout I/O deadline, and raft's default of two AppendEntries in
// flight, which turns pipelined replication on. A nil logger is raft's
// default logger.
func NewTCPTransport(stream raft.StreamLayer, logger hclog.Logger) *raft.NetworkTransport {
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: DefaultMaxPool,
		Timeout: DefaultTimeout,
		Logger:  logger,
	})
}
