package wire

import (
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/service"
)

// Method names a call of the forwarding RPC: the service's method
// "Node.<Method>" on the wire.
type Method string

// The calls of the forwarding RPC.
const (
	MethodSubmit              Method = "Submit"              // one write (SubmitArgs)
	MethodSubmitBatch         Method = "SubmitBatch"         // writes gathered by a follower (SubmitBatchArgs)
	MethodRead                Method = "Read"                // a read (ReadArgs)
	MethodAddMember           Method = "AddMember"           // add a member (fsm.Member)
	MethodRemoveMember        Method = "RemoveMember"        // remove a member, before request IDs (string)
	MethodRemoveMemberRequest Method = "RemoveMemberRequest" // remove a member under a request ID (RemoveArgs)
	MethodTransfer            Method = "Transfer"            // hand leadership over (string)
	MethodFinalizeUpgrade     Method = "FinalizeUpgrade"     // raise the feature level (int)
	MethodJoin                Method = "Join"                // a node asks to join (fsm.Member)
	MethodProbe               Method = "Probe"               // who are you, and whom do you follow (ProbeArgs)
	MethodHealth              Method = "Health"              // a leader asks a member's health (int)
	MethodRestore             Method = "Restore"             // a restore, before request IDs ([]byte)
	MethodRestoreRequest      Method = "RestoreRequest"      // a restore under a request ID (RestoreArgs)
)

// ReadOp names what a read reads.
type ReadOp string

// The reads.
const (
	ReadGet             ReadOp = "get"
	ReadList            ReadOp = "list"
	ReadPool            ReadOp = "pool"
	ReadPools           ReadOp = "pools"
	ReadRangeAllocation ReadOp = "rangeallocation"
	ReadBackup          ReadOp = "backup"
	ReadService         ReadOp = "service"
	ReadServices        ReadOp = "services"
	ReadServiceNetwork  ReadOp = "service-network"
	ReadReconcile       ReadOp = "reconcile"
)

// ReadArgs names a read.
type ReadArgs struct {
	Op                        ReadOp
	Pool, Value, Owner, After string
	Limit                     int
	Consistency               int
	// Namespace and Name name a Service ("service"; "services" uses
	// Namespace); Fence and Services are a reconcile's.
	Namespace, Name string
	Fence           uint64
	Services        []service.Spec
	// Protocol is the sender's version.Protocol (0: 1).
	Protocol int
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
	// Services, Network, Findings and Index answer the Service reads:
	// Index is the applied index the answer was read at.
	Services []fsm.ServiceRecord
	Network  fsm.ServiceNetwork
	Findings []fsm.Finding
	Index    uint64
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
	// Protocol is the sender's version.Protocol (0 from a node of the
	// release before protocol versions: 1).
	Protocol int
}

// RestoreArgs carries a backup to the leader (Node.RestoreRequest): its
// bytes, and the request ID and fingerprint the follower received it
// with, so that a retry through any node is the same request.
type RestoreArgs struct {
	Data        []byte
	ID          string
	Fingerprint uint64
}

// RemoveMemberArgs names the member to remove (Node.RemoveMemberRequest),
// and the request ID the follower received the call with.
type RemoveMemberArgs struct {
	ID        string
	RequestID string
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

// JoinReply answers Node.Join: the ID of the cluster the node was added
// to, which it takes before it opens its Raft port.
type JoinReply struct {
	Err       *Error
	ClusterID string
}

// ProbeArgs asks a node about itself: what a joining node's leader, a
// founding peer, and the leader's promotion and readiness checks want to
// know.
type ProbeArgs struct {
	From     string // the asking node's ID, for logs
	Protocol int    // the asking node's version.Protocol (0: 1)
}

// ProbeReply is what a node says of itself.
type ProbeReply struct {
	ID        string
	ClusterID string // "" until it has learned one
	// HasState: its Raft log, stable store or snapshots hold state.
	HasState bool
	// Ready: it is founding a cluster and has seen every peer without
	// state (or has state): a peer may bootstrap once all are ready.
	Ready bool
	// Candidate is the cluster ID a ready founder proposes; the founders
	// take the least of all their candidates.
	Candidate   string
	LastIndex   uint64
	Applied     uint64
	CommitIndex uint64
	Leader      bool
	Voters      []string // its configuration's voters, when it has state

	// The fields below are new in protocol 2; a node of the previous
	// release leaves them zero.

	// Version is its release (version.String) and Protocol its protocol
	// version (version.Protocol).
	Version  string
	Protocol int
	// FeatureLevel is the highest replicated feature level its binary
	// supports (fsm.MaxFeatureLevel); 0 means the previous release's, 1.
	FeatureLevel int
	// LastTerm is the term of its last log entry (Raft health).
	LastTerm uint64
	// DiskFree is the free space, in bytes, of the file system holding its
	// data directory; DiskLow is true while that is below its
	// --min-free-disk, so it refuses writes and should not lead.
	DiskFree uint64
	DiskLow  bool

	// ClusterLevel is the cluster's feature level as its state machine
	// has applied it; 0 from a release before this field.
	ClusterLevel int
}

// MemberHealth is the leader's view of one member (protocol 2).
type MemberHealth struct {
	Reachable, Healthy bool
	// LastContact is how long ago the leader last heard from it; -1: never.
	LastContact  time.Duration
	MatchIndex   uint64
	Lag          uint64
	Version      string
	FeatureLevel int
	DiskFree     uint64
	DiskLow      bool
}

// HealthReply answers Node.Health: the leader's view of every member, by
// ID, and the cluster's feature level.
type HealthReply struct {
	Members      map[string]MemberHealth
	FeatureLevel int
	Err          *Error
}

// SubmitBatchArgs carries the requests waiting on a follower to the
// leader in one call: Entry is fsm.EncodeBatch of them, the log entry form.
type SubmitBatchArgs struct {
	Entry    []byte
	Protocol int
}

// SubmitBatchReply answers Node.SubmitBatch: Err refuses the whole call
// (nothing was proposed); otherwise Results answers each request, in
// order, as Node.Submit would have.
type SubmitBatchReply struct {
	Results []SubmitReply
	Err     *Error
}
