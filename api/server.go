package api

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
)

// OpenAPI is the OpenAPI 3 description of this API, served at /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Limits of the API.
const (
	MaxBody        = 1 << 20 // JSON bodies
	MaxRestoreBody = 1 << 30 // backups given to /v1/snapshot/restore
	MaxKeyLen      = 128     // Idempotency-Key
	DefaultLimit   = 1000
	MaxLimit       = 10000
)

// Store is what the API needs of a node; *node.Node implements it.
type Store interface {
	ID() string
	Allocate(ctx context.Context, pool, value, owner string, count int, requestID string) ([]fsm.Allocation, error)
	Release(ctx context.Context, pool, value, owner, requestID string) (fsm.Allocation, error)
	Txn(ctx context.Context, ops []fsm.Op, requestID string) ([][]fsm.Allocation, error)
	CreatePool(ctx context.Context, name, rng, requestID string) (node.PoolStatus, bool, error)
	DeletePool(ctx context.Context, name, requestID string) error
	Get(ctx context.Context, c node.Consistency, pool, value string) (fsm.Allocation, error)
	List(ctx context.Context, c node.Consistency, pool, owner, after string, limit int) ([]fsm.Allocation, string, error)
	Pool(ctx context.Context, c node.Consistency, name string) (node.PoolStatus, error)
	Pools(ctx context.Context, c node.Consistency) ([]node.PoolStatus, error)
	RangeAllocation(ctx context.Context, c node.Consistency, pool string) (string, []byte, error)
	Cluster() (node.ClusterStatus, error)
	Ready() (bool, string)
	AddMember(ctx context.Context, m fsm.Member) error
	RemoveMember(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, id string) error
	Backup(ctx context.Context, w io.Writer) error
	Restore(ctx context.Context, r io.Reader) error
	LocalState() *fsm.FSM
}

var _ Store = (*node.Node)(nil)

// Options configure a Server.
type Options struct {
	// Timeout bounds each request's call into the node, including the wait
	// while there is no leader. Default 5s.
	Timeout time.Duration
	// Logger logs requests that fail with a server error. Nil: discard.
	Logger hclog.Logger
	// Metrics receives the API's metrics; nil: none are kept.
	Metrics *Metrics
}

// Server serves the API of one node.
type Server struct {
	s       Store
	opts    Options
	mux     *http.ServeMux
	metrics *Metrics
}

// NewServer returns the API handler for a node.
func NewServer(s Store, opts Options) *Server {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	srv := &Server{s: s, opts: opts, mux: http.NewServeMux(), metrics: opts.Metrics}
	srv.routes()
	return srv
}

func (srv *Server) routes() {
	m := srv.mux
	m.HandleFunc("GET /v1/pools", srv.listPools)
	m.HandleFunc("PUT /v1/pools/{name}", srv.createPool)
	m.HandleFunc("GET /v1/pools/{name}", srv.getPool)
	m.HandleFunc("DELETE /v1/pools/{name}", srv.deletePool)
	m.HandleFunc("GET /v1/pools/{name}/rangeallocation", srv.rangeAllocation)
	m.HandleFunc("POST /v1/pools/{name}/allocations", srv.allocate)
	m.HandleFunc("GET /v1/pools/{name}/allocations", srv.listAllocations)
	m.HandleFunc("GET /v1/pools/{name}/allocations/{value}", srv.getAllocation)
	m.HandleFunc("DELETE /v1/pools/{name}/allocations/{value}", srv.release)
	m.HandleFunc("POST /v1/txn", srv.txn)
	m.HandleFunc("GET /v1/cluster", srv.cluster)
	m.HandleFunc("POST /v1/cluster/members", srv.addMember)
	m.HandleFunc("DELETE /v1/cluster/members/{id}", srv.removeMember)
	m.HandleFunc("POST /v1/cluster/leader-transfer", srv.transfer)
	m.HandleFunc("GET /v1/snapshot", srv.backup)
	m.HandleFunc("POST /v1/snapshot/restore", srv.restore)
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	m.HandleFunc("GET /readyz", srv.ready)
	m.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(OpenAPI)
	})
	if srv.metrics != nil {
		m.Handle("GET /metrics", srv.metrics.Handler())
	}
	m.HandleFunc("/", srv.notFound)
}

// notFound answers a path the API does not have (404), or a method the
// path does not take (405, with Allow).
func (srv *Server) notFound(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := srv.mux.Handler(probe); pattern != "/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, &apiError{http.StatusMethodNotAllowed, CodeMethodNotAllowed,
			fmt.Sprintf("%s %s: this path takes %s", r.Method, r.URL.Path, strings.Join(allow, ", "))})
		return
	}
	writeError(w, &apiError{http.StatusNotFound, CodeNotFound, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path)})
}

// ServeHTTP serves a request, stamping X-Rangealloc-Served-By and timing it.
func (srv *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Rangealloc-Served-By", srv.s.ID())
	if srv.metrics == nil {
		srv.mux.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: 200}
	srv.mux.ServeHTTP(rec, r)
	_, pattern := srv.mux.Handler(r)
	srv.metrics.observeHTTP(r.Method, pattern, rec.status, time.Since(start))
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }

func (srv *Server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), srv.opts.Timeout)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

// decode reads a JSON body strictly: at most MaxBody bytes, no unknown
// fields, nothing after the object.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		return err
	}
	if optional && len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("invalid JSON body: " + err.Error())
	}
	if dec.More() {
		return badRequest("invalid JSON body: data after the object")
	}
	return nil
}

func idempotencyKey(r *http.Request) (string, error) {
	k := r.Header.Get("Idempotency-Key")
	if len(k) > MaxKeyLen {
		return "", badRequest(fmt.Sprintf("Idempotency-Key is %d characters long; at most %d", len(k), MaxKeyLen))
	}
	return k, nil
}

func consistency(w http.ResponseWriter, r *http.Request, s Store) (node.Consistency, error) {
	c, err := node.ParseConsistency(r.URL.Query().Get("consistency"))
	if err == nil && c == node.Stale {
		w.Header().Set("X-Rangealloc-Applied-Index", strconv.FormatUint(s.LocalState().AppliedIndex(), 10))
	}
	return c, err
}

// serveRead runs a read at the request's consistency and writes its answer.
func (srv *Server) serveRead(w http.ResponseWriter, r *http.Request, read func(context.Context, node.Consistency) (any, error)) {
	c, err := consistency(w, r, srv.s)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	v, err := read(ctx, c)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (srv *Server) listPools(w http.ResponseWriter, r *http.Request) {
	srv.serveRead(w, r, func(ctx context.Context, c node.Consistency) (any, error) {
		ps, err := srv.s.Pools(ctx, c)
		out := PoolList{Pools: make([]Pool, 0, len(ps))}
		for _, p := range ps {
			out.Pools = append(out.Pools, toPool(p))
		}
		return out, err
	})
}

func (srv *Server) createPool(w http.ResponseWriter, r *http.Request) {
	var req CreatePoolRequest
	key, err := idempotencyKey(r)
	if err == nil {
		err = decode(w, r, &req, false)
	}
	if err == nil && req.Range == "" {
		err = badRequest(`"range" is required: a CIDR such as "10.96.0.0/16" or a port range such as "30000-32767"`)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	st, created, err := srv.s.CreatePool(ctx, r.PathValue("name"), req.Range, key)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, toPool(st))
}

func (srv *Server) getPool(w http.ResponseWriter, r *http.Request) {
	srv.serveRead(w, r, func(ctx context.Context, c node.Consistency) (any, error) {
		st, err := srv.s.Pool(ctx, c, r.PathValue("name"))
		if err != nil {
			return nil, err
		}
		return toPool(st), nil
	})
}

func (srv *Server) deletePool(w http.ResponseWriter, r *http.Request) {
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if err := srv.s.DeletePool(ctx, r.PathValue("name"), key); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (srv *Server) rangeAllocation(w http.ResponseWriter, r *http.Request) {
	srv.serveRead(w, r, func(ctx context.Context, c node.Consistency) (any, error) {
		name := r.PathValue("name")
		rng, data, err := srv.s.RangeAllocation(ctx, c, name)
		return RangeAllocation{APIVersion: "v1", Kind: "RangeAllocation", Metadata: ObjectMetadata{Name: name}, Range: rng, Data: data}, err
	})
}

func (srv *Server) allocate(w http.ResponseWriter, r *http.Request) {
	var req AllocateRequest
	key, err := idempotencyKey(r)
	if err == nil {
		err = decode(w, r, &req, false)
	}
	count := 0
	if err == nil && req.Count != nil {
		count = *req.Count
		switch {
		case count < 1 || count > fsm.MaxCount:
			err = badRequest(fmt.Sprintf(`"count" must be 1 to %d, got %d`, fsm.MaxCount, count))
		case req.Value != "":
			err = badRequest(`"count" is for dynamic allocations: leave "value" out`)
		}
	}
	pool := r.PathValue("name")
	scope := "dynamic"
	if req.Value != "" {
		scope = "static"
	}
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	allocs, err := srv.s.Allocate(ctx, pool, req.Value, req.Owner, count, key)
	srv.metrics.countAllocation(pool, scope, err)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.Count != nil {
		writeJSON(w, http.StatusCreated, AllocationList{Allocations: toAllocations(allocs)})
		return
	}
	writeJSON(w, http.StatusCreated, toAllocation(allocs[0]))
}

func (srv *Server) getAllocation(w http.ResponseWriter, r *http.Request) {
	srv.serveRead(w, r, func(ctx context.Context, c node.Consistency) (any, error) {
		a, err := srv.s.Get(ctx, c, r.PathValue("name"), r.PathValue("value"))
		return toAllocation(a), err
	})
}

func (srv *Server) listAllocations(w http.ResponseWriter, r *http.Request) {
	srv.serveRead(w, r, func(ctx context.Context, c node.Consistency) (any, error) {
		q := r.URL.Query()
		limit := DefaultLimit
		if q.Has("limit") {
			var err error
			if limit, err = strconv.Atoi(q.Get("limit")); err != nil || limit < 1 || limit > MaxLimit {
				return nil, badRequest(fmt.Sprintf("limit %q: want 1 to %d", q.Get("limit"), MaxLimit))
			}
		}
		allocs, next, err := srv.s.List(ctx, c, r.PathValue("name"), q.Get("owner"), q.Get("after"), limit)
		return AllocationList{Allocations: toAllocations(allocs), Next: &next}, err
	})
}

func (srv *Server) release(w http.ResponseWriter, r *http.Request) {
	key, err := idempotencyKey(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if _, err := srv.s.Release(ctx, r.PathValue("name"), r.PathValue("value"), r.URL.Query().Get("owner"), key); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (srv *Server) txn(w http.ResponseWriter, r *http.Request) {
	var req TxnRequest
	key, err := idempotencyKey(r)
	if err == nil {
		err = decode(w, r, &req, false)
	}
	if err == nil && (len(req.Ops) == 0 || len(req.Ops) > fsm.MaxOps) {
		err = badRequest(fmt.Sprintf(`"ops" must hold 1 to %d operations, got %d`, fsm.MaxOps, len(req.Ops)))
	}
	ops := make([]fsm.Op, len(req.Ops))
	for i, op := range req.Ops {
		if err != nil {
			break
		}
		switch op.Op {
		case "allocate":
			ops[i] = fsm.Op{Kind: fsm.OpAllocate, Pool: op.Pool, Value: op.Value, Owner: op.Owner}
		case "release":
			ops[i] = fsm.Op{Kind: fsm.OpRelease, Pool: op.Pool, Value: op.Value, Owner: op.Owner}
		default:
			err = &fsm.Error{Code: fsm.CodeInvalidArgument, Op: i, Message: fmt.Sprintf(`ops[%d]: "op" must be "allocate" or "release", got %q`, i, op.Op)}
		}
	}
	if err != nil {
		writeErrorOp(w, err, true)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	res, err := srv.s.Txn(ctx, ops, key)
	if err != nil {
		writeErrorOp(w, err, true)
		return
	}
	out := TxnResults{Results: make([]Allocation, 0, len(res))}
	for _, as := range res {
		out.Results = append(out.Results, toAllocation(as[0]))
	}
	writeJSON(w, http.StatusOK, out)
}

func (srv *Server) cluster(w http.ResponseWriter, _ *http.Request) {
	st, err := srv.s.Cluster()
	if err != nil {
		writeError(w, err)
		return
	}
	out := ClusterStatus{ID: st.ID, Leader: ClusterLeader{ID: st.LeaderID, APIAddr: st.LeaderAPI}, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, Members: []ClusterMember{}}
	for _, m := range st.Members {
		out.Members = append(out.Members, ClusterMember{ID: m.ID, RaftAddr: m.RaftAddr, APIAddr: m.APIAddr, Voter: m.Voter, Leader: m.Leader})
	}
	writeJSON(w, http.StatusOK, out)
}

func (srv *Server) addMember(w http.ResponseWriter, r *http.Request) {
	var req MemberRequest
	if err := decode(w, r, &req, false); err != nil {
		writeError(w, err)
		return
	}
	if req.ID == "" || req.RaftAddr == "" {
		writeError(w, badRequest(`"id" and "raftAddr" are required`))
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if err := srv.s.AddMember(ctx, fsm.Member{ID: req.ID, RaftAddr: req.RaftAddr, APIAddr: req.APIAddr}); err != nil {
		writeError(w, err)
		return
	}
	srv.cluster(w, r)
}

func (srv *Server) removeMember(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if err := srv.s.RemoveMember(ctx, r.PathValue("id")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (srv *Server) transfer(w http.ResponseWriter, r *http.Request) {
	var req TransferRequest
	if err := decode(w, r, &req, true); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	if err := srv.s.TransferLeadership(ctx, req.ID); err != nil {
		writeError(w, err)
		return
	}
	srv.cluster(w, r)
}

func (srv *Server) backup(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*srv.opts.Timeout)
	defer cancel()
	var buf bytes.Buffer
	if err := srv.s.Backup(ctx, &buf); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="rangealloc.snap"`)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}

func (srv *Server) restore(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*srv.opts.Timeout)
	defer cancel()
	if err := srv.s.Restore(ctx, http.MaxBytesReader(w, r.Body, MaxRestoreBody)); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "restored"})
}

func (srv *Server) ready(w http.ResponseWriter, _ *http.Request) {
	if ok, reason := srv.s.Ready(); !ok {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": reason})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// errIs reports whether err is a *fsm.Error with the given code.
func errIs(err error, code fsm.Code) bool {
	var fe *fsm.Error
	return errors.As(err, &fe) && fe.Code == code
}
