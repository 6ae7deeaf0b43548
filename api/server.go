package api

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/api/internal/wire"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/service"
)

// OpenAPI is the OpenAPI 3 description of this API, served at /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Limits of the API.
const (
	MaxBody        = 1 << 20 // JSON bodies
	MaxRestoreBody = 1 << 30 // backups given to /v1/snapshot/restore
	// MaxServicesBody bounds the bodies that list Services:
	// /v1/reconcile and /v1/import (about 100,000 Services).
	MaxServicesBody = 64 << 20
	MaxKeyLen       = fsm.MaxRequestID // Idempotency-Key: the request ID it becomes
	DefaultLimit    = types.DefaultLimit
	MaxLimit        = types.MaxLimit
)

// RestoreReadTimeout is how long a restore may take to upload its body
// (1 GiB at 1.8 MB/s): its handler extends the server's read deadline,
// which is sized for JSON bodies, to this.
const RestoreReadTimeout = 10 * time.Minute

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
	Readiness() node.Readiness
	AddMember(ctx context.Context, m fsm.Member) error
	RemoveMember(ctx context.Context, id, requestID string) error
	TransferLeadership(ctx context.Context, id string) error
	FinalizeUpgrade(ctx context.Context) error
	BackupAt(ctx context.Context, c node.Consistency, w io.Writer) error
	Restore(ctx context.Context, r io.Reader, requestID string) error
	PutService(ctx context.Context, spec service.Spec, dryRun bool, requestID string) (node.ServiceWrite, error)
	DeleteService(ctx context.Context, namespace, name string, dryRun bool, requestID string) (node.ServiceRecord, error)
	Service(ctx context.Context, c node.Consistency, namespace, name string) (node.ServiceRecord, error)
	Services(ctx context.Context, c node.Consistency, namespace string) ([]node.ServiceRecord, uint64, error)
	ServiceNetwork(ctx context.Context, c node.Consistency) (fsm.ServiceNetwork, error)
	SetServiceNetwork(ctx context.Context, sn fsm.ServiceNetwork, requestID string) error
	Reconcile(ctx context.Context, fence uint64, listed []service.Spec, repair bool, requestID string) ([]fsm.Finding, uint64, error)
	Import(ctx context.Context, specs []service.Spec, ras []node.RangeAllocation, requestID string) (node.ImportResult, error)
	// AppliedIndex is the index a stale read reflects
	// (X-Rangealloc-Applied-Index).
	AppliedIndex() uint64
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
	m.HandleFunc("PUT /v1/pools/{name}", accepts(jsonType, srv.createPool))
	m.HandleFunc("GET /v1/pools/{name}", srv.getPool)
	m.HandleFunc("DELETE /v1/pools/{name}", accepts(jsonType, srv.deletePool))
	m.HandleFunc("GET /v1/pools/{name}/rangeallocation", srv.rangeAllocation)
	m.HandleFunc("POST /v1/pools/{name}/allocations", accepts(jsonType, srv.allocate))
	m.HandleFunc("GET /v1/pools/{name}/allocations", srv.listAllocations)
	m.HandleFunc("GET /v1/pools/{name}/allocations/{value}", srv.getAllocation)
	m.HandleFunc("DELETE /v1/pools/{name}/allocations/{value}", accepts(jsonType, srv.release))
	m.HandleFunc("POST /v1/txn", accepts(jsonType, srv.txn))
	m.HandleFunc("PUT /v1/services/{namespace}/{name}", accepts(jsonType, srv.putService))
	m.HandleFunc("GET /v1/services/{namespace}/{name}", srv.getService)
	m.HandleFunc("DELETE /v1/services/{namespace}/{name}", accepts(jsonType, srv.deleteService))
	m.HandleFunc("GET /v1/services", srv.listServices)
	m.HandleFunc("GET /v1/service-network", srv.getServiceNetwork)
	m.HandleFunc("PUT /v1/service-network", accepts(jsonType, srv.putServiceNetwork))
	m.HandleFunc("POST /v1/reconcile", accepts(jsonType, srv.reconcile))
	m.HandleFunc("POST /v1/import", accepts(jsonType, srv.importServices))
	m.HandleFunc("GET /v1/cluster", srv.cluster)
	m.HandleFunc("POST /v1/cluster/members", accepts(jsonType, srv.addMember))
	m.HandleFunc("DELETE /v1/cluster/members/{id}", accepts(jsonType, srv.removeMember))
	m.HandleFunc("POST /v1/cluster/leader-transfer", accepts(jsonType, srv.transfer))
	m.HandleFunc("POST /v1/cluster/finalize-upgrade", srv.finalizeUpgrade)
	m.HandleFunc("GET /v1/snapshot", srv.backup)
	m.HandleFunc("POST /v1/snapshot/restore", accepts(backupType, srv.restore))
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	m.HandleFunc("GET /readyz", srv.ready)
	m.HandleFunc("GET /ui", uiRedirect)
	m.HandleFunc("GET /ui/", srv.statusPage)
	m.HandleFunc("GET /ui/login", srv.loginForm)
	m.HandleFunc("POST /ui/login", accepts(formType, srv.login))
	m.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(OpenAPI)
	})
	if srv.metrics != nil {
		m.Handle("GET /metrics", srv.metrics.Handler())
	}
	m.HandleFunc("/", srv.notFound)
}

// Media types of request bodies.
const (
	jsonType   = "application/json"
	backupType = "application/octet-stream" // POST /v1/snapshot/restore
)

// accepts wraps every write's handler: a request that carries a body must
// say it is of mediaType (parameters such as charset are allowed), else it
// is refused with 415 before the node is called. A write without a body
// needs no Content-Type. (A body of unknown length, chunked, counts as
// one.)
func accepts(mediaType string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			ct := r.Header.Get("Content-Type")
			if got, _, err := mime.ParseMediaType(ct); err != nil || got != mediaType {
				writeError(w, &apiError{http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
					fmt.Sprintf("Content-Type %q: %s %s takes %s", ct, r.Method, r.URL.Path, mediaType)})
				return
			}
		}
		h(w, r)
	}
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

// ServeHTTP serves a request, stamping X-Rangealloc-Served-By, timing it,
// and logging the ones that fail with an internal error.
func (srv *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, by := node.WithServedBy(r.Context())
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK, self: srv.s.ID(), by: by}
	r = r.WithContext(ctx)
	srv.mux.ServeHTTP(rec, r)
	if !rec.wrote {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.status == http.StatusInternalServerError {
		srv.opts.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", rec.status)
	}
	if srv.metrics != nil { // the mux set r.Pattern to the route it chose
		srv.metrics.observeHTTP(r.Method, r.Pattern, rec.status, time.Since(start))
	}
}

// statusRecorder remembers the status, and sets X-Rangealloc-Served-By as
// the header goes out: the node whose state answered (the leader, for a
// call this node forwarded), or this node when none did (the request was
// refused before it reached one, or no leader answered).
type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	self   string
	by     *node.ServedBy
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.wrote {
		return
	}
	s.wrote, s.status = true, code
	id := s.by.ID()
	if id == "" {
		id = s.self
	}
	s.Header().Set("X-Rangealloc-Served-By", id)
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	if !s.wrote {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (a restore
// extends its read deadline).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush lets streamed answers reach the client as they are written.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (srv *Server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), srv.opts.Timeout)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	switch v := v.(type) {
	case nil:
	case AllocationList:
		// The bulk answers are written by hand, byte for byte as
		// json.Encoder writes them: a count of 4,096 values spent most of
		// its CPU in reflection.
		writeBody(w, wire.AllocationListSize(&v), func(b []byte) []byte { return wire.AppendAllocationList(b, &v) })
	case TxnResults:
		writeBody(w, wire.TxnResultsSize(&v), func(b []byte) []byte { return wire.AppendTxnResults(b, &v) })
	case Allocation: // the answer of every single allocation and read
		writeBody(w, wire.AllocationSize(&v), func(b []byte) []byte { return wire.AppendAllocation(b, &v) })
	default:
		_ = json.NewEncoder(w).Encode(v)
	}
}

// bodyBuffers keeps the buffers of hand-written answers.
var bodyBuffers sync.Pool

// maxPooledBody bounds the buffers bodyBuffers keeps (an answer of 10,000
// allocations takes about 1.2 MB).
const maxPooledBody = 2 << 20

// writeBody writes what appendTo appends, and a newline as json.Encoder
// ends its output with, in one Write.
func writeBody(w http.ResponseWriter, size int, appendTo func([]byte) []byte) {
	buf, _ := bodyBuffers.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	b := (*buf)[:0]
	if cap(b) < size+1 {
		b = make([]byte, 0, size+1)
	}
	b = append(appendTo(b), '\n')
	_, _ = w.Write(b)
	if cap(b) <= maxPooledBody {
		*buf = b
		bodyBuffers.Put(buf)
	}
}

// decode reads a JSON body strictly: at most MaxBody bytes, no unknown
// fields, nothing after the object. A body that cannot be read whole (cut
// short by the client, or too slow for the server's read timeout) is bad
// input, like one that does not parse.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	return decodeLimit(w, r, v, optional, MaxBody)
}

// decodeLimit is decode with a body limit of its own.
func decodeLimit(w http.ResponseWriter, r *http.Request, v any, optional bool, limit int64) error {
	var body []byte
	var err error
	if _, ok := v.(*TxnRequest); ok {
		// A transaction's decoding copies what it keeps: its body, up to
		// a few hundred KB, is read into a pooled buffer.
		buf, _ := bodyBuffers.Get().(*[]byte)
		if buf == nil {
			buf = new([]byte)
		}
		b := bytes.NewBuffer((*buf)[:0])
		_, err = b.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
		body = b.Bytes()
		defer func() {
			if cap(body) <= maxPooledBody {
				*buf = body[:0]
				bodyBuffers.Put(buf)
			}
		}()
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	if err != nil {
		return badRequest("cannot read the body: " + err.Error())
	}
	return decodeBody(body, v, optional)
}

// decodeBody decodes a whole body strictly into v.
func decodeBody(body []byte, v any, optional bool) error {
	if optional && len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	// A transaction or an allocation in the plain form it takes on the
	// wire decodes without reflection; anything else, valid or not, goes
	// to encoding/json.
	switch v := v.(type) {
	case *TxnRequest:
		if v.Ops == nil && wire.DecodeTxnRequest(body, v) {
			return nil
		}
	case *AllocateRequest:
		if *v == (AllocateRequest{}) && wire.DecodeAllocateRequest(body, v) {
			return nil
		}
	}
	return decodeStrict(body, v)
}

// decodeStrict decodes body, one object with no unknown field, into v
// with encoding/json.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("invalid JSON body: " + err.Error())
	}
	// Only white space may follow (dec.More would let a stray ']' or '}'
	// through).
	if len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) > 0 {
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
		w.Header().Set("X-Rangealloc-Applied-Index", strconv.FormatUint(s.AppliedIndex(), 10))
	}
	return c, err
}

// errIs reports whether err is a *fsm.Error with the given code.
func errIs(err error, code fsm.Code) bool {
	var fe *fsm.Error
	return errors.As(err, &fe) && fe.Code == code
}
