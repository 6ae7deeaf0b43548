package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/rangealloc/rangealloc/api/types"
)

// Remote is the HTTP client in the shape of rangealloc.Allocator: the
// calls an embedded node takes, with the same values and the same errors
// (*types.Error, which the rangealloc package calls Error). A control
// plane moves from a node in its own process to a remote cluster by
// swapping rangealloc.Open for NewRemote.
type Remote struct {
	c *Client
}

// NewRemote returns an Allocator of the cluster whose node serves the HTTP
// API at addr; hc is as for New. Any node will do: followers forward.
func NewRemote(addr string, hc *http.Client) *Remote { return &Remote{c: New(addr, hc)} }

// WithToken returns a copy of r that sends token on every request.
func (r *Remote) WithToken(token string) *Remote { return &Remote{c: r.c.WithToken(token)} }

// Client returns the underlying client, for the calls Remote does not
// have.
func (r *Remote) Client() *Client { return r.c }

// remoteReadyPoll is how often Ready asks /readyz again.
const remoteReadyPoll = 50 * time.Millisecond

// Ready waits until the node answers /readyz with ready, or ctx ends. The
// node is ready when a call made right after can be served.
func (r *Remote) Ready(ctx context.Context) error {
	t := time.NewTicker(remoteReadyPoll)
	defer t.Stop()
	for {
		ok, reason, err := r.c.Ready(ctx)
		if err == nil && ok {
			return nil
		}
		if err != nil {
			reason = err.Error()
		}
		select {
		case <-ctx.Done():
			return types.NewError(types.CodeUnavailable, fmt.Sprintf("not ready: %s", reason), nil, ctx.Err())
		case <-t.C:
		}
	}
}

// Close closes the client's idle connections.
func (r *Remote) Close() error {
	r.c.hc.CloseIdleConnections()
	return nil
}

// options turns a read's call options into the client's.
func options(opts []types.CallOption) Options {
	o := types.Resolve(opts)
	return Options{IdempotencyKey: o.IdempotencyKey, Consistency: string(o.Consistency)}
}

// writeOptions turns a write's call options into the client's. A write
// without an idempotency key gets one drawn here, as a node in process
// draws one: if the answer is lost on the way back, the caller can retry
// under it (remoteErr puts it in the error's details).
func writeOptions(opts []types.CallOption) Options {
	o := options(opts)
	if o.IdempotencyKey == "" {
		o.IdempotencyKey = drawnKeyPrefix + uuid.NewString()
	}
	return o
}

// drawnKeyPrefix marks the keys a caller did not choose, as a node marks
// the request IDs it draws: the cluster counts them apart from keyed ones.
const drawnKeyPrefix = "rangealloc:"

// remoteErr turns an error answer into a *types.Error that unwraps to the
// *Error. A failure to reach the node, or to hear its answer, is
// Unavailable; for a write (key set) it is an unknown outcome, with the
// key to retry under, since the node may have applied it.
func remoteErr(err error) error { return remoteWriteErr(err, "") }

// details is a copy of an answer's details with the numbers in the Go
// types a node in process gives them: JSON carries every number as a
// float64 (the *Error the client returns keeps them so).
func details(d map[string]any) map[string]any {
	if d == nil {
		return nil
	}
	out := make(map[string]any, len(d))
	for k, v := range d {
		f, ok := v.(float64)
		switch {
		case ok && k == "op":
			v = int(f)
		case ok && k == "lastIndex":
			v = uint64(f)
		}
		out[k] = v
	}
	return out
}

func remoteWriteErr(err error, key string) error {
	var e *Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &e):
		return types.NewError(e.Code, e.Message, details(e.Details), e)
	case key != "":
		return types.NewError(types.CodeUnavailable, "outcome unknown: the request may or may not have been applied; retry with the same Idempotency-Key: "+err.Error(),
			map[string]any{"idempotencyKey": key, "cause": err.Error()}, err)
	}
	return types.NewError(types.CodeUnavailable, err.Error(), nil, err)
}

// Allocate gives value in pool to owner; an empty value takes a free one.
func (r *Remote) Allocate(ctx context.Context, pool, value, owner string, opts ...types.CallOption) (types.Allocation, error) {
	o := writeOptions(opts)
	a, _, err := r.c.Allocate(ctx, pool, value, owner, o)
	return a, remoteWriteErr(err, o.IdempotencyKey)
}

// AllocateN gives count free values of pool to owner, all or none.
func (r *Remote) AllocateN(ctx context.Context, pool, owner string, count int, opts ...types.CallOption) ([]types.Allocation, error) {
	o := writeOptions(opts)
	as, _, err := r.c.AllocateCount(ctx, pool, owner, count, o)
	return as, remoteWriteErr(err, o.IdempotencyKey)
}

// Release frees value in pool; a non-empty owner must be the holder.
func (r *Remote) Release(ctx context.Context, pool, value, owner string, opts ...types.CallOption) error {
	o := writeOptions(opts)
	_, err := r.c.Release(ctx, pool, value, owner, o)
	return remoteWriteErr(err, o.IdempotencyKey)
}

// Txn applies ops all or none.
func (r *Remote) Txn(ctx context.Context, ops []types.TxnOp, opts ...types.CallOption) ([]types.Allocation, error) {
	o := writeOptions(opts)
	as, err := r.c.Txn(ctx, ops, o)
	return as, remoteWriteErr(err, o.IdempotencyKey)
}

// Get reads the allocation of value in pool.
func (r *Remote) Get(ctx context.Context, pool, value string, opts ...types.CallOption) (types.Allocation, error) {
	a, _, err := r.c.Get(ctx, pool, value, options(opts))
	return a, remoteErr(err)
}

// List reads the allocations of pool, of owner when it is not empty.
func (r *Remote) List(ctx context.Context, pool, owner string, opts ...types.CallOption) ([]types.Allocation, error) {
	as, err := r.c.ListAll(ctx, pool, owner, options(opts))
	return as, remoteErr(err)
}

// Pools reads every pool.
func (r *Remote) Pools(ctx context.Context, opts ...types.CallOption) ([]types.Pool, error) {
	ps, err := r.c.Pools(ctx, options(opts))
	return ps, remoteErr(err)
}

// Pool reads one pool.
func (r *Remote) Pool(ctx context.Context, name string, opts ...types.CallOption) (types.Pool, error) {
	p, err := r.c.Pool(ctx, name, options(opts))
	return p, remoteErr(err)
}

// CreatePool creates a pool over rng; again with the same range is a no-op.
func (r *Remote) CreatePool(ctx context.Context, name, rng string, opts ...types.CallOption) (types.Pool, error) {
	o := writeOptions(opts)
	p, _, err := r.c.CreatePool(ctx, name, rng, o)
	return p, remoteWriteErr(err, o.IdempotencyKey)
}

// DeletePool deletes an empty pool.
func (r *Remote) DeletePool(ctx context.Context, name string, opts ...types.CallOption) error {
	o := writeOptions(opts)
	return remoteWriteErr(r.c.DeletePool(ctx, name, o), o.IdempotencyKey)
}

// serviceOptions turns call options into a Service write's.
func serviceOptions(opts []types.CallOption) ServiceOptions {
	return ServiceOptions{Options: writeOptions(opts), DryRun: types.Resolve(opts).DryRun}
}

// PutService creates or updates a Service.
func (r *Remote) PutService(ctx context.Context, svc types.Service, opts ...types.CallOption) (types.Service, error) {
	o := serviceOptions(opts)
	out, _, err := r.c.PutService(ctx, svc, o)
	return out, remoteWriteErr(err, o.IdempotencyKey)
}

// DeleteService deletes a Service and answers it as it was.
func (r *Remote) DeleteService(ctx context.Context, namespace, name string, opts ...types.CallOption) (types.Service, error) {
	o := serviceOptions(opts)
	out, err := r.c.DeleteService(ctx, namespace, name, o)
	return out, remoteWriteErr(err, o.IdempotencyKey)
}

// Service reads one Service.
func (r *Remote) Service(ctx context.Context, namespace, name string, opts ...types.CallOption) (types.Service, error) {
	out, err := r.c.GetService(ctx, namespace, name, options(opts))
	return out, remoteErr(err)
}

// Services reads the Services of namespace, or all when it is empty.
func (r *Remote) Services(ctx context.Context, namespace string, opts ...types.CallOption) (types.ServiceList, error) {
	out, err := r.c.ListServices(ctx, namespace, options(opts))
	return out, remoteErr(err)
}

// ServiceNetwork reads the service network.
func (r *Remote) ServiceNetwork(ctx context.Context, opts ...types.CallOption) (types.ServiceNetwork, error) {
	out, err := r.c.ServiceNetwork(ctx, options(opts))
	return out, remoteErr(err)
}

// SetServiceNetwork sets the service network.
func (r *Remote) SetServiceNetwork(ctx context.Context, sn types.ServiceNetwork, opts ...types.CallOption) (types.ServiceNetwork, error) {
	o := writeOptions(opts)
	out, err := r.c.SetServiceNetwork(ctx, sn, o)
	return out, remoteWriteErr(err, o.IdempotencyKey)
}

// Cluster reads the members and the leader, as the node sees them.
func (r *Remote) Cluster(ctx context.Context) (types.ClusterStatus, error) {
	out, err := r.c.Cluster(ctx)
	return out, remoteErr(err)
}

// AddMember adds a node to the cluster.
func (r *Remote) AddMember(ctx context.Context, m types.MemberRequest) error {
	_, err := r.c.AddMember(ctx, m)
	return remoteErr(err)
}

// RemoveMember removes a member from the cluster.
func (r *Remote) RemoveMember(ctx context.Context, id string, opts ...types.CallOption) error {
	o := writeOptions(opts)
	return remoteWriteErr(r.c.RemoveMemberWith(ctx, id, o), o.IdempotencyKey)
}

// Backup writes a copy of the whole state to w.
func (r *Remote) Backup(ctx context.Context, w io.Writer, opts ...types.CallOption) error {
	b, err := r.c.BackupWith(ctx, options(opts))
	if err != nil {
		return remoteErr(err)
	}
	_, err = io.Copy(w, bytes.NewReader(b))
	return err
}

// Restore replaces the whole state with a backup.
func (r *Remote) Restore(ctx context.Context, rd io.Reader, opts ...types.CallOption) error {
	b, err := io.ReadAll(rd)
	if err != nil {
		return err
	}
	o := writeOptions(opts)
	return remoteWriteErr(r.c.RestoreWith(ctx, b, o), o.IdempotencyKey)
}
