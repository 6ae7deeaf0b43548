// Package client is a Go client of rangealloc's HTTP API v1, used by the
// CLI and the tests. Every method returns *Error for an error answer, so
// callers can read the code, the HTTP status and the details.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rangealloc/rangealloc/api/internal/wire"
	"github.com/rangealloc/rangealloc/api/types"
)

// Client talks to one node.
type Client struct {
	base  string
	hc    *http.Client
	token string
}

// New returns a client of the node at addr ("http://127.0.0.1:7080",
// "https://10.0.0.1:7080", or "127.0.0.1:7080" for plain HTTP). hc nil: a
// client with a 30 s timeout. For HTTPS with the cluster's own CA, give hc
// a Transport that trusts it: TLSClientConfig from
// certs.Files.StaticClientConfig, or DialTLSContext
// certs.DialTLS(files.ClientConfig()), which follows CA changes.
func New(addr string, hc *http.Client) *Client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: strings.TrimRight(addr, "/"), hc: hc}
}

// WithToken returns a copy of c that sends token as
// "Authorization: Bearer <token>" on every request ("" sends none).
func (c *Client) WithToken(token string) *Client {
	cc := *c
	cc.token = token
	return &cc
}

// Addr returns the node's base URL.
func (c *Client) Addr() string { return c.base }

// Error is an error answer of the API.
type Error struct {
	Status   int
	Code     string
	Message  string
	Details  map[string]any // as JSON decodes them: every number a float64
	ServedBy string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Meta is what a response says besides its body.
type Meta struct {
	Status       int
	ServedBy     string
	AppliedIndex string
}

// Options are per-call options of writes and reads.
type Options struct {
	IdempotencyKey string
	Consistency    string // "", "linearizable", "leader", "stale"
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, hdr http.Header, body io.Reader, out any) (Meta, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return Meta{}, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Meta{}, err
	}
	defer resp.Body.Close()
	meta := Meta{Status: resp.StatusCode, ServedBy: resp.Header.Get("X-Rangealloc-Served-By"),
		AppliedIndex: resp.Header.Get("X-Rangealloc-Applied-Index")}
	var data []byte
	switch out.(type) {
	case *types.AllocationList, *types.TxnResults:
		// Their decoding copies what it keeps: the body is read into a
		// pooled buffer, not a fresh one grown a dozen times.
		buf := readBuffers.Get().(*bytes.Buffer)
		buf.Reset()
		defer func() {
			if buf.Cap() <= maxPooledRead {
				readBuffers.Put(buf)
			}
		}()
		_, err = buf.ReadFrom(resp.Body)
		data = buf.Bytes()
	default:
		data, err = io.ReadAll(resp.Body)
	}
	if err != nil {
		return meta, err
	}
	if resp.StatusCode >= 400 {
		var eb types.ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
			return meta, &Error{Status: resp.StatusCode, Code: http.StatusText(resp.StatusCode), Message: strings.TrimSpace(string(data)), ServedBy: meta.ServedBy}
		}
		return meta, &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, Details: eb.Error.Details, ServedBy: meta.ServedBy}
	}
	switch o := out.(type) {
	case nil:
	case *[]byte:
		*o = data
	case *types.AllocationList:
		// The bulk answers in their plain form decode without reflection.
		if wire.DecodeAllocationList(data, o) {
			return meta, nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return meta, fmt.Errorf("decode %s %s answer: %w", method, path, err)
		}
	case *types.TxnResults:
		if wire.DecodeTxnResults(data, o) {
			return meta, nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return meta, fmt.Errorf("decode %s %s answer: %w", method, path, err)
		}
	case *types.Allocation:
		if *o == (types.Allocation{}) && wire.DecodeAllocation(data, o) {
			return meta, nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return meta, fmt.Errorf("decode %s %s answer: %w", method, path, err)
		}
	default:
		if err := json.Unmarshal(data, out); err != nil {
			return meta, fmt.Errorf("decode %s %s answer: %w", method, path, err)
		}
	}
	return meta, nil
}

// readBuffers keeps the buffers bulk answers are read into.
var readBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledRead bounds the buffers readBuffers keeps.
const maxPooledRead = 4 << 20

func jsonBody(v any) io.Reader {
	if r, ok := v.(types.AllocateRequest); ok { // every allocation's: without reflection
		return bytes.NewReader(wire.AppendAllocateRequest(make([]byte, 0, 64+len(r.Value)+len(r.Owner)), &r))
	}
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}

func (o Options) header() http.Header {
	h := http.Header{}
	if o.IdempotencyKey != "" {
		h.Set("Idempotency-Key", o.IdempotencyKey)
	}
	return h
}

func (o Options) query() url.Values {
	q := url.Values{}
	if o.Consistency != "" {
		q.Set("consistency", o.Consistency)
	}
	return q
}

// named refuses, without a request, an empty name, which a path cannot
// carry: it answers what a node answers for a name that names nothing
// (code, with its status), so that a call over HTTP and one in process
// fail alike.
func named(what, name string, status int, code string) error {
	if name != "" {
		return nil
	}
	return &Error{Status: status, Code: code, Message: fmt.Sprintf("the %s is empty", what)}
}

// namedPool refuses an empty pool name, as a node answers a pool it does
// not have.
func namedPool(name string) error {
	return named("pool name", name, http.StatusNotFound, types.CodePoolNotFound)
}

// namedRelease refuses a release of an empty value, then from an empty
// pool name: a node looks at the value first.
func namedRelease(pool, value string) error {
	if err := named("value", value, http.StatusBadRequest, types.CodeInvalidArgument); err != nil {
		return err
	}
	return namedPool(pool)
}

func poolPath(name string, rest ...string) string {
	p := "/v1/pools/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// Pools lists every pool.
func (c *Client) Pools(ctx context.Context, o Options) ([]types.Pool, error) {
	var out types.PoolList
	_, err := c.do(ctx, http.MethodGet, "/v1/pools", o.query(), nil, nil, &out)
	return out.Pools, err
}

// Pool returns one pool.
func (c *Client) Pool(ctx context.Context, name string, o Options) (types.Pool, error) {
	if err := namedPool(name); err != nil {
		return types.Pool{}, err
	}
	var out types.Pool
	_, err := c.do(ctx, http.MethodGet, poolPath(name), o.query(), nil, nil, &out)
	return out, err
}

// CreatePool creates a pool; created is false when an identical one existed.
func (c *Client) CreatePool(ctx context.Context, name, rng string, o Options) (p types.Pool, created bool, err error) {
	if err := named("pool name", name, http.StatusBadRequest, types.CodeInvalidArgument); err != nil {
		return types.Pool{}, false, err
	}
	meta, err := c.do(ctx, http.MethodPut, poolPath(name), nil, o.header(), jsonBody(types.CreatePoolRequest{Range: rng}), &p)
	return p, meta.Status == http.StatusCreated, err
}

// DeletePool deletes an empty pool.
func (c *Client) DeletePool(ctx context.Context, name string, o Options) error {
	if err := namedPool(name); err != nil {
		return err
	}
	_, err := c.do(ctx, http.MethodDelete, poolPath(name), nil, o.header(), nil, nil)
	return err
}

// RangeAllocation returns a pool as Kubernetes' RangeAllocation.
func (c *Client) RangeAllocation(ctx context.Context, name string, o Options) (types.RangeAllocation, error) {
	if err := namedPool(name); err != nil {
		return types.RangeAllocation{}, err
	}
	var out types.RangeAllocation
	_, err := c.do(ctx, http.MethodGet, poolPath(name, "rangeallocation"), o.query(), nil, nil, &out)
	return out, err
}

// Allocate takes value (or a dynamic value when value is "").
func (c *Client) Allocate(ctx context.Context, pool, value, owner string, o Options) (types.Allocation, Meta, error) {
	if err := namedPool(pool); err != nil {
		return types.Allocation{}, Meta{}, err
	}
	var out types.Allocation
	meta, err := c.do(ctx, http.MethodPost, poolPath(pool, "allocations"), nil, o.header(),
		jsonBody(types.AllocateRequest{Value: value, Owner: owner}), &out)
	return out, meta, err
}

// AllocateCount takes count dynamic values in one request.
func (c *Client) AllocateCount(ctx context.Context, pool, owner string, count int, o Options) ([]types.Allocation, Meta, error) {
	if err := namedPool(pool); err != nil {
		return nil, Meta{}, err
	}
	var out types.AllocationList
	meta, err := c.do(ctx, http.MethodPost, poolPath(pool, "allocations"), nil, o.header(),
		jsonBody(types.AllocateRequest{Owner: owner, Count: &count}), &out)
	return out.Allocations, meta, err
}

// Get returns the allocation of a value.
func (c *Client) Get(ctx context.Context, pool, value string, o Options) (types.Allocation, Meta, error) {
	if err := namedPool(pool); err != nil {
		return types.Allocation{}, Meta{}, err
	}
	if value == "" {
		// A node looks the pool up first: only it knows whether the pool
		// exists.
		if _, err := c.Pool(ctx, pool, o); err != nil {
			return types.Allocation{}, Meta{}, err
		}
		return types.Allocation{}, Meta{}, named("value", value, http.StatusBadRequest, types.CodeInvalidArgument)
	}
	var out types.Allocation
	meta, err := c.do(ctx, http.MethodGet, poolPath(pool, "allocations", value), o.query(), nil, nil, &out)
	return out, meta, err
}

// List returns a page of a pool's allocations; next is "" on the last page.
func (c *Client) List(ctx context.Context, pool, owner, after string, limit int, o Options) ([]types.Allocation, string, error) {
	page, _, err := c.ListPage(ctx, pool, owner, after, limit, o)
	next := ""
	if page.Next != nil {
		next = *page.Next
	}
	return page.Allocations, next, err
}

// ListPage is List with the whole answer and its metadata (which node
// served it).
func (c *Client) ListPage(ctx context.Context, pool, owner, after string, limit int, o Options) (types.AllocationList, Meta, error) {
	if err := namedPool(pool); err != nil {
		return types.AllocationList{}, Meta{}, err
	}
	q := o.query()
	if owner != "" {
		q.Set("owner", owner)
	}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out types.AllocationList
	meta, err := c.do(ctx, http.MethodGet, poolPath(pool, "allocations"), q, nil, nil, &out)
	return out, meta, err
}

// ListAll pages through every allocation of a pool.
func (c *Client) ListAll(ctx context.Context, pool, owner string, o Options) ([]types.Allocation, error) {
	var all []types.Allocation
	after := ""
	for {
		page, next, err := c.List(ctx, pool, owner, after, types.MaxLimit, o)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		after = next
	}
}

// Release frees a value; with owner set, only if that owner holds it.
func (c *Client) Release(ctx context.Context, pool, value, owner string, o Options) (Meta, error) {
	if err := namedRelease(pool, value); err != nil {
		return Meta{}, err
	}
	q := url.Values{}
	if owner != "" {
		q.Set("owner", owner)
	}
	return c.do(ctx, http.MethodDelete, poolPath(pool, "allocations", value), q, o.header(), nil, nil)
}

// Txn applies operations all or nothing.
func (c *Client) Txn(ctx context.Context, ops []types.TxnOp, o Options) ([]types.Allocation, error) {
	var out types.TxnResults
	req := types.TxnRequest{Ops: ops}
	body := wire.AppendTxnRequest(make([]byte, 0, wire.TxnRequestSize(&req)), &req)
	_, err := c.do(ctx, http.MethodPost, "/v1/txn", nil, o.header(), bytes.NewReader(body), &out)
	return out.Results, err
}

// Cluster returns the answering node's view of the cluster.
func (c *Client) Cluster(ctx context.Context) (types.ClusterStatus, error) {
	var out types.ClusterStatus
	_, err := c.do(ctx, http.MethodGet, "/v1/cluster", nil, nil, nil, &out)
	return out, err
}

// AddMember adds a member: a non-voter, promoted once caught up unless m.Voter is false.
func (c *Client) AddMember(ctx context.Context, m types.MemberRequest) (types.ClusterStatus, error) {
	var out types.ClusterStatus
	_, err := c.do(ctx, http.MethodPost, "/v1/cluster/members", nil, nil, jsonBody(m), &out)
	return out, err
}

// RemoveMember removes a member.
func (c *Client) RemoveMember(ctx context.Context, id string) error {
	return c.RemoveMemberWith(ctx, id, Options{})
}

// RemoveMemberWith removes a member; o.IdempotencyKey makes a retry answer
// as the first call did.
func (c *Client) RemoveMemberWith(ctx context.Context, id string, o Options) error {
	if err := named("member ID", id, http.StatusNotFound, types.CodeMemberNotFound); err != nil {
		return err
	}
	_, err := c.do(ctx, http.MethodDelete, "/v1/cluster/members/"+url.PathEscape(id), nil, o.header(), nil, nil)
	return err
}

// TransferLeadership hands leadership to id ("" for any follower).
func (c *Client) TransferLeadership(ctx context.Context, id string) (types.ClusterStatus, error) {
	var out types.ClusterStatus
	_, err := c.do(ctx, http.MethodPost, "/v1/cluster/leader-transfer", nil, nil, jsonBody(types.TransferRequest{ID: id}), &out)
	return out, err
}

// FinalizeUpgrade raises the cluster's feature level to what every
// member's release supports, and returns the cluster status.
func (c *Client) FinalizeUpgrade(ctx context.Context) (types.ClusterStatus, error) {
	var out types.ClusterStatus
	_, err := c.do(ctx, http.MethodPost, "/v1/cluster/finalize-upgrade", nil, nil, nil, &out)
	return out, err
}

// Backup returns a linearizable backup of the whole state.
func (c *Client) Backup(ctx context.Context) ([]byte, error) { return c.BackupWith(ctx, Options{}) }

// BackupWith returns a backup of the whole state at o's consistency:
// "stale" is the node's own state, answered without a leader.
func (c *Client) BackupWith(ctx context.Context, o Options) ([]byte, error) {
	var out []byte
	_, err := c.do(ctx, http.MethodGet, "/v1/snapshot", o.query(), nil, nil, &out)
	return out, err
}

// Restore replaces the whole cluster's state with a backup.
func (c *Client) Restore(ctx context.Context, backup []byte) error {
	return c.RestoreWith(ctx, backup, Options{})
}

// RestoreWith is Restore with o's Idempotency-Key: a retry with the same
// key and backup answers what the first restore did, and restores nothing
// again.
func (c *Client) RestoreWith(ctx context.Context, backup []byte, o Options) error {
	h := o.header()
	h.Set("Content-Type", "application/octet-stream")
	_, err := c.do(ctx, http.MethodPost, "/v1/snapshot/restore", nil, h, bytes.NewReader(backup), nil)
	return err
}

// Health asks /healthz: nil when the node's HTTP server answers.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil, nil)
	return err
}

// Ready reports whether the node is ready, and why not.
func (c *Client) Ready(ctx context.Context) (bool, string, error) {
	var out map[string]string
	meta, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil, &out)
	if meta.Status == http.StatusServiceUnavailable {
		var ae *Error
		if e, ok := err.(*Error); ok {
			ae = e
		}
		if ae != nil {
			return false, ae.Message, nil
		}
	}
	if err != nil {
		return false, "", err
	}
	return true, "", nil
}

// Is matches the sentinel of the same code in api/types (which the
// rangealloc package re-exports), so errors.Is(err, rangealloc.ErrRangeFull)
// holds for an error answer too.
func (e *Error) Is(target error) bool {
	t, ok := target.(*types.Error)
	if !ok {
		return false
	}
	return types.NewError(e.Code, e.Message, e.Details, nil).Is(t)
}
