package api

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// authRule gives the role that requests of a method and path need.
type authRule struct {
	// method is GET (which covers HEAD too, as the mux's GET routes do),
	// another method, or "*" for any.
	method string
	// pattern is a path: {x} matches one non-empty segment, and a final
	// "/..." matches the path before it and everything under it.
	pattern string
	role    Role
	open    bool // served without credentials
}

// authRules decide what every request needs, by method and path only,
// before anything else about the request is looked at (whether the path
// exists, the body, the leader). The first rule that matches applies. A
// request no route serves needs what its method would anywhere: read for
// a GET, admin otherwise (the most restrictive), so a path added later
// without a rule is never open by accident.
var authRules = []authRule{
	// Liveness and readiness probes carry no credentials. GET and HEAD
	// only: the router does not clean a CONNECT's path, so an open rule
	// for any method would let "CONNECT /v1/../healthz" past the guard to
	// whatever the router makes of it.
	{"GET", "/healthz", 0, true},
	{"GET", "/readyz", 0, true},
	{"*", "/debug/pprof/...", RoleAdmin, false}, // heap contents and goroutine stacks
	{"GET", "/v1/snapshot", RoleAdmin, false},   // the whole state
	// The status page's login form and its redirect (/ui to /ui/) show
	// nothing of the state; the page itself, /ui/, is a read.
	{"GET", "/ui", 0, true},
	{"GET", "/ui/login", 0, true},
	{"POST", "/ui/login", 0, true},
	{"GET", "/...", RoleRead, false}, // every other read, /metrics, /openapi.yaml and /ui/ included
	{"POST", "/v1/pools/{name}/allocations", RoleWrite, false},
	{"DELETE", "/v1/pools/{name}/allocations/{value}", RoleWrite, false},
	{"POST", "/v1/txn", RoleWrite, false},
	{"*", "/v1/services/...", RoleWrite, false},
	{"*", "/...", RoleAdmin, false}, // pools, members, leader transfer, restore, and anything unknown
}

// RequiredRole returns the role a request of method to path needs, or open
// true if it is served without credentials (/healthz, /readyz). path is as
// sent (r.URL.EscapedPath()); it is read as the router reads it: cleaned
// of "." and ".." segments and repeated slashes, then each segment
// unescaped. It decides by method and path alone, from one table
// (authRules), so the answer for a path the API does not serve is that of
// its method: read for a GET or HEAD, admin for anything else.
func RequiredRole(method, path string) (role Role, open bool) {
	segs := pathSegments(path)
	for _, r := range authRules {
		if methodMatches(r.method, method) && patternMatches(r.pattern, segs) {
			return r.role, r.open
		}
	}
	return RoleAdmin, false // unreachable: the last rule matches everything
}

func methodMatches(rule, method string) bool {
	return rule == "*" || rule == method || (rule == http.MethodGet && method == http.MethodHead)
}

// pathSegments cleans p as http.ServeMux does and returns its segments,
// each unescaped ("/a/b%2Fc" is a, b/c).
func pathSegments(p string) []string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	segs := strings.Split(clean[1:], "/")
	for i, s := range segs {
		if u, err := url.PathUnescape(s); err == nil {
			segs[i] = u
		}
	}
	return segs
}

func patternMatches(pattern string, segs []string) bool {
	pat := strings.Split(pattern[1:], "/")
	for i, p := range pat {
		if p == "..." && i == len(pat)-1 {
			return true
		}
		if i >= len(segs) {
			return false
		}
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if segs[i] == "" {
				return false
			}
			continue
		}
		if p != segs[i] {
			return false
		}
	}
	return len(segs) == len(pat)
}

// GuardOptions configure Guard.
type GuardOptions struct {
	// Tokens are the tokens requests authenticate with. Nil: the API is
	// unauthenticated (meant for loopback), and only the Host check
	// applies.
	Tokens *Tokens
	// AllowedHosts are host names (a port, if given, is ignored) that
	// requests may name in their Host header when Tokens is nil, besides
	// IP literals and localhost: the node's advertised HTTP host.
	AllowedHosts []string
	// Logger logs refused requests at debug level (never a token). Nil:
	// discard.
	Logger hclog.Logger
}

// guard is the handler Guard returns.
type guard struct {
	next   http.Handler
	tokens *Tokens
	hosts  map[string]bool // AllowedHosts, lowercased, without ports
	logger hclog.Logger
}

// Guard wraps next, the whole of a node's HTTP service, in authentication
// and roles. Each request is classified by RequiredRole before anything
// else is looked at: an open one (/healthz, /readyz) goes straight to
// next; otherwise, with Tokens, it must carry "Authorization: Bearer
// <token>" of a token in the file (else 401 Unauthenticated, with
// WWW-Authenticate) whose role is at least the one needed (else 403
// PermissionDenied). The token's name is put in the request's context
// (TokenName).
//
// Without Tokens the API is unauthenticated, and a web page the user
// visits could still reach it through a DNS name the page's site rebinds
// to the node's address (DNS rebinding). So only requests whose Host is
// an IP literal, localhost or one of AllowedHosts are served; others get
// 403 PermissionDenied. With Tokens there is no such check: a page
// cannot attach the token.
func Guard(next http.Handler, opts GuardOptions) http.Handler {
	g := &guard{next: next, tokens: opts.Tokens, hosts: map[string]bool{}, logger: opts.Logger}
	if g.logger == nil {
		g.logger = hclog.NewNullLogger()
	}
	for _, h := range opts.AllowedHosts {
		g.hosts[strings.ToLower(hostOnly(h))] = true
	}
	return g
}

// tokenNameKey is the context key of the authenticated token's name.
type tokenNameKey struct{}

// TokenName returns the name of the token the request authenticated with
// (for logs), or "" if it did not (an open path, or no token file).
func TokenName(ctx context.Context) string {
	name, _ := ctx.Value(tokenNameKey{}).(string)
	return name
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	need, open := RequiredRole(r.Method, r.URL.EscapedPath())
	if open {
		g.next.ServeHTTP(w, withLoginTokens(r, g.tokens)) // the status page's login checks tokens
		return
	}
	if g.tokens == nil {
		why := g.refuseHost(r.Host)
		if why == "" {
			why = crossSiteWrite(r)
		}
		if why != "" {
			g.refuse(w, r, http.StatusForbidden, CodePermissionDenied, why, "")
			return
		}
		g.next.ServeHTTP(w, r)
		return
	}
	token, why := bearerToken(r.Header)
	browser := isUIRead(r) // the status page: its cookie, else the login form
	if browser {
		token, why = uiCookieToken(r)
	}
	name, has, ok := g.tokens.lookup(token)
	ok = ok && why == ""
	switch {
	case !ok && browser:
		toLogin(w, r)
		return
	case why != "":
		g.refuse(w, r, http.StatusUnauthorized, CodeUnauthenticated, why, "")
		return
	case !ok:
		g.refuse(w, r, http.StatusUnauthorized, CodeUnauthenticated, "the bearer token is not known to this node", "")
		return
	}
	if has < need {
		g.refuse(w, r, http.StatusForbidden, CodePermissionDenied,
			fmt.Sprintf("token %q has role %s; %s %s needs role %s", name, has, r.Method, r.URL.Path, need), name)
		return
	}
	g.next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenNameKey{}, name)))
}

// refuse answers a request the guard does not let through, in the API's
// error format, and logs it at debug level without any credential.
func (g *guard) refuse(w http.ResponseWriter, r *http.Request, status int, code, msg, tokenName string) {
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="rangealloc"`)
	}
	g.logger.Debug("request refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr,
		"status", status, "token_name", tokenName, "reason", msg)
	writeError(w, &apiError{status, code, msg})
}

// bearerToken returns the token of the request's Authorization header, or
// why there is none (never quoting the header, which may hold a secret).
func bearerToken(h http.Header) (token, why string) {
	values := h.Values("Authorization")
	switch {
	case len(values) == 0:
		return "", "no credentials: send Authorization: Bearer <token>"
	case len(values) > 1:
		return "", "more than one Authorization header"
	}
	scheme, rest, _ := strings.Cut(values[0], " ")
	token = strings.Trim(rest, " \t")
	if !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", "the Authorization header is not of the form Bearer <token>"
	}
	return token, ""
}

// refuseHost returns why an unauthenticated API does not serve a request
// with this Host header, or "" if it does: an IP literal (with or
// without a port), localhost, or one of the allowed names.
func (g *guard) refuseHost(hostport string) string {
	h := strings.ToLower(hostOnly(hostport))
	if h == "" {
		return "no Host header: this node has no token file, so it serves only requests addressed to an IP address, localhost or its advertised host name"
	}
	if _, err := netip.ParseAddr(h); err == nil || h == "localhost" || g.hosts[h] {
		return ""
	}
	return fmt.Sprintf("Host %q is not allowed: this node has no token file, so it serves only requests addressed to an IP address, "+
		"localhost or its advertised host name; a web page could otherwise reach the unauthenticated API through a DNS name "+
		"rebound to this address (start the node with --token-file to serve any host name)", hostport)
}

// hostOnly strips a port and IPv6 brackets from a Host header's value.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// crossSiteWrite returns why a write a web page may have sent is refused,
// or "". Without a token file nothing tells the operator's request from
// a page's: a form, or a fetch in no-cors mode, posts to the node's
// address with no preflight (a bodiless POST needs no Content-Type), and
// the Host check passes for an IP address. Browsers say where such a
// request comes from: an Origin other than this node, or Sec-Fetch-Site
// naming another site, is refused. Clients that are not browsers (the
// CLI, curl, the Go client) send neither.
func crossSiteWrite(r *http.Request) string {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return ""
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		if u, err := url.Parse(origin); err != nil || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Sprintf("a write sent by a web page at %q, not by this node's own (%s), is refused: "+
				"without a token file the API cannot tell a page's request from the operator's", origin, r.Host)
		}
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return fmt.Sprintf("a write sent by a page of another site (Sec-Fetch-Site: %s) is refused: "+
			"without a token file the API cannot tell a page's request from the operator's", site)
	}
	return ""
}
