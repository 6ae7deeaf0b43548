package rangealloc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/convert"
	"github.com/rangealloc/rangealloc/node"
)

// Node is one member of a rangealloc cluster, running in this process. It
// serves every call itself when it leads, and forwards it to the leader
// otherwise. Open starts one; Close stops it.
type Node struct {
	n      *node.Node
	log    hclog.Logger
	closed atomic.Bool
}

var _ Allocator = (*Node)(nil)

// Open starts a node with cfg: it opens or creates the data directory,
// then founds, joins or rejoins its cluster. It returns before the node
// can serve: call Ready. ctx bounds the start-up, restoring
// Advanced.RestoreFrom included. A node founding a cluster with Peers
// waits in Open until the peers answer: open them side by side.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	nc, err := cfg.node()
	if err == nil {
		err = nc.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	n, err := node.Open(ctx, nc)
	switch {
	case errors.Is(err, node.ErrLogStoreMismatch):
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	case errors.Is(err, node.ErrStorage), errors.Is(err, node.ErrLostBesideBackups):
		return nil, fmt.Errorf("%w: %v", ErrStorage, err)
	case err != nil:
		return nil, fmt.Errorf("rangealloc: open %s: %w", cfg.DataDir, err)
	}
	return &Node{n: n, log: nc.Logger.Named("api")}, nil
}

// node turns the public config into the node's, and checks what only the
// public config can get wrong.
func (cfg Config) node() (node.Config, error) {
	nc := node.DefaultConfig()
	if cfg.Advanced.Nonvoter && len(cfg.Join) == 0 {
		return nc, errors.New("Advanced.Nonvoter: only a node that joins (Join) can stay a non-voter")
	}
	if sn := cfg.ServiceNetwork; sn != nil {
		for _, name := range append(mapValues(sn.Pools), sn.NodePortPool) {
			if !slices.ContainsFunc(cfg.Pools, func(p PoolSpec) bool { return p.Name == name }) && len(cfg.Join) == 0 {
				return nc, fmt.Errorf("ServiceNetwork names pool %q, which is not one of Pools", name)
			}
		}
	}
	nc.ID, nc.DataDir, nc.RaftAddr, nc.AdvertiseRaft, nc.APIAddr = cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.AdvertiseAddr, cfg.APIAddr
	nc.Join, nc.ServerTLS, nc.ClientTLS = cfg.Join, cfg.ServerTLS, cfg.ClientTLS
	for _, p := range cfg.Peers {
		nc.Peers = append(nc.Peers, node.Peer(p))
	}
	for _, p := range cfg.Pools {
		nc.Pools = append(nc.Pools, node.PoolSpec(p))
	}
	if cfg.ServiceNetwork != nil {
		sn, err := convert.FromNetwork(*cfg.ServiceNetwork)
		if err != nil {
			return nc, fmt.Errorf("ServiceNetwork: %v", err)
		}
		nc.ServiceNetwork = &sn
	}
	nc.Logger = cfg.Logger
	if nc.Logger == nil {
		nc.Logger = hclog.New(&hclog.LoggerOptions{Name: "rangealloc", Level: hclog.Info, Output: os.Stderr})
	}
	a := cfg.Advanced
	set := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	set(&nc.HeartbeatTimeout, a.HeartbeatTimeout)
	set(&nc.ElectionTimeout, a.ElectionTimeout)
	set(&nc.LeaderLeaseTimeout, a.LeaderLeaseTimeout)
	switch {
	case a.DiskStallTimeout < 0:
		nc.DiskStallTimeout = 0 // off
	case a.DiskStallTimeout > 0:
		nc.DiskStallTimeout = a.DiskStallTimeout
	}
	set(&nc.BackupInterval, a.BackupInterval)
	if a.LogStore != "" {
		nc.LogStore = a.LogStore
	}
	if a.SnapshotThreshold != 0 {
		nc.SnapshotThreshold = a.SnapshotThreshold
	}
	if a.TrailingLogs != 0 {
		nc.TrailingLogs = a.TrailingLogs
	}
	switch {
	case a.NoMinFreeDisk && a.MinFreeDisk != 0:
		return nc, errors.New("Advanced.MinFreeDisk and Advanced.NoMinFreeDisk exclude each other: set a floor, or turn it off")
	case a.NoMinFreeDisk:
		nc.MinFreeDisk = 0 // off
	case a.MinFreeDisk != 0:
		nc.MinFreeDisk = a.MinFreeDisk
	}
	if a.BackupRetain != 0 {
		nc.BackupRetain = a.BackupRetain
	}
	nc.Nonvoter, nc.BackupDir, nc.RestoreFrom = a.Nonvoter, a.BackupDir, a.RestoreFrom
	if a.CleanupDeadAfter < 0 || (a.CleanupDeadAfter > 0 && a.CleanupDeadAfter < node.MinCleanupDeadAfter) {
		return nc, fmt.Errorf("Advanced.CleanupDeadAfter is %v: want 0 (never) or at least %v, well beyond a restart, "+
			"or a member restarting or cut off for a moment is removed", a.CleanupDeadAfter, node.MinCleanupDeadAfter)
	}
	nc.CleanupDeadAfter, nc.FoundEmpty = a.CleanupDeadAfter, a.FoundEmpty
	return nc, nil
}

// Handler serves the HTTP API v1 over this node: the API the rangealloc
// server binary serves, which client.NewRemote calls. It checks no
// credentials: serve it on loopback, or behind your own authentication.
func (n *Node) Handler() http.Handler {
	return api.NewServer(n.n, api.Options{Logger: n.log})
}

// mapValues returns m's values in key order.
func mapValues(m map[string]string) []string {
	keys := slices.Sorted(maps.Keys(m))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, m[k])
	}
	return out
}

// ID is the node's ID.
func (n *Node) ID() string { return n.n.ID() }

// IsLeader reports whether the node leads its cluster now.
func (n *Node) IsLeader() bool { return n.n.IsLeader() }

// readyPoll is how often Ready looks again.
const readyPoll = 10 * time.Millisecond

// Ready waits until a call made right after it can be served: the node
// belongs to a cluster, knows its leader, has applied what the leader
// committed, and the pools and service network the cluster was founded
// with exist. The HTTP server's /readyz answers by the same rule. When ctx
// ends first, Ready fails with ErrUnavailable, and the message says what
// the node was waiting for.
func (n *Node) Ready(ctx context.Context) error {
	t := time.NewTicker(readyPoll)
	defer t.Stop()
	for {
		if n.closed.Load() {
			return types.NewError(types.CodeUnavailable, "not ready: the node is closed", nil, nil)
		}
		r := n.n.Readiness()
		if r.Ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return types.NewError(types.CodeUnavailable, fmt.Sprintf("not ready (%s): %s", r.Reason, r.Detail), nil, ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops the node. A leader hands leadership to another voter first,
// so that the cluster does not wait out an election.
func (n *Node) Close() error {
	n.closed.Store(true)
	return n.n.Close()
}

// fail turns the node's error into the public one; nil stays nil.
func fail(err error) error { return failOp(err, false) }

// failOp is fail for transactions: the error names the failing op.
func failOp(err error, withOp bool) error {
	if err == nil {
		return nil
	}
	return convert.Error(err, withOp)
}

// read resolves the options of a read.
func read(opts []CallOption) (node.Consistency, error) {
	return convert.Consistency(types.Resolve(opts).Consistency)
}

// Allocate gives value in pool to owner. An empty value takes a free one,
// from the dynamic band first.
func (n *Node) Allocate(ctx context.Context, pool, value, owner string, opts ...CallOption) (Allocation, error) {
	as, err := n.n.Allocate(ctx, pool, value, owner, 0, types.Resolve(opts).IdempotencyKey)
	if err != nil {
		return Allocation{}, fail(err)
	}
	return convert.Allocation(as[0]), nil
}

// AllocateN gives count free values of pool to owner, all or none.
func (n *Node) AllocateN(ctx context.Context, pool, owner string, count int, opts ...CallOption) ([]Allocation, error) {
	if count < 1 || count > fsm.MaxCount {
		return nil, types.NewError(types.CodeInvalidArgument, fmt.Sprintf(`"count" must be 1 to %d, got %d`, fsm.MaxCount, count), nil, nil)
	}
	as, err := n.n.Allocate(ctx, pool, "", owner, count, types.Resolve(opts).IdempotencyKey)
	if err != nil {
		return nil, fail(err)
	}
	return convert.Allocations(as), nil
}

// Release frees value in pool. A non-empty owner must be the holder.
func (n *Node) Release(ctx context.Context, pool, value, owner string, opts ...CallOption) error {
	_, err := n.n.Release(ctx, pool, value, owner, types.Resolve(opts).IdempotencyKey)
	return fail(err)
}

// Txn applies ops all or none, and answers one allocation per op. A failed
// op is named by Details["op"], its index.
func (n *Node) Txn(ctx context.Context, ops []TxnOp, opts ...CallOption) ([]Allocation, error) {
	in, err := convert.TxnOps(ops, false)
	if err != nil {
		return nil, failOp(err, true)
	}
	res, err := n.n.Txn(ctx, in, types.Resolve(opts).IdempotencyKey)
	if err != nil {
		return nil, failOp(err, true)
	}
	return convert.TxnResults(res), nil
}

// Get reads the allocation of value in pool.
func (n *Node) Get(ctx context.Context, pool, value string, opts ...CallOption) (Allocation, error) {
	c, err := read(opts)
	if err != nil {
		return Allocation{}, err
	}
	a, err := n.n.Get(ctx, c, pool, value)
	if err != nil {
		return Allocation{}, fail(err)
	}
	return convert.Allocation(a), nil
}

// List reads the allocations of pool, of owner when it is not empty, in
// value order. A long list is read in pages of types.MaxLimit, each at
// the consistency asked for.
func (n *Node) List(ctx context.Context, pool, owner string, opts ...CallOption) ([]Allocation, error) {
	c, err := read(opts)
	if err != nil {
		return nil, err
	}
	out := []Allocation{}
	for after := ""; ; {
		as, next, err := n.n.List(ctx, c, pool, owner, after, types.MaxLimit)
		if err != nil {
			return nil, fail(err)
		}
		out = append(out, convert.Allocations(as)...)
		if next == "" {
			return out, nil
		}
		after = next
	}
}

// Pools reads every pool.
func (n *Node) Pools(ctx context.Context, opts ...CallOption) ([]Pool, error) {
	c, err := read(opts)
	if err != nil {
		return nil, err
	}
	ps, err := n.n.Pools(ctx, c)
	if err != nil {
		return nil, fail(err)
	}
	out := make([]Pool, 0, len(ps))
	for _, p := range ps {
		out = append(out, convert.Pool(p))
	}
	return out, nil
}

// Pool reads one pool.
func (n *Node) Pool(ctx context.Context, name string, opts ...CallOption) (Pool, error) {
	c, err := read(opts)
	if err != nil {
		return Pool{}, err
	}
	p, err := n.n.Pool(ctx, c, name)
	if err != nil {
		return Pool{}, fail(err)
	}
	return convert.Pool(p), nil
}

// CreatePool creates a pool over rng. Creating it again with the same
// range is a no-op; with another range it fails with ErrPoolExists.
func (n *Node) CreatePool(ctx context.Context, name, rng string, opts ...CallOption) (Pool, error) {
	p, _, err := n.n.CreatePool(ctx, name, rng, types.Resolve(opts).IdempotencyKey)
	if err != nil {
		return Pool{}, fail(err)
	}
	return convert.Pool(p), nil
}

// DeletePool deletes an empty pool.
func (n *Node) DeletePool(ctx context.Context, name string, opts ...CallOption) error {
	return fail(n.n.DeletePool(ctx, name, types.Resolve(opts).IdempotencyKey))
}

// PutService creates or updates a Service, and allocates its ClusterIPs
// and NodePorts as Kubernetes would. WithDryRun answers what it would do.
func (n *Node) PutService(ctx context.Context, svc Service, opts ...CallOption) (Service, error) {
	o := types.Resolve(opts)
	res, err := n.n.PutService(ctx, convert.Spec(svc), o.DryRun, o.IdempotencyKey)
	if err != nil {
		return Service{}, fail(err)
	}
	return convert.Service(res.ServiceRecord), nil
}

// DeleteService deletes a Service and releases its values, and answers
// the Service as it was.
func (n *Node) DeleteService(ctx context.Context, namespace, name string, opts ...CallOption) (Service, error) {
	o := types.Resolve(opts)
	rec, err := n.n.DeleteService(ctx, namespace, name, o.DryRun, o.IdempotencyKey)
	if err != nil {
		return Service{}, fail(err)
	}
	return convert.Service(rec), nil
}

// Service reads one Service.
func (n *Node) Service(ctx context.Context, namespace, name string, opts ...CallOption) (Service, error) {
	c, err := read(opts)
	if err != nil {
		return Service{}, err
	}
	rec, err := n.n.Service(ctx, c, namespace, name)
	if err != nil {
		return Service{}, fail(err)
	}
	return convert.Service(rec), nil
}

// Services reads the Services of namespace, or all when it is empty,
// sorted by namespace and name.
func (n *Node) Services(ctx context.Context, namespace string, opts ...CallOption) (ServiceList, error) {
	c, err := read(opts)
	if err != nil {
		return ServiceList{}, err
	}
	recs, rev, err := n.n.Services(ctx, c, namespace)
	if err != nil {
		return ServiceList{}, fail(err)
	}
	out := ServiceList{Services: make([]Service, 0, len(recs)), Revision: rev}
	for _, r := range recs {
		out.Services = append(out.Services, convert.Service(r))
	}
	return out, nil
}

// ServiceNetwork reads the service network.
func (n *Node) ServiceNetwork(ctx context.Context, opts ...CallOption) (ServiceNetwork, error) {
	c, err := read(opts)
	if err != nil {
		return ServiceNetwork{}, err
	}
	sn, err := n.n.ServiceNetwork(ctx, c)
	if err != nil {
		return ServiceNetwork{}, fail(err)
	}
	return convert.Network(sn), nil
}

// SetServiceNetwork sets the service network, and answers it.
func (n *Node) SetServiceNetwork(ctx context.Context, sn ServiceNetwork, opts ...CallOption) (ServiceNetwork, error) {
	in, err := convert.FromNetwork(sn)
	if err != nil {
		return ServiceNetwork{}, err
	}
	if err := n.n.SetServiceNetwork(ctx, in, types.Resolve(opts).IdempotencyKey); err != nil {
		return ServiceNetwork{}, fail(err)
	}
	return convert.Network(in), nil
}

// Cluster reads the members and the leader, as this node sees them.
func (n *Node) Cluster(ctx context.Context) (ClusterStatus, error) {
	st, err := n.n.Cluster()
	if err != nil {
		return ClusterStatus{}, fail(err)
	}
	return convert.Cluster(st), nil
}

// AddMember adds a node to the cluster, as a voter once it has caught up
// unless m.Voter is false.
func (n *Node) AddMember(ctx context.Context, m MemberRequest) error {
	in, err := convert.Member(m)
	if err != nil {
		return err
	}
	return fail(n.n.AddMember(ctx, in))
}

// RemoveMember removes a member from the cluster.
func (n *Node) RemoveMember(ctx context.Context, id string, opts ...CallOption) error {
	return fail(n.n.RemoveMember(ctx, id, types.Resolve(opts).IdempotencyKey))
}

// Backup writes a copy of the whole state to w: a snapshot in the format
// of the data directory's, which Restore and `rangealloc restore` take.
func (n *Node) Backup(ctx context.Context, w io.Writer, opts ...CallOption) error {
	c, err := read(opts)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := n.n.BackupAt(ctx, c, &buf); err != nil {
		return fail(err)
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// Restore replaces the whole state of the cluster with a backup. The
// backup is checked before anything changes.
func (n *Node) Restore(ctx context.Context, r io.Reader, opts ...CallOption) error {
	return fail(n.n.Restore(ctx, r, types.Resolve(opts).IdempotencyKey))
}
