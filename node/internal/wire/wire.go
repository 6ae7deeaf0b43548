// Package wire holds the message types of a node's internal forwarding
// RPC (net/rpc with gob over the Raft port): what a follower sends the
// leader and what comes back. net/rpc needs them exported; keeping them
// here keeps them out of package node's API.
package wire

import "github.com/rangealloc/rangealloc/fsm"

// ReadArgs names a read.
type ReadArgs struct {
	Op                        string // "get", "list", "pool", "pools", "rangeallocation", "backup"
	Pool, Value, Owner, After string
	Limit                     int
	Consistency               int
}

// Pool is a pool's status with its range as a string.
type Pool struct {
	Name, Range                   string
	Used, UsedStatic, UsedDynamic int
}

// ReadReply is the answer to a read.
type ReadReply struct {
	Alloc  fsm.Allocation
	Allocs []fsm.Allocation
	Next   string
	Pools  []Pool
	Range  string
	Data   []byte
	Err    *fsm.Error
}

// Error carries a node error, keeping its class.
type Error struct {
	Domain    *fsm.Error // a domain failure
	NotLeader bool       // definite: the receiver is not the leader
	Unknown   bool       // the outcome is unknown
	Invalid   bool       // an invalid backup
	Msg       string
}

// SubmitArgs carries one request to the leader, in the log entry form
// (fsm.EncodeBatch of one request): compact, and no reflection.
type SubmitArgs struct {
	Entry []byte
}

// SubmitReply answers Node.Submit; Result is fsm.EncodeResult's form.
type SubmitReply struct {
	Result []byte
	Err    *Error
}

// ReadRPCReply answers Node.Read.
type ReadRPCReply struct {
	Reply *ReadReply
	Err   *Error
}

// CallReply answers the cluster calls and Node.Restore.
type CallReply struct{ Err *Error }
