package api_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What the guard does with a request, in the route table.
const (
	unauth = http.StatusUnauthorized // 401 Unauthenticated
	denied = http.StatusForbidden    // 403 PermissionDenied
	passes = 299                     // reached the handler behind the guard
	toForm = http.StatusSeeOther     // a browser sent to the status page's login form
)

// The credentials every route is tried with, in the order of a row's want.
var creds = []struct{ name, header string }{
	{"no token", ""},
	{"bad token", "Bearer ra_thisTokenIsNotInTheFile"},
	{"read", "Bearer " + tokRead},
	{"write", "Bearer " + tokWrite},
	{"admin", "Bearer " + tokAdmin},
}

const (
	tokRead  = "ra_read-token-for-tests"
	tokWrite = "ra_write-token-for-tests"
	tokAdmin = "ra_admin-token-for-tests"
)

// routeRow is one route of the API: its method and pattern (as in
// server.go and api/openapi.yaml), a concrete path, the role it needs (0
// when open) and what the guard does with each of creds.
type routeRow struct {
	method, pattern, path string
	role                  api.Role
	open                  bool
	want                  [5]int
}

var (
	needRead  = [5]int{unauth, unauth, passes, passes, passes}
	needWrite = [5]int{unauth, unauth, denied, passes, passes}
	needAdmin = [5]int{unauth, unauth, denied, denied, passes}
	isOpen    = [5]int{passes, passes, passes, passes, passes}
	// The status page: a request without an Authorization header is a
	// browser's, sent to the login form rather than refused.
	needReadUI = [5]int{toForm, unauth, passes, passes, passes}
)

// routeTable is every route of server.go, the operations endpoints, and a
// path the API does not have (a GET, and a POST).
var routeTable = []routeRow{
	{"GET", "/v1/pools", "/v1/pools", api.RoleRead, false, needRead},
	{"PUT", "/v1/pools/{name}", "/v1/pools/p", api.RoleAdmin, false, needAdmin},
	{"GET", "/v1/pools/{name}", "/v1/pools/p", api.RoleRead, false, needRead},
	{"DELETE", "/v1/pools/{name}", "/v1/pools/p", api.RoleAdmin, false, needAdmin},
	{"GET", "/v1/pools/{name}/rangeallocation", "/v1/pools/p/rangeallocation", api.RoleRead, false, needRead},
	{"POST", "/v1/pools/{name}/allocations", "/v1/pools/p/allocations", api.RoleWrite, false, needWrite},
	{"GET", "/v1/pools/{name}/allocations", "/v1/pools/p/allocations", api.RoleRead, false, needRead},
	{"GET", "/v1/pools/{name}/allocations/{value}", "/v1/pools/p/allocations/10.96.0.1", api.RoleRead, false, needRead},
	{"DELETE", "/v1/pools/{name}/allocations/{value}", "/v1/pools/p/allocations/10.96.0.1", api.RoleWrite, false, needWrite},
	{"POST", "/v1/txn", "/v1/txn", api.RoleWrite, false, needWrite},
	{"PUT", "/v1/services/{namespace}/{name}", "/v1/services/default/p", api.RoleWrite, false, needWrite},
	{"GET", "/v1/services/{namespace}/{name}", "/v1/services/default/p", api.RoleRead, false, needRead},
	{"DELETE", "/v1/services/{namespace}/{name}", "/v1/services/default/p", api.RoleWrite, false, needWrite},
	{"GET", "/v1/services", "/v1/services", api.RoleRead, false, needRead},
	{"GET", "/v1/service-network", "/v1/service-network", api.RoleRead, false, needRead},
	{"PUT", "/v1/service-network", "/v1/service-network", api.RoleAdmin, false, needAdmin},
	{"POST", "/v1/reconcile", "/v1/reconcile", api.RoleAdmin, false, needAdmin},
	{"POST", "/v1/import", "/v1/import", api.RoleAdmin, false, needAdmin},
	{"GET", "/v1/cluster", "/v1/cluster", api.RoleRead, false, needRead},
	{"POST", "/v1/cluster/members", "/v1/cluster/members", api.RoleAdmin, false, needAdmin},
	{"DELETE", "/v1/cluster/members/{id}", "/v1/cluster/members/n2", api.RoleAdmin, false, needAdmin},
	{"POST", "/v1/cluster/leader-transfer", "/v1/cluster/leader-transfer", api.RoleAdmin, false, needAdmin},
	{"POST", "/v1/cluster/finalize-upgrade", "/v1/cluster/finalize-upgrade", api.RoleAdmin, false, needAdmin},
	{"GET", "/v1/snapshot", "/v1/snapshot", api.RoleAdmin, false, needAdmin},
	{"POST", "/v1/snapshot/restore", "/v1/snapshot/restore", api.RoleAdmin, false, needAdmin},
	{"GET", "/healthz", "/healthz", 0, true, isOpen},
	{"GET", "/readyz", "/readyz", 0, true, isOpen},
	{"GET", "/openapi.yaml", "/openapi.yaml", api.RoleRead, false, needRead},
	{"GET", "/metrics", "/metrics", api.RoleRead, false, needRead},
	{"GET", "/ui", "/ui", 0, true, isOpen},
	{"GET", "/ui/", "/ui/", api.RoleRead, false, needReadUI},
	{"GET", "/ui/login", "/ui/login", 0, true, isOpen},
	{"POST", "/ui/login", "/ui/login", 0, true, isOpen},
	{"GET", "", "/no/such/path", api.RoleRead, false, needRead},    // unknown: 404 past the guard
	{"POST", "", "/no/such/path", api.RoleAdmin, false, needAdmin}, // unknown, not a GET: the most restrictive
}

// reached is the handler behind the guard in these tests: it answers 299
// and records the token name the guard put in the context.
type reached struct {
	mu    sync.Mutex
	names []string
}

func (h *reached) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.names = append(h.names, api.TokenName(r.Context()))
	h.mu.Unlock()
	w.WriteHeader(passes)
}

// testTokens writes a token file with tokRead, tokWrite and tokAdmin and
// loads it.
func testTokens(t *testing.T, logger hclog.Logger) *api.Tokens {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	data := strings.Join([]string{
		"# test tokens",
		api.TokenLine(tokRead, api.RoleRead, "reader"),
		api.TokenLine(tokWrite, api.RoleWrite, "writer"),
		api.TokenLine(tokAdmin, api.RoleAdmin, "boss"),
	}, "\n")
	require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
	tk, err := api.LoadTokens(p, logger)
	require.NoError(t, err)
	return tk
}

// serve sends one request through h and returns the recorded answer.
func serve(h http.Handler, method, path, host, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://127.0.0.1:7080"+path, strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	if host != "" {
		req.Host = host
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func errorCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var eb api.ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &eb), "an error body: %s", rec.Body)
	assert.NotEmpty(t, eb.Error.Message)
	return eb.Error.Code
}

// TestGuardRoutes: every route × every kind of credential gets the answer
// of the table, and RequiredRole agrees with the table's role.
func TestGuardRoutes(t *testing.T) {
	next := &reached{}
	h := api.Guard(next, api.GuardOptions{Tokens: testTokens(t, nil)})
	for _, row := range routeTable {
		role, open := api.RequiredRole(row.method, row.path)
		assert.Equal(t, row.open, open, "%s %s: open", row.method, row.path)
		if !row.open {
			assert.Equal(t, row.role, role, "%s %s: role", row.method, row.path)
		}
		for i, c := range creds {
			rec := serve(h, row.method, row.path, "", c.header)
			require.Equal(t, row.want[i], rec.Code, "%s %s with %s: %s", row.method, row.path, c.name, rec.Body)
			switch rec.Code {
			case unauth:
				assert.Equal(t, `Bearer realm="rangealloc"`, rec.Header().Get("WWW-Authenticate"))
				assert.Equal(t, api.CodeUnauthenticated, errorCode(t, rec))
				assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			case denied:
				assert.Empty(t, rec.Header().Get("WWW-Authenticate"))
				assert.Equal(t, api.CodePermissionDenied, errorCode(t, rec))
				assert.Contains(t, rec.Body.String(), "needs role "+row.role.String())
			}
			assert.NotContains(t, rec.Body.String(), "ra_", "%s %s with %s: no token in the answer", row.method, row.path, c.name)
		}
	}
	// The context names the token, never the token itself.
	assert.Contains(t, next.names, "reader")
	assert.Contains(t, next.names, "writer")
	assert.Contains(t, next.names, "boss")
	assert.Contains(t, next.names, "", "an open path is served without looking at credentials")
}

// TestRouteTableCoversServer: every route server.go registers has a row
// in routeTable, and every row of a known route is one of them (or an
// operations endpoint).
func TestRouteTableCoversServer(t *testing.T) {
	src, err := os.ReadFile("server.go")
	require.NoError(t, err)
	re := regexp.MustCompile(`m\.Handle(?:Func)?\("([A-Z]+) (/[^"]*)"`)
	registered := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		registered[m[1]+" "+m[2]] = true
	}
	require.Greater(t, len(registered), 15, "server.go's routes are found")
	inTable := map[string]bool{}
	for _, row := range routeTable {
		if row.pattern != "" {
			inTable[row.method+" "+row.pattern] = true
		}
	}
	assert.Equal(t, sorted(registered), sorted(inTable))
}

func sorted(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestRouteTableMatchesOpenAPI: every operation of api/openapi.yaml is a
// row of routeTable and the reverse; each declares x-rangealloc-role equal
// to RequiredRole for its method and path, and /healthz and /readyz need
// no security while the rest inherit the document's bearer scheme.
func TestRouteTableMatchesOpenAPI(t *testing.T) {
	doc := loadDoc(t)
	scheme := doc.Components.SecuritySchemes["bearer"]
	require.NotNil(t, scheme, "components.securitySchemes.bearer")
	assert.Equal(t, "http", scheme.Value.Type)
	assert.Equal(t, "bearer", scheme.Value.Scheme)
	require.Len(t, doc.Security, 1)
	assert.Contains(t, doc.Security[0], "bearer")
	assert.Empty(t, doc.Security[0]["bearer"])

	params := map[string]string{"{name}": "p", "{value}": "10.96.0.1", "{id}": "n2", "{namespace}": "default"}
	inDoc := map[string]bool{}
	for p, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			key := method + " " + p
			inDoc[key] = true
			path := p
			for k, v := range params {
				path = strings.ReplaceAll(path, k, v)
			}
			require.NotContains(t, path, "{", "%s: a path parameter without a test value", key)
			role, open := api.RequiredRole(method, path)
			if open {
				require.NotNil(t, op.Security, "%s is open: security: []", key)
				assert.Empty(t, *op.Security, "%s is open: security: []", key)
				assert.NotContains(t, op.Extensions, "x-rangealloc-role", key)
				continue
			}
			assert.Nil(t, op.Security, "%s: the document's bearer security applies", key)
			assert.Equal(t, role.String(), op.Extensions["x-rangealloc-role"], "%s: x-rangealloc-role", key)
			for _, status := range []int{401, 403} {
				assert.NotNil(t, op.Responses.Status(status), "%s: documents %d", key, status)
			}
		}
	}
	inTable := map[string]bool{}
	for _, row := range routeTable {
		if row.pattern != "" {
			inTable[row.method+" "+row.pattern] = true
		}
	}
	assert.Equal(t, sorted(inTable), sorted(inDoc))
}

// TestRequiredRole: paths beyond the routes: HEAD, routes not built yet
// (Services, the UI), the profiler, and paths the router cleans or
// unescapes, which are read as the router reads them.
func TestRequiredRole(t *testing.T) {
	const open = api.Role(-1)
	for _, c := range []struct {
		method, path string
		want         api.Role
	}{
		{"HEAD", "/v1/pools", api.RoleRead},
		{"HEAD", "/v1/snapshot", api.RoleAdmin},
		{"HEAD", "/healthz", open},
		{"POST", "/healthz", api.RoleAdmin}, // only GET and HEAD are open
		{"CONNECT", "/v1/../healthz", api.RoleAdmin},
		{"TRACE", "/readyz", api.RoleAdmin},
		{"GET", "/readyz?verbose=1", api.RoleRead}, // RequiredRole takes a path, not a request target
		{"GET", "/healthz/", api.RoleRead},
		{"GET", "/v1/services", api.RoleRead},
		{"GET", "/v1/services/default/web", api.RoleRead},
		{"POST", "/v1/services", api.RoleWrite},
		{"PUT", "/v1/services/default/web", api.RoleWrite},
		{"DELETE", "/v1/services/default/web", api.RoleWrite},
		{"POST", "/v1/servicesx", api.RoleAdmin},
		{"GET", "/ui/", api.RoleRead},
		{"GET", "/ui/app.js", api.RoleRead},
		{"GET", "/debug/pprof/", api.RoleAdmin},
		{"GET", "/debug/pprof", api.RoleAdmin},
		{"GET", "/debug/pprof/heap", api.RoleAdmin},
		{"POST", "/debug/pprof/symbol", api.RoleAdmin},
		{"POST", "/v1/reconcile", api.RoleAdmin},
		{"OPTIONS", "/v1/pools", api.RoleAdmin},
		{"PATCH", "/v1/pools/p/allocations", api.RoleAdmin},
		{"CONNECT", "", api.RoleAdmin},
		{"GET", "/v1/snapshot/", api.RoleRead}, // not the snapshot: 404
		{"GET", "/v1//snapshot", api.RoleAdmin},
		{"GET", "/v1/pools/../snapshot", api.RoleAdmin},
		{"GET", "/v1/./snapshot", api.RoleAdmin},
		{"GET", "/v1/%73napshot", api.RoleAdmin},
		{"GET", "v1/snapshot", api.RoleAdmin},
		{"POST", "/v1/pools/a%2Fb/allocations", api.RoleWrite}, // one segment, as the router reads it
		{"POST", "/v1/pools//allocations", api.RoleAdmin},
		{"POST", "/v1/pools/p/allocations/", api.RoleAdmin},
		{"POST", "/v1/txn/", api.RoleAdmin},
		{"DELETE", "/v1/pools/p/allocations", api.RoleAdmin},
		{"DELETE", "/v1/pools/p/allocations/", api.RoleAdmin},
		{"DELETE", "/v1/pools/p/allocations/1/2", api.RoleAdmin},
		{"DELETE", "/v1/pools/p/allocations/fd00%3A%3A1", api.RoleWrite},
		{"GET", "/v1/pools/p/allocations/%zz", api.RoleRead},
	} {
		role, isOpen := api.RequiredRole(c.method, c.path)
		if c.want == open {
			assert.True(t, isOpen, "%s %s", c.method, c.path)
			continue
		}
		assert.False(t, isOpen, "%s %s", c.method, c.path)
		assert.Equal(t, c.want, role, "%s %s", c.method, c.path)
	}
}

func TestGuardAuthorizationHeader(t *testing.T) {
	h := api.Guard(&reached{}, api.GuardOptions{Tokens: testTokens(t, nil)})
	for _, c := range []struct {
		header []string
		want   int
	}{
		{[]string{"Bearer " + tokRead}, passes},
		{[]string{"bearer " + tokRead}, passes},
		{[]string{"BEARER " + tokRead}, passes},
		{[]string{"Bearer  " + tokRead + " "}, passes},
		{[]string{"Bearer\t" + tokRead}, unauth},
		{[]string{tokRead}, unauth},
		{[]string{"Basic " + tokRead}, unauth},
		{[]string{"Bearer"}, unauth},
		{[]string{"Bearer "}, unauth},
		{[]string{"Bearer " + tokRead + " " + tokRead}, unauth},
		{[]string{"Bearer " + tokRead, "Bearer " + tokRead}, unauth},
		{[]string{"Bearer " + strings.ToUpper(tokRead)}, unauth},
		{[]string{"Bearer " + tokRead + "x"}, unauth},
		{[]string{"Bearer " + strings.Repeat("x", 60000)}, unauth},
	} {
		req := httptest.NewRequest("GET", "/v1/pools", nil)
		for _, v := range c.header {
			req.Header.Add("Authorization", v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equal(t, c.want, rec.Code, "%q", c.header)
		if rec.Code == unauth {
			assert.Equal(t, api.CodeUnauthenticated, errorCode(t, rec))
			assert.NotContains(t, rec.Body.String(), tokRead)
		}
	}
}

// idOnly is a Store that knows only its ID: enough for requests that never
// reach the node (refused before, or unknown paths).
type idOnly struct{ api.Store }

func (idOnly) ID() string { return "n1" }

// TestGuardComesFirst: authentication and role are decided before the
// path's existence, the method, the Content-Type or the node.
func TestGuardComesFirst(t *testing.T) {
	h := api.Guard(api.NewServer(idOnly{}, api.Options{}), api.GuardOptions{Tokens: testTokens(t, nil)})
	for _, c := range []struct {
		method, path, auth, ctype string
		want                      int
		code                      string
	}{
		{"GET", "/no/such/path", "", "", 401, api.CodeUnauthenticated},
		{"GET", "/no/such/path", tokRead, "", 404, api.CodeNotFound},
		{"POST", "/no/such/path", "", "", 401, api.CodeUnauthenticated},
		{"POST", "/no/such/path", tokWrite, "", 403, api.CodePermissionDenied},
		{"POST", "/no/such/path", tokAdmin, "", 404, api.CodeNotFound},
		{"DELETE", "/v1/txn", tokWrite, "", 403, api.CodePermissionDenied},
		{"DELETE", "/v1/txn", tokAdmin, "", 405, api.CodeMethodNotAllowed},
		{"GET", "/v1/txn", "", "", 401, api.CodeUnauthenticated},
		{"GET", "/v1/txn", tokRead, "", 405, api.CodeMethodNotAllowed},
		{"POST", "/v1/txn", "", "text/plain", 401, api.CodeUnauthenticated},
		{"POST", "/v1/txn", tokRead, "text/plain", 403, api.CodePermissionDenied},
		{"POST", "/v1/txn", tokWrite, "text/plain", 415, api.CodeUnsupportedMediaType},
		{"POST", "/v1/snapshot/restore", tokWrite, "application/json", 403, api.CodePermissionDenied},
		{"POST", "/v1/snapshot/restore", tokAdmin, "application/json", 415, api.CodeUnsupportedMediaType},
	} {
		req := httptest.NewRequest(c.method, c.path, strings.NewReader("x"))
		req.Header.Set("Content-Type", c.ctype)
		if c.auth != "" {
			req.Header.Set("Authorization", "Bearer "+c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equal(t, c.want, rec.Code, "%s %s: %s", c.method, c.path, rec.Body)
		assert.Equal(t, c.code, errorCode(t, rec), "%s %s", c.method, c.path)
	}
	// An open path answers whatever the credentials.
	for _, auth := range []string{"", "Bearer nope", "Basic x", "Bearer " + tokRead} {
		req := httptest.NewRequest("GET", "/healthz", nil)
		req.Host = "evil.example"
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusOK, rec.Code, "%q", auth)
		assert.JSONEq(t, `{"status":"ok"}`, rec.Body.String())
	}
}

// TestGuardHost: without a token file, only requests to an IP literal,
// localhost or an allowed name are served (DNS rebinding); with one, the
// Host does not matter.
func TestGuardHost(t *testing.T) {
	noAuth := api.Guard(&reached{}, api.GuardOptions{AllowedHosts: []string{"node1.example:7080", "Node2.Example"}})
	for _, c := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:7080", passes},
		{"127.0.0.1", passes},
		{"[::1]:7080", passes},
		{"[::1]", passes},
		{"10.0.0.5:7080", passes},
		{"[fd00::5]:7080", passes},
		{"localhost:7080", passes},
		{"localhost", passes},
		{"LocalHost:7080", passes},
		{"node1.example:7080", passes},
		{"node1.example", passes},
		{"NODE1.example:9999", passes},
		{"node2.example:7080", passes},
		{"evil.example", denied},
		{"evil.example:7080", denied},
		{"localhost.evil.example:7080", denied},
		{"127.0.0.1.evil.example", denied},
		{"node1.example.evil.example", denied},
		{"localhost.", denied},
		{"0x7f.0.0.1", denied},
		{"", denied},
	} {
		req := httptest.NewRequest("GET", "/v1/pools", nil)
		req.Host = c.host
		rec := httptest.NewRecorder()
		noAuth.ServeHTTP(rec, req)
		require.Equal(t, c.want, rec.Code, "Host %q: %s", c.host, rec.Body)
		if c.want == denied {
			assert.Equal(t, api.CodePermissionDenied, errorCode(t, rec))
			assert.Empty(t, rec.Header().Get("WWW-Authenticate"))
			if c.host != "" {
				assert.Contains(t, rec.Body.String(), c.host)
				assert.Contains(t, rec.Body.String(), "DNS name")
			}
		}
	}
	// Every route: open ones answer any Host, the others are refused for a
	// rebinding name, whatever the method, and served for an IP literal.
	for _, row := range routeTable {
		want := denied
		if row.open {
			want = passes
		}
		assert.Equal(t, want, serve(noAuth, row.method, row.path, "evil.example:7080", "").Code, "%s %s", row.method, row.path)
		assert.Equal(t, passes, serve(noAuth, row.method, row.path, "127.0.0.1:7080", "").Code, "%s %s", row.method, row.path)
	}

	withTokens := api.Guard(&reached{}, api.GuardOptions{Tokens: testTokens(t, nil)})
	assert.Equal(t, passes, serve(withTokens, "GET", "/v1/pools", "evil.example", "Bearer "+tokRead).Code, "no Host check with tokens")
	assert.Equal(t, unauth, serve(withTokens, "GET", "/v1/pools", "evil.example", "").Code)
}

// TestGuardCrossSiteWrite: without a token file, a write a web page sent
// (a form or a no-cors fetch to the node's IP address: no preflight, no
// body needed) is refused by what the browser says of its origin; reads,
// the node's own pages, and clients that are not browsers pass. Before,
// any page a user of the machine visited could raise the feature level or
// move leadership through 127.0.0.1.
func TestGuardCrossSiteWrite(t *testing.T) {
	noAuth := api.Guard(&reached{}, api.GuardOptions{})
	for _, c := range []struct {
		method, origin, site string
		want                 int
	}{
		{"POST", "https://evil.example", "", denied},
		{"POST", "http://10.0.0.9:7080", "", denied},
		{"POST", "null", "", denied},
		{"DELETE", "https://evil.example", "", denied},
		{"PUT", "", "cross-site", denied},
		{"POST", "", "same-site", denied},
		{"POST", "http://127.0.0.1:7080", "same-origin", passes},
		{"POST", "", "none", passes},
		{"POST", "", "", passes},
		{"GET", "https://evil.example", "cross-site", passes},
	} {
		for _, path := range []string{"/v1/cluster/finalize-upgrade", "/v1/cluster/leader-transfer"} {
			req := httptest.NewRequest(c.method, "http://127.0.0.1:7080"+path, http.NoBody)
			req.Host = "127.0.0.1:7080"
			if c.origin != "" {
				req.Header.Set("Origin", c.origin)
			}
			if c.site != "" {
				req.Header.Set("Sec-Fetch-Site", c.site)
			}
			rec := httptest.NewRecorder()
			noAuth.ServeHTTP(rec, req)
			require.Equal(t, c.want, rec.Code, "%s %s, Origin %q, Sec-Fetch-Site %q: %s", c.method, path, c.origin, c.site, rec.Body)
			if c.want == denied {
				assert.Equal(t, api.CodePermissionDenied, errorCode(t, rec))
				assert.Contains(t, rec.Body.String(), "without a token file")
			}
		}
	}
}

// TestGuardLogsNoToken: neither a good token nor a bad one (nor their
// hashes) appears in the log, at any level.
func TestGuardLogsNoToken(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := hclog.New(&hclog.LoggerOptions{Output: lockedWriter{&mu, &logs}, Level: hclog.Trace})
	h := api.Guard(&reached{}, api.GuardOptions{Tokens: testTokens(t, logger), Logger: logger})
	const bad = "ra_aBadTokenThatMustNotBeLogged"
	for _, c := range []struct{ method, path, token string }{
		{"GET", "/v1/pools", bad},
		{"GET", "/v1/pools", tokRead},
		{"POST", "/v1/txn", tokRead}, // refused: role too weak
		{"POST", "/v1/txn", tokWrite},
		{"GET", "/v1/snapshot", tokWrite},
	} {
		serve(h, c.method, c.path, "", "Bearer "+c.token)
	}
	serve(h, "GET", "/v1/pools", "", "Basic "+bad)
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	require.Contains(t, out, "request refused", "refusals are logged")
	assert.Contains(t, out, "token_name=reader")
	for _, tok := range []string{bad, tokRead, tokWrite, tokAdmin} {
		assert.NotContains(t, out, tok)
		h := sha256.Sum256([]byte(tok))
		assert.NotContains(t, out, hex.EncodeToString(h[:])[:16])
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
