package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/internal/testaddr"
	"github.com/rangealloc/rangealloc/node"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()), "the OpenAPI document is valid")
	return doc
}

// validating checks every request and response against the OpenAPI document.
type validating struct {
	t      *testing.T
	router routers.Router
	next   http.RoundTripper
}

func (v *validating) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody { // an empty body stays none, not chunked
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := v.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := v.router.FindRoute(vreq)
	if err != nil && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed) {
		return resp, nil // a deliberate probe of a path or method the API does not have
	}
	if err != nil {
		v.t.Errorf("%s %s: not in the OpenAPI document: %v", req.Method, req.URL.Path, err)
		return resp, nil
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{ExcludeRequestBody: resp.StatusCode >= 400, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		v.t.Errorf("%s %s -> %d: response does not match the OpenAPI document: %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
	if resp.Header.Get("X-Rangealloc-Served-By") == "" {
		v.t.Errorf("%s %s: no X-Rangealloc-Served-By", req.Method, req.URL.Path)
	}
	return resp, nil
}

type env struct {
	c    *client.Client
	url  string
	hc   *http.Client
	node *node.Node
}

func newEnv(t *testing.T) *env {
	t.Helper()
	doc := loadDoc(t)
	doc.Servers = nil // match requests to the test server's address
	router, err := legacy.NewRouter(doc)
	require.NoError(t, err)
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.RaftAddr = t.TempDir(), testaddr.Loopback(t)
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 150*time.Millisecond
	cfg.Pools = []node.PoolSpec{{Name: "clusterip-ipv4", Range: "10.96.0.0/16"}, {Name: "nodeport", Range: "30000-32767"}}
	metrics := api.NewMetrics()
	cfg.OnApply, cfg.OnCommit = metrics.ObserveApply, metrics.ObserveCommit
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := node.Open(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	metrics.WatchPools(n.LocalState())
	srv := httptest.NewServer(api.NewServer(n, api.Options{Metrics: metrics}))
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: &validating{t: t, router: router, next: http.DefaultTransport}, Timeout: 20 * time.Second}
	e := &env{c: client.New(srv.URL, hc), url: srv.URL, hc: hc, node: n}
	require.Eventually(t, func() bool {
		ps, err := e.c.Pools(ctx, client.Options{})
		return err == nil && len(ps) == 2
	}, 10*time.Second, 20*time.Millisecond)
	return e
}

// raw sends a request and returns the status and decoded error code. A
// body goes as application/json unless hdr says otherwise; an empty value
// in hdr leaves that header out.
func (e *env) raw(t *testing.T, method, path, body string, hdr map[string]string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := e.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var eb api.ErrorBody
	_ = json.Unmarshal(data, &eb)
	return resp.StatusCode, eb.Error.Code, data
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func code(err error) string {
	if ae, ok := err.(*client.Error); ok {
		return ae.Code
	}
	return ""
}

func TestPools(t *testing.T) {
	e := newEnv(t)
	p, created, err := e.c.CreatePool(ctx(t), "svc-v6", "fd00:10:96::5/112", client.Options{})
	require.NoError(t, err)
	assert.True(t, created)
	assert.Equal(t, api.Pool{Name: "svc-v6", Kind: "ip", Family: "IPv6", Range: "fd00:10:96::/112", First: "fd00:10:96::1",
		Last: "fd00:10:96::ffff", Size: 65535, Free: 65535, Static: api.Band{First: "fd00:10:96::1", Last: "fd00:10:96::100", Size: 256},
		Dynamic: api.Band{First: "fd00:10:96::101", Last: "fd00:10:96::ffff", Size: 65279}}, p)
	_, created, err = e.c.CreatePool(ctx(t), "svc-v6", "fd00:10:96::/112", client.Options{})
	require.NoError(t, err, "an identical pool answers 200")
	assert.False(t, created)
	_, _, err = e.c.CreatePool(ctx(t), "svc-v6", "fd00:10:97::/112", client.Options{})
	assert.Equal(t, "PoolExists", code(err))
	_, _, err = e.c.CreatePool(ctx(t), "wide", "10.96.0.0/12", client.Options{})
	var ce *client.Error
	require.ErrorAs(t, err, &ce, "a range around an existing pool's")
	assert.Equal(t, 409, ce.Status)
	assert.Equal(t, "PoolOverlap", ce.Code)
	assert.Equal(t, map[string]any{"pool": "clusterip-ipv4"}, ce.Details)
	small, _, err := e.c.CreatePool(ctx(t), "tiny", "40000-40015", client.Options{})
	require.NoError(t, err)
	assert.Equal(t, api.Band{Size: 0, Used: 0}, small.Static, "no static band")
	pools, err := e.c.Pools(ctx(t), client.Options{})
	require.NoError(t, err)
	var names []string
	for _, p := range pools {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"clusterip-ipv4", "nodeport", "svc-v6", "tiny"}, names, "sorted by name")
	_, _, err = e.c.Allocate(ctx(t), "tiny", "", "o", client.Options{})
	require.NoError(t, err)
	assert.Equal(t, "PoolNotEmpty", code(e.c.DeletePool(ctx(t), "tiny", client.Options{})))
	require.NoError(t, e.c.DeletePool(ctx(t), "svc-v6", client.Options{}))
	_, err = e.c.Pool(ctx(t), "svc-v6", client.Options{})
	assert.Equal(t, "PoolNotFound", code(err))
	assert.Equal(t, "PoolNotFound", code(e.c.DeletePool(ctx(t), "svc-v6", client.Options{})))
}

func TestAllocations(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	dyn, meta, err := e.c.Allocate(c, "clusterip-ipv4", "", "default/web", client.Options{})
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, meta.Status)
	assert.Equal(t, "dynamic", dyn.Mode)
	assert.Equal(t, "dynamic", dyn.Band)
	st, _, err := e.c.Allocate(c, "clusterip-ipv4", "10.96.0.10", "kube-system/dns", client.Options{})
	require.NoError(t, err)
	assert.Equal(t, api.Allocation{Pool: "clusterip-ipv4", Value: "10.96.0.10", Owner: "kube-system/dns", Band: "static", Mode: "static", Revision: st.Revision}, st)

	_, _, err = e.c.Allocate(c, "clusterip-ipv4", "10.96.0.10", "x", client.Options{})
	var ae *client.Error
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusConflict, ae.Status)
	assert.Equal(t, "AlreadyAllocated", ae.Code)
	assert.Equal(t, "provided IP is already allocated", ae.Message)
	assert.Equal(t, "kube-system/dns", ae.Details["owner"])

	_, _, err = e.c.Allocate(c, "clusterip-ipv4", "10.0.0.1", "x", client.Options{})
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusUnprocessableEntity, ae.Status)
	assert.Equal(t, "the provided IP (10.0.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/16", ae.Message)
	_, _, err = e.c.Allocate(c, "nodeport", "40000", "x", client.Options{})
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "provided port is not in the valid range. The range of valid ports is 30000-32767", ae.Message)

	many, _, err := e.c.AllocateCount(c, "nodeport", "batch", 25, client.Options{})
	require.NoError(t, err)
	assert.Len(t, many, 25)
	got, _, err := e.c.Get(c, "nodeport", many[3].Value, client.Options{})
	require.NoError(t, err)
	assert.Equal(t, many[3], got)
	page, next, err := e.c.List(c, "nodeport", "batch", "", 10, client.Options{})
	require.NoError(t, err)
	assert.Len(t, page, 10)
	assert.Equal(t, page[9].Value, next)
	all, err := e.c.ListAll(c, "nodeport", "", client.Options{})
	require.NoError(t, err)
	assert.Len(t, all, 25)

	_, err = e.c.Release(c, "clusterip-ipv4", "10.96.0.10", "someone-else", client.Options{})
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "OwnerMismatch", ae.Code)
	assert.Equal(t, "kube-system/dns", ae.Details["owner"])
	meta, err = e.c.Release(c, "clusterip-ipv4", "10.96.0.10", "kube-system/dns", client.Options{})
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, meta.Status)
	_, err = e.c.Release(c, "clusterip-ipv4", "10.96.0.10", "", client.Options{})
	assert.Equal(t, "NotAllocated", code(err))
	_, _, err = e.c.Get(c, "clusterip-ipv4", "10.96.0.10", client.Options{})
	assert.Equal(t, "NotAllocated", code(err))

	_, meta, err = e.c.Get(c, "nodeport", many[0].Value, client.Options{Consistency: "stale"})
	require.NoError(t, err)
	assert.NotEmpty(t, meta.AppliedIndex, "stale reads carry X-Rangealloc-Applied-Index")

	ra, err := e.c.RangeAllocation(c, "nodeport", client.Options{})
	require.NoError(t, err)
	want := new(big.Int)
	for _, a := range many {
		port, err := strconv.Atoi(a.Value)
		require.NoError(t, err)
		want.SetBit(want, port-30000, 1)
	}
	assert.Equal(t, "RangeAllocation", ra.Kind)
	assert.Equal(t, "30000-32767", ra.Range)
	assert.Equal(t, want.Bytes(), ra.Data, "Kubernetes' bitmap bytes")
}

func TestTxn(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	res, err := e.c.Txn(c, []api.TxnOp{{Op: "allocate", Pool: "nodeport", Value: "30001", Owner: "a"},
		{Op: "allocate", Pool: "clusterip-ipv4", Owner: "a"}}, client.Options{})
	require.NoError(t, err)
	require.Len(t, res, 2)
	_, err = e.c.Txn(c, []api.TxnOp{{Op: "release", Pool: "nodeport", Value: "30001", Owner: "a"},
		{Op: "allocate", Pool: "nodeport", Value: "30002", Owner: "b"},
		{Op: "allocate", Pool: "nodeport", Value: "99999", Owner: "b"}}, client.Options{})
	var ae *client.Error
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, "NotInRange", ae.Code)
	assert.EqualValues(t, 2, ae.Details["op"], "the index of the failing operation")
	got, _, err := e.c.Get(c, "nodeport", "30001", client.Options{})
	require.NoError(t, err, "the failed transaction's release was not applied")
	assert.Equal(t, "a", got.Owner)
	_, _, err = e.c.Get(c, "nodeport", "30002", client.Options{})
	assert.Equal(t, "NotAllocated", code(err), "nor its allocate")
}

func TestIdempotencyKey(t *testing.T) {
	e := newEnv(t)
	hdr := map[string]string{"Idempotency-Key": "create-web-1"}
	s1, _, b1 := e.raw(t, "POST", "/v1/pools/clusterip-ipv4/allocations", `{"owner":"default/web"}`, hdr)
	s2, _, b2 := e.raw(t, "POST", "/v1/pools/clusterip-ipv4/allocations", `{"owner":"default/web"}`, hdr)
	assert.Equal(t, http.StatusCreated, s1)
	assert.Equal(t, s1, s2)
	assert.JSONEq(t, string(b1), string(b2), "a retry returns the first answer")
	p, err := e.c.Pool(ctx(t), "clusterip-ipv4", client.Options{})
	require.NoError(t, err)
	assert.Equal(t, 1, p.Used)
	s3, c3, _ := e.raw(t, "POST", "/v1/pools/clusterip-ipv4/allocations", `{"owner":"default/other"}`, hdr)
	assert.Equal(t, http.StatusUnprocessableEntity, s3)
	assert.Equal(t, "IdempotencyKeyReused", c3)
	// A failure is remembered as well.
	k := map[string]string{"Idempotency-Key": "bad-1"}
	f1, fc1, _ := e.raw(t, "POST", "/v1/pools/nodeport/allocations", `{"value":"1"}`, k)
	f2, fc2, _ := e.raw(t, "POST", "/v1/pools/nodeport/allocations", `{"value":"1"}`, k)
	assert.Equal(t, []any{422, "NotInRange"}, []any{f1, fc1})
	assert.Equal(t, []any{f1, fc1}, []any{f2, fc2})
	// A member's removal reads the key too: one used for an allocation is
	// refused, whatever the member.
	m, mc, _ := e.raw(t, "DELETE", "/v1/cluster/members/nope", "", hdr)
	assert.Equal(t, []any{422, "IdempotencyKeyReused"}, []any{m, mc})
}

// TestBadInput: every endpoint answers bad input with the right 4xx and
// changes nothing.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	_, _, err := e.c.Allocate(ctx(t), "nodeport", "30500", "keep", client.Options{})
	require.NoError(t, err)
	snapshot := func() string {
		var out []string
		for _, p := range []string{"clusterip-ipv4", "nodeport"} {
			ra, err := e.c.RangeAllocation(ctx(t), p, client.Options{})
			require.NoError(t, err)
			out = append(out, ra.Range, string(ra.Data))
		}
		ps, err := e.c.Pools(ctx(t), client.Options{})
		require.NoError(t, err)
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return strings.Join(out, "|")
	}
	was := snapshot()
	big := `{"owner":"` + strings.Repeat("x", api.MaxBody) + `"}`
	cases := []struct {
		name, method, path, body string
		hdr                      map[string]string
		status                   int
		code                     string
	}{
		{"unknown field", "POST", "/v1/pools/nodeport/allocations", `{"owner":"a","colour":"red"}`, nil, 400, "InvalidArgument"},
		{"malformed JSON", "POST", "/v1/pools/nodeport/allocations", `{"owner":`, nil, 400, "InvalidArgument"},
		{"trailing data", "POST", "/v1/pools/nodeport/allocations", `{"owner":"a"} {}`, nil, 400, "InvalidArgument"},
		{"value not a string", "POST", "/v1/pools/nodeport/allocations", `{"value":30080}`, nil, 400, "InvalidArgument"},
		{"body over 1 MiB", "POST", "/v1/pools/nodeport/allocations", big, nil, 413, "PayloadTooLarge"},
		{"count zero", "POST", "/v1/pools/nodeport/allocations", `{"count":0}`, nil, 400, "InvalidArgument"},
		{"count too large", "POST", "/v1/pools/nodeport/allocations", `{"count":4097}`, nil, 400, "InvalidArgument"},
		{"count with value", "POST", "/v1/pools/nodeport/allocations", `{"count":2,"value":"30001"}`, nil, 400, "InvalidArgument"},
		{"unparseable value", "POST", "/v1/pools/nodeport/allocations", `{"value":"30k"}`, nil, 400, "InvalidArgument"},
		{"owner too long", "POST", "/v1/pools/nodeport/allocations", `{"owner":"` + strings.Repeat("o", 254) + `"}`, nil, 400, "InvalidArgument"},
		{"unknown pool", "POST", "/v1/pools/nope/allocations", `{}`, nil, 404, "PoolNotFound"},
		{"key too long", "POST", "/v1/pools/nodeport/allocations", `{}`, map[string]string{"Idempotency-Key": strings.Repeat("k", 129)}, 400, "InvalidArgument"},
		{"bad pool name", "PUT", "/v1/pools/Bad_Name", `{"range":"10.0.0.0/24"}`, nil, 400, "InvalidArgument"},
		{"pool name too long", "PUT", "/v1/pools/" + strings.Repeat("a", 64), `{"range":"10.0.0.0/24"}`, nil, 400, "InvalidArgument"},
		{"bad range", "PUT", "/v1/pools/p", `{"range":"10.0.0.0/33"}`, nil, 400, "InvalidArgument"},
		{"range too large", "PUT", "/v1/pools/p", `{"range":"10.0.0.0/8"}`, nil, 400, "InvalidArgument"},
		{"no range", "PUT", "/v1/pools/p", `{}`, nil, 400, "InvalidArgument"},
		{"range not a string", "PUT", "/v1/pools/p", `{"range":5}`, nil, 400, "InvalidArgument"},
		{"bad consistency", "GET", "/v1/pools?consistency=eventual", "", nil, 400, "InvalidArgument"},
		{"bad limit", "GET", "/v1/pools/nodeport/allocations?limit=0", "", nil, 400, "InvalidArgument"},
		{"limit too large", "GET", "/v1/pools/nodeport/allocations?limit=10001", "", nil, 400, "InvalidArgument"},
		{"bad after", "GET", "/v1/pools/nodeport/allocations?after=zz", "", nil, 400, "InvalidArgument"},
		{"get out of range", "GET", "/v1/pools/nodeport/allocations/1", "", nil, 422, "NotInRange"},
		{"get free", "GET", "/v1/pools/nodeport/allocations/30001", "", nil, 404, "NotAllocated"},
		{"release out of range", "DELETE", "/v1/pools/nodeport/allocations/1", "", nil, 422, "NotInRange"},
		{"release free", "DELETE", "/v1/pools/nodeport/allocations/30001", "", nil, 404, "NotAllocated"},
		{"release foreign", "DELETE", "/v1/pools/nodeport/allocations/30500?owner=thief", "", nil, 409, "OwnerMismatch"},
		{"txn empty", "POST", "/v1/txn", `{"ops":[]}`, nil, 400, "InvalidArgument"},
		{"txn bad op", "POST", "/v1/txn", `{"ops":[{"op":"steal","pool":"nodeport"}]}`, nil, 400, "InvalidArgument"},
		{"txn unknown field", "POST", "/v1/txn", `{"ops":[],"x":1}`, nil, 400, "InvalidArgument"},
		{"txn op unknown field", "POST", "/v1/txn", `{"ops":[{"op":"release","pool":"nodeport","value":"30500","x":1}]}`, nil, 400, "InvalidArgument"},
		{"txn trailing data", "POST", "/v1/txn", `{"ops":[{"op":"release","pool":"nodeport","value":"30500"}]} {}`, nil, 400, "InvalidArgument"},
		{"txn malformed", "POST", "/v1/txn", `{"ops":[{"op":"release","pool":"nodeport"`, nil, 400, "InvalidArgument"},
		{"txn value not a string", "POST", "/v1/txn", `{"ops":[{"op":"release","pool":"nodeport","value":30500}]}`, nil, 400, "InvalidArgument"},
		{"txn over 1 MiB", "POST", "/v1/txn", `{"ops":[{"op":"release","pool":"nodeport","value":"` + strings.Repeat("3", api.MaxBody) + `"}]}`, nil, 413, "PayloadTooLarge"},
		{"member without id", "POST", "/v1/cluster/members", `{"raftAddr":"127.0.0.1:1"}`, nil, 400, "InvalidArgument"},
		{"remove unknown member", "DELETE", "/v1/cluster/members/nope", "", nil, 404, "MemberNotFound"},
		{"remove member, key too long", "DELETE", "/v1/cluster/members/nope", "", map[string]string{"Idempotency-Key": strings.Repeat("k", 129)}, 400, "InvalidArgument"},
		{"transfer unknown field", "POST", "/v1/cluster/leader-transfer", `{"who":"x"}`, nil, 400, "InvalidArgument"},
		{"restore garbage", "POST", "/v1/snapshot/restore", "not a snapshot", octetStream, 400, "InvalidArgument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, c, body := e.raw(t, tc.method, tc.path, tc.body, tc.hdr)
			assert.Equal(t, tc.status, status, "%s", body)
			assert.Equal(t, tc.code, c, "%s", body)
		})
	}
	assert.Equal(t, was, snapshot(), "bad input changed nothing")
}

var octetStream = map[string]string{"Content-Type": "application/octet-stream"}

// TestContentType: a write that carries a body must say it is JSON (a
// restore: application/octet-stream), else 415 and nothing changes; a
// write without a body needs no Content-Type.
func TestContentType(t *testing.T) {
	e := newEnv(t)
	_, _, err := e.c.Allocate(ctx(t), "nodeport", "30500", "keep", client.Options{})
	require.NoError(t, err)
	ct := func(v string) map[string]string { return map[string]string{"Content-Type": v} }
	cases := []struct {
		name, method, path, body string
		hdr                      map[string]string
		status                   int
		code                     string
	}{
		{"allocate as text", "POST", "/v1/pools/nodeport/allocations", `{"owner":"a"}`, ct("text/plain"), 415, "UnsupportedMediaType"},
		{"allocate without Content-Type", "POST", "/v1/pools/nodeport/allocations", `{"owner":"a"}`, ct(""), 415, "UnsupportedMediaType"},
		{"allocate as a form", "POST", "/v1/pools/nodeport/allocations", `owner=a`, ct("application/x-www-form-urlencoded"), 415, "UnsupportedMediaType"},
		{"allocate as JSON-ish", "POST", "/v1/pools/nodeport/allocations", `{"owner":"a"}`, ct("application/jsonx"), 415, "UnsupportedMediaType"},
		{"allocate, bad media type", "POST", "/v1/pools/nodeport/allocations", `{"owner":"a"}`, ct("application/json; charset"), 415, "UnsupportedMediaType"},
		{"create pool as text", "PUT", "/v1/pools/p", `{"range":"10.0.0.0/24"}`, ct("text/plain"), 415, "UnsupportedMediaType"},
		{"delete pool with a text body", "DELETE", "/v1/pools/nodeport", `x`, ct("text/plain"), 415, "UnsupportedMediaType"},
		{"release with a text body", "DELETE", "/v1/pools/nodeport/allocations/30500", `x`, ct("text/plain"), 415, "UnsupportedMediaType"},
		{"txn as text", "POST", "/v1/txn", `{"ops":[{"op":"release","pool":"nodeport","value":"30500"}]}`, ct("text/plain"), 415, "UnsupportedMediaType"},
		{"add member as text", "POST", "/v1/cluster/members", `{"id":"x","raftAddr":"127.0.0.1:1"}`, ct("text/plain"), 415, "UnsupportedMediaType"},
		{"remove member with a text body", "DELETE", "/v1/cluster/members/nope", `x`, ct("text/plain"), 415, "UnsupportedMediaType"},
		{"transfer as text", "POST", "/v1/cluster/leader-transfer", `{}`, ct("text/plain"), 415, "UnsupportedMediaType"},
		{"restore as JSON", "POST", "/v1/snapshot/restore", `{}`, nil, 415, "UnsupportedMediaType"},
		{"restore without Content-Type", "POST", "/v1/snapshot/restore", `x`, ct(""), 415, "UnsupportedMediaType"},
		// Accepted: the handler judges the body.
		{"JSON with a charset", "POST", "/v1/pools/nodeport/allocations", `{"value":"30001"}`, ct("application/json; charset=utf-8"), 201, ""},
		{"JSON in capitals", "POST", "/v1/pools/nodeport/allocations", `{"value":"30002"}`, ct("Application/JSON"), 201, ""},
		{"release without a body", "DELETE", "/v1/pools/nodeport/allocations/30002", "", nil, 204, ""},
		{"allocate without a body", "POST", "/v1/pools/nodeport/allocations", "", nil, 400, "InvalidArgument"}, // its body is required
		{"delete pool without a body", "DELETE", "/v1/pools/nope", "", nil, 404, "PoolNotFound"},
		{"restore garbage", "POST", "/v1/snapshot/restore", `x`, octetStream, 400, "InvalidArgument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, c, body := e.raw(t, tc.method, tc.path, tc.body, tc.hdr)
			assert.Equal(t, tc.status, status, "%s", body)
			assert.Equal(t, tc.code, c, "%s", body)
		})
	}
	p, err := e.c.Pool(ctx(t), "nodeport", client.Options{})
	require.NoError(t, err)
	assert.Equal(t, 2, p.Used, "the refused writes changed nothing: 30500, and 30001 of the accepted ones")
	_, err = e.c.Pool(ctx(t), "p", client.Options{})
	assert.Equal(t, "PoolNotFound", code(err))
}

// TestBodyCutShort: a client that announces more body than it sends, then
// stops sending, gets 400, not a server error.
func TestBodyCutShort(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct{ name, head, body string }{
		{"allocate", "POST /v1/pools/nodeport/allocations HTTP/1.1\r\nContent-Type: application/json\r\n", `{"owner":`},
		{"restore", "POST /v1/snapshot/restore HTTP/1.1\r\nContent-Type: application/octet-stream\r\n", "\x89RAS\r\n\x1a\n\x00\x00\x00\x01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
			require.NoError(t, err)
			defer c.Close()
			_, err = fmt.Fprintf(c, "%sHost: rangealloc\r\nContent-Length: %d\r\n\r\n%s", tc.head, len(tc.body)+100, tc.body)
			require.NoError(t, err)
			require.NoError(t, c.(*net.TCPConn).CloseWrite(), "the client stops sending")
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err)
			defer resp.Body.Close()
			var eb api.ErrorBody
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb))
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%+v", eb)
			assert.Equal(t, api.CodeInvalidArgument, eb.Error.Code)
		})
	}
}

func TestOperations(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		status, _, _ := e.raw(t, "GET", path, "", nil)
		assert.Equal(t, 200, status, path)
	}
	_, _, err := e.c.Allocate(ctx(t), "nodeport", "", "o", client.Options{})
	require.NoError(t, err)
	// The named values lie in the static band (30000-30085), which a
	// random allocate draws from only when the dynamic band is full: a
	// named value in the dynamic band could already be one of the random
	// ones.
	// The allocation counters count values: three of one request, one per
	// allocate of a transaction; as errors, the values the allocator
	// refused (only the failing operation of a transaction).
	_, _, err = e.c.AllocateCount(ctx(t), "nodeport", "o", 3, client.Options{})
	require.NoError(t, err)
	_, err = e.c.Txn(ctx(t), []types.TxnOp{{Op: "allocate", Pool: "nodeport", Value: "30010", Owner: "o"},
		{Op: "allocate", Pool: "nodeport", Owner: "o"}}, client.Options{})
	require.NoError(t, err)
	_, _, err = e.c.Allocate(ctx(t), "nodeport", "30010", "o", client.Options{})
	require.Error(t, err)
	_, err = e.c.Txn(ctx(t), []types.TxnOp{{Op: "allocate", Pool: "nodeport", Owner: "o"},
		{Op: "release", Pool: "nodeport", Value: "30011", Owner: "o"}}, client.Options{})
	require.Error(t, err, "fails on its release: no allocation error")
	_, err = e.c.Txn(ctx(t), []types.TxnOp{{Op: "allocate", Pool: "nodeport", Value: "30010", Owner: "o"},
		{Op: "allocate", Pool: "no-such-pool", Owner: "o"}}, client.Options{})
	require.Error(t, err, "fails on its first allocate: the value is taken")
	_, _, err = e.c.Allocate(ctx(t), "no-such-pool", "", "o", client.Options{})
	require.Error(t, err)
	status, _, _ := e.raw(t, "GET", "/v1/nope", "", nil)
	require.Equal(t, 404, status)
	status, _, body := e.raw(t, "GET", "/metrics", "", nil)
	require.Equal(t, 200, status)
	assert.NotContains(t, string(body), "no-such-pool", "no series for a pool that does not exist")
	assert.NotContains(t, string(body), `rangealloc_allocation_errors_total{pool="nodeport",scope="dynamic"}`, "no allocate of nodeport was refused")
	for _, want := range []string{`rangealloc_pool_allocated{pool="nodeport"} 6`, `rangealloc_pool_available{pool="nodeport"} 2762`,
		`rangealloc_allocation_total{pool="nodeport",scope="dynamic"} 5`, `rangealloc_allocation_total{pool="nodeport",scope="static"} 1`,
		`rangealloc_allocation_errors_total{pool="nodeport",scope="static"} 2`,
		`rangealloc_http_request_duration_seconds_bucket`,
		`rangealloc_apply_batch_entries_bucket`, `rangealloc_apply_latency_seconds_bucket`,
		`rangealloc_http_request_duration_seconds_count{code="201",method="POST",route="POST /v1/pools/{name}/allocations"} 2`,
		`rangealloc_http_request_duration_seconds_count{code="200",method="GET",route="GET /healthz"} 1`,
		`rangealloc_http_request_duration_seconds_count{code="404",method="GET",route="other"} 1`} {
		assert.Contains(t, string(body), want)
	}
	status, _, body = e.raw(t, "GET", "/openapi.yaml", "", nil)
	assert.Equal(t, 200, status)
	assert.Equal(t, api.OpenAPI, body)
	st, err := e.c.Cluster(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, e.node.ID(), st.ID)
	assert.Equal(t, e.node.ID(), st.Leader.ID)
	require.Len(t, st.Members, 1)
	data, err := e.c.Backup(ctx(t))
	require.NoError(t, err)
	require.NoError(t, e.c.Restore(ctx(t), data), "a backup restores")
	key := client.Options{IdempotencyKey: "restore-1"}
	require.NoError(t, e.c.RestoreWith(ctx(t), data, key), "a backup restores under a key")
	_, _, err = e.c.Allocate(ctx(t), "nodeport", "30005", "after", client.Options{})
	require.NoError(t, err)
	require.NoError(t, e.c.RestoreWith(ctx(t), data, key), "a retry answers what the first did")
	_, _, err = e.c.Get(ctx(t), "nodeport", "30005", client.Options{})
	require.NoError(t, err, "a retried restore restores nothing again")
	_, _, err = e.c.Allocate(ctx(t), "nodeport", "30006", "o", client.Options{})
	require.NoError(t, err)
	other, err := e.c.Backup(ctx(t))
	require.NoError(t, err)
	err = e.c.RestoreWith(ctx(t), other, key)
	var ae *client.Error
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, []any{422, "IdempotencyKeyReused"}, []any{ae.Status, ae.Code}, "the key with another backup")
	err = e.c.RestoreWith(ctx(t), data, client.Options{IdempotencyKey: strings.Repeat("k", api.MaxKeyLen+1)})
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, []any{400, "InvalidArgument"}, []any{ae.Status, ae.Code}, "a key too long")
	_, _, err = e.c.Get(ctx(t), "nodeport", "30006", client.Options{})
	require.NoError(t, err, "refused restores change nothing")
	status, c, _ := e.raw(t, "GET", "/v1/nothing", "", nil)
	assert.Equal(t, []any{404, "NotFound"}, []any{status, c})
	status, c, body = e.raw(t, "PATCH", "/v1/pools/nodeport", "", nil)
	assert.Equal(t, []any{405, "MethodNotAllowed"}, []any{status, c}, "%s", body)
	assert.Contains(t, string(body), "GET, PUT, DELETE")
}
