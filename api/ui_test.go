package api_test

import (
	"context"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/node"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// uiStore is a Store holding fixed pools and a fixed cluster view. Only
// the methods the status page calls are implemented; the embedded nil
// Store makes any other call fail the test with a nil dereference.
type uiStore struct {
	api.Store
	cluster    node.ClusterStatus
	clusterErr error
	names      []string // in the order Pools lists them
	pools      map[string]*allocator.Pool
	raErr      map[string]error  // RangeAllocation fails for these pools
	raData     map[string][]byte // RangeAllocation answers these bytes instead of the pool's
	reads      []node.Consistency
}

func (s *uiStore) ID() string           { return "n1" }
func (s *uiStore) AppliedIndex() uint64 { return 42 }

func (s *uiStore) Cluster() (node.ClusterStatus, error) { return s.cluster, s.clusterErr }

func (s *uiStore) Pools(_ context.Context, c node.Consistency) ([]node.PoolStatus, error) {
	s.reads = append(s.reads, c)
	var out []node.PoolStatus
	for _, n := range s.names {
		out = append(out, node.PoolStatus{Name: n, Range: s.pools[n].Range()})
	}
	return out, nil
}

func (s *uiStore) RangeAllocation(_ context.Context, c node.Consistency, name string) (string, []byte, error) {
	s.reads = append(s.reads, c)
	if err := s.raErr[name]; err != nil {
		return "", nil, err
	}
	rng, data := s.pools[name].Snapshot()
	if d, ok := s.raData[name]; ok {
		data = d
	}
	return rng, data, nil
}

// newUIStore makes a store with one pool per entry of held: its range and
// the values allocated in it.
func newUIStore(t *testing.T, held []uiPool) *uiStore {
	t.Helper()
	s := &uiStore{pools: map[string]*allocator.Pool{}, cluster: node.ClusterStatus{ID: "n1", LeaderID: "n1", Term: 3,
		Members: []node.Member{{ID: "n1", Voter: true, Leader: true}}}}
	for _, p := range held {
		r, err := allocator.ParseRange(p.rng)
		require.NoError(t, err)
		pool := allocator.NewPool(r)
		for _, v := range p.values {
			_, err := pool.Allocate(v)
			require.NoError(t, err, "Allocate(%q) in %s", v, p.rng)
		}
		s.names = append(s.names, p.name)
		s.pools[p.name] = pool
	}
	return s
}

type uiPool struct {
	name, rng string
	values    []string
}

// run returns the values of r from offset lo, n of them.
func run(t *testing.T, rng string, lo, n int) []string {
	r, err := allocator.ParseRange(rng)
	require.NoError(t, err)
	var out []string
	for off := lo; off < lo+n; off++ {
		out = append(out, r.Value(off))
	}
	return out
}

// getPage serves GET path from h and returns the answer and its body.
func getPage(t *testing.T, h http.Handler, path string, cookies ...*http.Cookie) (*httptest.ResponseRecorder, string) {
	t.Helper()
	req := httptest.NewRequest("GET", "http://127.0.0.1:7080"+path, nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec, rec.Body.String()
}

// cell is one cell of a band's picture, as the page draws it.
type cell struct {
	first, last, shade string
	values, held       int
}

var (
	poolRE = regexp.MustCompile(`data-pool="([^"]*)"`)
	bandRE = regexp.MustCompile(`data-band="(static|dynamic)"`)
	cellRE = regexp.MustCompile(`<rect [^>]*class="(h\d)" data-first="([^"]*)" data-last="([^"]*)" data-values="(\d+)" data-held="(\d+)">`)
)

// parseBands returns the cells of each pool's bands: pool → band → cells.
func parseBands(t *testing.T, page string) map[string]map[string][]cell {
	t.Helper()
	out := map[string]map[string][]cell{}
	sections := poolRE.FindAllStringSubmatchIndex(page, -1)
	for i, sec := range sections {
		end := len(page)
		if i+1 < len(sections) {
			end = sections[i+1][0]
		}
		name := page[sec[2]:sec[3]]
		body := page[sec[1]:end]
		out[name] = map[string][]cell{}
		bands := bandRE.FindAllStringSubmatchIndex(body, -1)
		for j, b := range bands {
			bend := len(body)
			if j+1 < len(bands) {
				bend = bands[j+1][0]
			}
			var cells []cell
			for _, m := range cellRE.FindAllStringSubmatch(body[b[1]:bend], -1) {
				values, _ := strconv.Atoi(m[4])
				held, _ := strconv.Atoi(m[5])
				cells = append(cells, cell{shade: m[1], first: html.UnescapeString(m[2]), last: html.UnescapeString(m[3]), values: values, held: held})
			}
			out[name][body[b[2]:b[3]]] = cells
		}
	}
	return out
}

// checkBand checks that cells tile the offsets [lo, hi) of r in order, and
// that each cell's held count and shade are those of the held offsets.
func checkBand(t *testing.T, r allocator.Range, band string, lo, hi int, cells []cell, held map[int]bool) {
	t.Helper()
	next := lo
	for i, c := range cells {
		first, err := r.Offset(c.first)
		require.NoError(t, err, "%s %s cell %d: data-first", r, band, i)
		last, err := r.Offset(c.last)
		require.NoError(t, err, "%s %s cell %d: data-last", r, band, i)
		require.Equal(t, next, first, "%s %s cell %d starts where the previous one ended", r, band, i)
		require.Equal(t, last-first+1, c.values, "%s %s cell %d: data-values", r, band, i)
		want := 0
		for off := first; off <= last; off++ {
			if held[off] {
				want++
			}
		}
		require.Equal(t, want, c.held, "%s %s cell %s-%s: data-held", r, band, c.first, c.last)
		switch {
		case want == 0:
			require.Equal(t, "h0", c.shade, "%s %s cell %s: none held", r, band, c.first)
		case want == c.values:
			require.Equal(t, "h4", c.shade, "%s %s cell %s: all held", r, band, c.first)
		default:
			require.Contains(t, []string{"h1", "h2", "h3"}, c.shade, "%s %s cell %s: some held", r, band, c.first)
		}
		next = last + 1
	}
	require.Equal(t, hi, next, "%s %s: the cells cover the band", r, band)
}

// TestUIBands: each pool's static and dynamic bands are drawn cell by
// cell, the cells holding allocated values marked held and the others
// not, with the boundary at the static band's size; a band of a million
// values is drawn in at most 1,024 cells.
func TestUIBands(t *testing.T) {
	pools := []uiPool{
		{"small", "10.96.0.0/24", []string{"10.96.0.1", "10.96.0.16", "10.96.0.17", "10.96.0.200", "10.96.0.254"}},
		{"nodeport", "30000-32767", []string{"30000", "30085", "30086", "30087", "30088", "30100", "32767"}},
		{"wide", "10.0.0.0/12", append(run(t, "10.0.0.0/12", 256, 1024), "10.0.0.1", "10.0.1.0", "10.8.0.0", "10.15.255.254")},
		{"v6", "fd00::/108", []string{"fd00::1", "fd00::100", "fd00::101", "fd00::f:ffff"}},
		{"tiny", "40000-40015", []string{"40003"}},
	}
	s := newUIStore(t, pools)
	rec, page := getPage(t, api.NewServer(s, api.Options{}), "/ui/")
	require.Equal(t, http.StatusOK, rec.Code, page)
	assert.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
	assert.Contains(t, page, `<meta http-equiv="refresh" content="5">`)
	assert.NotContains(t, page, "<script", "the page runs no script")
	for _, c := range s.reads {
		assert.Equal(t, node.Stale, c, "the page reads this node's local state")
	}
	got := parseBands(t, page)
	require.Len(t, got, len(pools))
	for _, p := range pools {
		r := s.pools[p.name].Range()
		held := map[int]bool{}
		for _, v := range p.values {
			off, err := r.Offset(v)
			require.NoError(t, err)
			held[off] = true
		}
		b := r.StaticSize()
		checkBand(t, r, "static", 0, b, got[p.name]["static"], held)
		checkBand(t, r, "dynamic", b, r.Size(), got[p.name]["dynamic"], held)
		for band, cells := range got[p.name] {
			assert.LessOrEqual(t, len(cells), 1024, "%s %s: cells", p.name, band)
		}
	}
	assert.Len(t, got["wide"]["static"], 256, "a /12's static band: one value a cell")
	assert.Len(t, got["wide"]["dynamic"], 1024, "a /12's dynamic band: 1,024 cells of 1,024 values")
	assert.Equal(t, "h4", got["wide"]["dynamic"][0].shade, "1,024 values held from the band's start fill its first cell")
	assert.Empty(t, got["tiny"]["static"], "16 values: no static band")
	assert.Contains(t, page, "No static band")
	assert.Contains(t, page, "of 1,048,574 held", "the /12's size, grouped by thousands")
	assert.Less(t, len(page), 1<<20, "the page's size is bounded by its cells, not its pools' sizes")
}

// TestUIPoolErrors: a pool that cannot be read, or whose record does not
// decode, is named with the reason; the others are still drawn.
func TestUIPoolErrors(t *testing.T) {
	s := newUIStore(t, []uiPool{{"a", "30000-30099", []string{"30001"}}, {"b", "10.96.0.0/24", nil}, {"c", "31000-31009", nil}})
	s.raErr = map[string]error{"a": errors.New(`pool "a" not found`)}
	s.raData = map[string][]byte{"b": {0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} // bits beyond 254
	rec, page := getPage(t, api.NewServer(s, api.Options{}), "/ui/")
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Contains(t, page, `pool &#34;a&#34; not found`)
	assert.Contains(t, page, `pool &#34;b&#34;: its RangeAllocation record does not decode`)
	got := parseBands(t, page)
	assert.Empty(t, got["a"])
	assert.Empty(t, got["b"])
	assert.Len(t, got["c"]["dynamic"], 10)
}

// TestUIMembers: each member's health renders: healthy, unhealthy with the
// reason, or unknown when this node does not know it; versions, feature
// levels, disk space, and a low disk. Without a leader the page says so.
func TestUIMembers(t *testing.T) {
	s := newUIStore(t, nil)
	s.cluster = node.ClusterStatus{ID: "n1", ClusterID: "c-123", LeaderID: "n1", LeaderAPI: "10.0.0.1:7080", Term: 7,
		CommitIndex: 900, AppliedIndex: 899, FeatureLevel: 2, Members: []node.Member{
			{ID: "n1", RaftAddr: "10.0.0.1:7000", APIAddr: "10.0.0.1:7080", Voter: true, Leader: true, Known: true, Reachable: true,
				Healthy: true, MatchIndex: 900, Version: "v1.4.0", FeatureLevel: 2, DiskFree: 3 << 30},
			{ID: "n2", RaftAddr: "10.0.0.2:7000", APIAddr: "10.0.0.2:7080", Voter: true, Known: true, Reachable: false,
				LastContact: 12 * time.Second, MatchIndex: 400, Lag: 500, Version: "v1.3.2", FeatureLevel: 1, DiskFree: 900 << 20, DiskLow: true},
			{ID: "n3", RaftAddr: "10.0.0.3:7000", APIAddr: "https://10.0.0.3:7443", Voter: true, Known: true, Reachable: true,
				LastContact: 40 * time.Millisecond, MatchIndex: 600, Lag: 300, Version: "v1.4.0", FeatureLevel: 2, DiskFree: 1 << 40},
			{ID: "n4", RaftAddr: "10.0.0.4:7000", Known: false},
		}}
	srv := api.NewServer(s, api.Options{})
	_, page := getPage(t, srv, "/ui/")
	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?s)<tr data-member="([^"]*)" data-health="([^"]*)">(.*?)</tr>`).FindAllStringSubmatch(page, -1) {
		rows[m[1]] = m[2] + "|" + m[3]
	}
	require.Len(t, rows, 4, page)
	for _, c := range []struct {
		id     string
		health string
		has    []string
	}{
		{"n1", "healthy", []string{"leader", "(this node)", "v1.4.0", "3.0 GiB", `href="http://10.0.0.1:7080/ui/"`}},
		{"n2", "unhealthy", []string{"voter", "unreachable", "12s ago", "500", "v1.3.2", "900.0 MiB", `data-disk-low="true"`}},
		{"n3", "unhealthy", []string{"300 entries behind", "40ms ago", "1.0 TiB", `href="https://10.0.0.3:7443/ui/"`}},
		{"n4", "unknown", []string{"non-voter", "unknown"}},
	} {
		health, row, _ := strings.Cut(rows[c.id], "|")
		assert.Equal(t, c.health, health, "member %s", c.id)
		for _, want := range c.has {
			assert.Contains(t, row, want, "member %s", c.id)
		}
	}
	assert.NotContains(t, rows["n4"], "v1.", "an unknown member shows no version")
	assert.NotContains(t, rows["n1"], "data-disk-low")
	for _, want := range []string{"c-123", ">7<", ">900<", ">899<", "Feature level"} {
		assert.Contains(t, page, want)
	}
	assert.NotContains(t, page, `id="no-leader"`)

	s.cluster.LeaderID, s.cluster.LeaderAPI = "", ""
	for i := range s.cluster.Members {
		s.cluster.Members[i].Leader = false
	}
	_, page = getPage(t, srv, "/ui/")
	assert.Contains(t, page, `id="no-leader"`, "without a leader the page says so")

	s.clusterErr = errors.New("raft is shut down")
	rec, page := getPage(t, srv, "/ui/")
	assert.Equal(t, http.StatusOK, rec.Code, "the pools are still shown")
	assert.Contains(t, page, "raft is shut down")
}

// TestUIEscapes: every value from the state is escaped: a member whose ID
// and address hold markup shows as text, and its link cannot run script.
func TestUIEscapes(t *testing.T) {
	s := newUIStore(t, nil)
	s.cluster.Members = []node.Member{{ID: `<script>alert(1)</script>`, RaftAddr: `"><img src=x onerror=alert(2)>`,
		APIAddr: `javascript:alert(3)`, Known: true, Version: `<b>v</b>`}}
	_, page := getPage(t, api.NewServer(s, api.Options{}), "/ui/")
	assert.NotContains(t, page, "<script>alert")
	assert.NotContains(t, page, "<img src=x")
	assert.NotContains(t, page, "<b>v</b>")
	assert.NotContains(t, page, `href="javascript:`)
	assert.Contains(t, page, "&lt;script&gt;alert(1)&lt;/script&gt;")
}

// TestUIRoutes: /ui redirects to /ui/, nothing else lives under /ui/, and
// without a token file the login form sends the browser to the page.
func TestUIRoutes(t *testing.T) {
	h := api.Guard(api.NewServer(newUIStore(t, nil), api.Options{}), api.GuardOptions{})
	for _, c := range []struct {
		path     string
		status   int
		location string
	}{
		{"/ui", http.StatusMovedPermanently, "/ui/"},
		{"/ui/", http.StatusOK, ""},
		{"/ui/nope", http.StatusNotFound, ""},
		{"/ui/login", http.StatusSeeOther, "/ui/"},
	} {
		rec, body := getPage(t, h, c.path)
		assert.Equal(t, c.status, rec.Code, "GET %s: %s", c.path, body)
		assert.Equal(t, c.location, rec.Header().Get("Location"), "GET %s", c.path)
	}
	rec := serve(h, "POST", "/ui/login", "", "")
	assert.Equal(t, http.StatusUnsupportedMediaType, rec.Code, "a login takes a form")
}

// noRedirects is a client that returns redirects instead of following
// them.
func noRedirects(c *http.Client) *http.Client {
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// TestUILogin: under a token file the page is no more open than GET
// /v1/pools. A browser without the cookie is sent to the login form; a
// wrong token is refused and sets nothing; a reader's token sets an
// HttpOnly, SameSite=Strict cookie (Secure under TLS) that opens the page
// and nothing outside /ui/; a form posted from another site is refused.
func TestUILogin(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run("tls="+strconv.FormatBool(useTLS), func(t *testing.T) {
			h := api.Guard(api.NewServer(newUIStore(t, []uiPool{{"nodeport", "30000-30099", []string{"30042"}}}), api.Options{}),
				api.GuardOptions{Tokens: testTokens(t, nil)})
			srv := httptest.NewUnstartedServer(h)
			if useTLS {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			hc := noRedirects(srv.Client())
			get := func(path string, cookie *http.Cookie) (*http.Response, string) {
				req, err := http.NewRequest("GET", srv.URL+path, nil)
				require.NoError(t, err)
				if cookie != nil {
					req.AddCookie(cookie)
				}
				return do(t, hc, req)
			}
			login := func(token, origin string) (*http.Response, string) {
				req, err := http.NewRequest("POST", srv.URL+"/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
				require.NoError(t, err)
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				if origin != "" {
					req.Header.Set("Origin", origin)
				}
				return do(t, hc, req)
			}

			resp, _ := get("/ui/", nil)
			assert.Equal(t, http.StatusSeeOther, resp.StatusCode, "no cookie: to the login form")
			assert.Equal(t, "/ui/login", resp.Header.Get("Location"))
			resp, body := get("/ui/login", nil)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Contains(t, body, `<form class="login" method="post" action="/ui/login">`)

			for _, c := range []struct {
				name, token, origin string
				status              int
				says                string
			}{
				{"wrong token", "ra_notInTheFile", "", http.StatusUnauthorized, "not known to this node"},
				{"no token", "", "", http.StatusBadRequest, "no token given"},
				{"another site", tokRead, "https://evil.example", http.StatusForbidden, "posted from"},
			} {
				resp, body := login(c.token, c.origin)
				assert.Equal(t, c.status, resp.StatusCode, "%s: %s", c.name, body)
				assert.Contains(t, body, c.says, c.name)
				assert.Empty(t, resp.Cookies(), "%s: no cookie", c.name)
				assert.NotContains(t, body, "ra_", "%s: no token in the answer", c.name)
			}

			resp, _ = login(tokRead, srv.URL)
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			assert.Equal(t, "/ui/", resp.Header.Get("Location"))
			require.Len(t, resp.Cookies(), 1)
			ck := resp.Cookies()[0]
			assert.True(t, ck.HttpOnly, "HttpOnly")
			assert.Equal(t, http.SameSiteStrictMode, ck.SameSite)
			assert.Equal(t, "/ui/", ck.Path)
			assert.Equal(t, useTLS, ck.Secure, "Secure under TLS")

			resp, body = get("/ui/", ck)
			assert.Equal(t, http.StatusOK, resp.StatusCode, "the cookie opens the page")
			assert.Contains(t, body, `data-first="30042" data-last="30042" data-values="1" data-held="1"`)
			resp, _ = get("/v1/pools", ck)
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the cookie is for /ui/ only")
			resp, _ = get("/ui/", &http.Cookie{Name: ck.Name, Value: "ra_notInTheFile"})
			assert.Equal(t, http.StatusSeeOther, resp.StatusCode, "an unknown token in the cookie: to the login form")

			req, err := http.NewRequest("GET", srv.URL+"/ui/", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+tokRead)
			resp, _ = do(t, hc, req)
			assert.Equal(t, http.StatusOK, resp.StatusCode, "a bearer token opens the page too")
			req.Header.Set("Authorization", "Bearer ra_notInTheFile")
			req.AddCookie(ck)
			resp, _ = do(t, hc, req)
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a bad bearer token is refused, cookie or not")
		})
	}
}

func do(t *testing.T, hc *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}
