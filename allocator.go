package rangealloc

import (
	"context"
	"io"

	"github.com/rangealloc/rangealloc/api/types"
)

// Allocator is what a control plane calls. *Node implements it in process;
// the HTTP client implements it against a remote cluster
// (client.NewRemote in github.com/rangealloc/rangealloc/api/client). Both
// answer the same values and the same errors, so a program moves between
// the two by changing one constructor.
//
// Writes take an idempotency key (WithIdempotencyKey): a retry with the
// same key returns the first attempt's result instead of applying the
// write twice. Reads take a consistency (WithConsistency); the default is
// Linearizable.
type Allocator interface {
	// Ready returns nil once a call made right after it can be served:
	// the node belongs to a cluster, knows its leader, has applied what
	// the leader committed, and the configured pools and service network
	// exist. It waits until then, or until ctx ends.
	Ready(ctx context.Context) error

	// Allocate gives value in pool to owner. An empty value takes a free
	// one, from the dynamic band first.
	Allocate(ctx context.Context, pool, value, owner string, opts ...CallOption) (Allocation, error)
	// AllocateN gives count free values of pool to owner, all or none.
	AllocateN(ctx context.Context, pool, owner string, count int, opts ...CallOption) ([]Allocation, error)
	// Release frees value in pool. A non-empty owner must be the holder.
	Release(ctx context.Context, pool, value, owner string, opts ...CallOption) error
	// Txn applies ops all or none, and answers one allocation per op.
	Txn(ctx context.Context, ops []TxnOp, opts ...CallOption) ([]Allocation, error)
	// Get reads the allocation of value in pool.
	Get(ctx context.Context, pool, value string, opts ...CallOption) (Allocation, error)
	// List reads the allocations of pool, of owner when it is not empty,
	// in value order.
	List(ctx context.Context, pool, owner string, opts ...CallOption) ([]Allocation, error)

	// Pools reads every pool; Pool reads one.
	Pools(ctx context.Context, opts ...CallOption) ([]Pool, error)
	Pool(ctx context.Context, name string, opts ...CallOption) (Pool, error)
	// CreatePool creates a pool over rng. Creating it again with the same
	// range is a no-op.
	CreatePool(ctx context.Context, name, rng string, opts ...CallOption) (Pool, error)
	// DeletePool deletes an empty pool.
	DeletePool(ctx context.Context, name string, opts ...CallOption) error

	// PutService creates or updates a Service and allocates its
	// ClusterIPs and NodePorts as Kubernetes would.
	PutService(ctx context.Context, svc Service, opts ...CallOption) (Service, error)
	// DeleteService deletes a Service and releases its values.
	DeleteService(ctx context.Context, namespace, name string, opts ...CallOption) (Service, error)
	// Service reads one Service; Services reads those of namespace (all,
	// when it is empty).
	Service(ctx context.Context, namespace, name string, opts ...CallOption) (Service, error)
	Services(ctx context.Context, namespace string, opts ...CallOption) (ServiceList, error)
	// ServiceNetwork reads the service network; SetServiceNetwork sets it.
	ServiceNetwork(ctx context.Context, opts ...CallOption) (ServiceNetwork, error)
	SetServiceNetwork(ctx context.Context, sn ServiceNetwork, opts ...CallOption) (ServiceNetwork, error)

	// Cluster reads the members and the leader, as the answering node
	// sees them.
	Cluster(ctx context.Context) (ClusterStatus, error)
	// AddMember adds a node; RemoveMember removes one.
	AddMember(ctx context.Context, m MemberRequest) error
	RemoveMember(ctx context.Context, id string, opts ...CallOption) error

	// Backup writes a copy of the whole state to w; Restore replaces the
	// whole state with a backup.
	Backup(ctx context.Context, w io.Writer, opts ...CallOption) error
	Restore(ctx context.Context, r io.Reader, opts ...CallOption) error

	// Close releases the Allocator. A Node stops, handing leadership over
	// first.
	Close() error
}

// The values calls take and answer. They are the JSON forms of the HTTP
// API, so the same values travel in process and over the network.
type (
	// Allocation is a value held by an owner: Pool, Value, Owner, Band
	// ("static" or "dynamic": where the value lies), Mode ("static" when
	// the caller named the value, "dynamic" when the pool chose it) and
	// Revision, the log index of the write that made it.
	Allocation = types.Allocation
	// Pool is a pool's status: Name, Kind ("ipv4", "ipv6" or "port"),
	// Range, First, Last, Size, Used, Free, and the Static and Dynamic
	// bands with their own size and use.
	Pool = types.Pool
	// Band is one band of a pool: First, Last, Size, Used.
	Band = types.Band
	// TxnOp is one operation of a transaction: Op ("allocate" or
	// "release"), Pool, Value (empty in an allocate: any free value),
	// Owner.
	TxnOp = types.TxnOp
	// Service is the allocation side of a Kubernetes Service: Namespace,
	// Name, UID, Type, ClusterIPs, IPFamilies, IPFamilyPolicy, Ports with
	// their NodePorts, and the fields Kubernetes allocates by.
	Service = types.Service
	// ServicePort is one port of a Service: Name, Protocol, Port,
	// NodePort (0: none asked for).
	ServicePort = types.ServicePort
	// ServiceList is a list of Services and the Revision it was read at.
	ServiceList = types.ServiceList
	// ServiceNetwork names the pools Services draw from: IPFamilies (the
	// first is the primary), Pools (family to pool name) and
	// NodePortPool.
	ServiceNetwork = types.ServiceNetwork
	// ClusterStatus is a node's view of its cluster: its ID, the
	// ClusterID, the Leader, the Raft Term and indexes, the FeatureLevel
	// and the Members with their health.
	ClusterStatus = types.ClusterStatus
	// ClusterMember is one member in a ClusterStatus.
	ClusterMember = types.ClusterMember
	// MemberRequest asks to add a member: ID, RaftAddr, APIAddr, and
	// Voter (nil or true: a voter once caught up).
	MemberRequest = types.MemberRequest
)

// Consistency is how fresh a read must be.
type Consistency = types.Consistency

// The consistency levels of reads.
const (
	// Linearizable reads see every write acknowledged before they began.
	Linearizable = types.Linearizable
	// Leader reads are served by the leader without confirming that it
	// still leads.
	Leader = types.Leader
	// Stale reads are served from the answering node's own state.
	Stale = types.Stale
)

// CallOption sets an option of one call.
type CallOption = types.CallOption

// WithIdempotencyKey names a write, so that a retry with the same key is
// answered the first attempt's result instead of being applied twice.
func WithIdempotencyKey(key string) CallOption { return types.WithIdempotencyKey(key) }

// WithConsistency sets a read's consistency.
func WithConsistency(c Consistency) CallOption { return types.WithConsistency(c) }

// WithDryRun makes a Service write answer what it would do, and change
// nothing.
func WithDryRun() CallOption { return types.WithDryRun() }
