package api

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/internal/human"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/version"
)

// The status page, GET /ui/: the cluster, its members' health, and each
// pool's bands drawn as pictures of what is held. It is rendered on the
// server from this node's local state (a stale read), so it works without
// a leader, and needs no JavaScript: it reloads itself every few seconds.

//go:embed ui.html
var uiHTML string

var uiTemplates = template.Must(template.New("ui").Funcs(template.FuncMap{"n": thousands}).Parse(uiHTML))

// uiRefreshSeconds is how often the page reloads itself.
const uiRefreshSeconds = 5

// pageView is what the status page shows.
type pageView struct {
	Refresh      int
	Node         string // the answering node's ID
	Version      string
	Rendered     string // when the page was rendered, UTC
	AppliedIndex uint64
	Cluster      clusterView
	ClusterErr   string
	Pools        []poolView
	PoolsErr     string
}

// clusterView is the cluster as this node sees it.
type clusterView struct {
	ID           string
	Leader       string // "" when there is none
	LeaderAPI    string
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	FeatureLevel int
	Members      []memberView
}

// memberView is one member's row, every field ready to print.
type memberView struct {
	ID, Role, RaftAddr, APIAddr string
	Link                        string // its status page, "" without an API address
	Self                        bool
	// Health is healthy, unhealthy or unknown (and the CSS class of its
	// label); Why says what is wrong with an unhealthy member.
	Health, Why                     string
	LastContact, MatchIndex, Lag    string
	Version, FeatureLevel, DiskFree string
	DiskLow                         bool
}

// poolView is one pool and the pictures of its bands.
type poolView struct {
	Name, Kind, Range string
	Size, Used        int
	Percent           string
	Static, Dynamic   bandView
	Err               string // the pool could not be read; nothing else is set but Name
}

// statusPage serves GET /ui/ (and nothing under it: other paths are not
// found).
func (srv *Server) statusPage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/ui/" {
		writeError(w, &apiError{http.StatusNotFound, CodeNotFound, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path)})
		return
	}
	ctx, cancel := srv.ctx(r)
	defer cancel()
	applied := srv.s.AppliedIndex() // read first: the page reflects at least this
	page := pageView{Refresh: uiRefreshSeconds, Node: srv.s.ID(), Version: version.String(),
		Rendered: time.Now().UTC().Format("2006-01-02 15:04:05 MST"), AppliedIndex: applied}
	if st, err := srv.s.Cluster(); err != nil {
		page.ClusterErr = err.Error()
	} else {
		page.Cluster = toClusterView(st, r)
	}
	page.Pools, page.PoolsErr = srv.poolViews(ctx)
	w.Header().Set("X-Rangealloc-Applied-Index", strconv.FormatUint(applied, 10))
	renderHTML(w, http.StatusOK, "page", page)
}

// poolViews reads every pool and its allocations from this node's state.
// A pool that cannot be read (deleted since the list was taken) gets a
// view that says why.
func (srv *Server) poolViews(ctx context.Context) ([]poolView, string) {
	pools, err := srv.s.Pools(ctx, node.Stale)
	if err != nil {
		return nil, err.Error()
	}
	out := make([]poolView, 0, len(pools))
	for _, p := range pools {
		out = append(out, srv.poolView(ctx, p.Name))
	}
	return out, ""
}

// poolView draws one pool from its RangeAllocation record, which carries
// its range and allocations read together, so that the picture and the
// counts agree even if the pool changes while the page is drawn.
func (srv *Server) poolView(ctx context.Context, name string) poolView {
	rng, data, err := srv.s.RangeAllocation(ctx, node.Stale, name)
	if err != nil {
		return poolView{Name: name, Err: err.Error()}
	}
	r, err := allocator.ParseRange(rng)
	if err != nil {
		return poolView{Name: name, Err: fmt.Sprintf("pool %q: %v", name, err)}
	}
	p := allocator.NewPool(r)
	if err := p.Restore(rng, data); err != nil {
		return poolView{Name: name, Err: fmt.Sprintf("pool %q: its RangeAllocation record does not decode: %v", name, err)}
	}
	v := poolView{Name: name, Kind: r.Kind().String(), Range: r.String(), Size: r.Size()}
	v.Static, v.Dynamic = drawBands(r, p.Bitmap())
	v.Used = v.Static.Used + v.Dynamic.Used
	v.Percent = strconv.FormatFloat(100*float64(v.Used)/float64(v.Size), 'f', 1, 64) + "%"
	return v
}

// toClusterView turns this node's view of the cluster into the page's,
// linking each member's API address to its own status page with the
// scheme this request came by.
func toClusterView(st node.ClusterStatus, r *http.Request) clusterView {
	v := clusterView{ID: st.ClusterID, Leader: st.LeaderID, LeaderAPI: st.LeaderAPI, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, FeatureLevel: st.FeatureLevel}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	for _, m := range st.Members {
		mv := toMemberView(m)
		mv.Self = m.ID == st.ID
		mv.Link = statusLink(m.APIAddr, scheme)
		v.Members = append(v.Members, mv)
	}
	return v
}

// statusLink returns the status page of the node whose API address is
// addr: a URL ("https://10.0.0.2:7080", as a node records its own) or a
// bare host and port (as --peers gives them), which is reached by scheme.
// "" when addr is empty or not an address.
func statusLink(addr, scheme string) string {
	u := &url.URL{Scheme: scheme, Host: addr}
	if strings.Contains(addr, "://") {
		var err error
		if u, err = url.Parse(addr); err != nil {
			return ""
		}
	}
	if u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/ui/"}).String()
}

// toMemberView renders a member's fields. What only the leader knows
// (health, lag, version, disk) reads "unknown" when Known is false: this
// node is not the leader, or has not heard from the member.
func toMemberView(m node.Member) memberView {
	v := memberView{ID: m.ID, RaftAddr: m.RaftAddr, APIAddr: m.APIAddr, Role: "non-voter", Health: "unknown",
		LastContact: "unknown", MatchIndex: "unknown", Lag: "unknown", Version: "unknown", FeatureLevel: "unknown", DiskFree: "unknown"}
	switch {
	case m.Leader:
		v.Role = "leader"
	case m.Voter:
		v.Role = "voter"
	}
	if !m.Known {
		return v
	}
	v.Health, v.Why = health(m)
	v.LastContact = "never"
	if m.LastContact >= 0 {
		v.LastContact = m.LastContact.Round(time.Millisecond).String() + " ago"
	}
	v.MatchIndex, v.Lag = strconv.FormatUint(m.MatchIndex, 10), strconv.FormatUint(m.Lag, 10)
	if m.Version != "" {
		v.Version = m.Version
	}
	if m.FeatureLevel > 0 {
		v.FeatureLevel = strconv.Itoa(m.FeatureLevel)
	}
	if m.DiskFree > 0 {
		v.DiskFree = human.Bytes(m.DiskFree)
	}
	v.DiskLow = m.DiskLow
	return v
}

// health names a known member's health, and what is wrong when it is not
// healthy.
func health(m node.Member) (state, why string) {
	if m.Healthy {
		return "healthy", ""
	}
	switch {
	case !m.Reachable:
		why = "unreachable"
	case m.Lag > 0:
		why = fmt.Sprintf("%d entries behind", m.Lag)
	default:
		why = "not on the leader's term"
	}
	return "unhealthy", why
}

// thousands prints n with commas between groups of three digits:
// 1,048,574.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// renderHTML executes a template into a buffer first, so that a failure
// answers 500 instead of half a page.
func renderHTML(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := uiTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		writeError(w, fmt.Errorf("render %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page is drawn on the server: it runs no script, loads nothing
	// from elsewhere, and is never framed.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// uiRedirect serves GET /ui: the page is at /ui/.
func uiRedirect(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
}
