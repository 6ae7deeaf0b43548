package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Logging in to the status page. Under a token file every read needs a
// bearer token, which a browser cannot send. GET /ui/login shows a form;
// POST /ui/login checks the token it is given and keeps it in a cookie
// (HttpOnly, SameSite=Strict, Secure under TLS, Path /ui/) that the guard
// takes as the bearer token for reads of /ui/ paths only (uiCookieToken).
// The cookie holds the token itself: the node keeps no sessions, and a
// token removed from the file stops opening the page at once.
const (
	uiCookieName = "rangealloc_ui_token"
	uiCookiePath = "/ui/"
	uiLoginPath  = "/ui/login"
	formType     = "application/x-www-form-urlencoded" // POST /ui/login
	maxLoginBody = 4 << 10
)

// loginView is what the login form shows.
type loginView struct {
	Node    string
	Message string // why the last attempt failed, or ""
}

// loginTokensKey is the context key of the guard's Tokens, which the
// login checks a token against. Without it (no token file) the page is
// open and there is nothing to log in to.
type loginTokensKey struct{}

func withLoginTokens(r *http.Request, t *Tokens) *http.Request {
	if t == nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), loginTokensKey{}, t))
}

func loginTokens(ctx context.Context) *Tokens {
	t, _ := ctx.Value(loginTokensKey{}).(*Tokens)
	return t
}

// loginForm serves GET /ui/login.
func (srv *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	if loginTokens(r.Context()) == nil {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	renderHTML(w, http.StatusOK, "login", loginView{Node: srv.s.ID()})
}

// login serves POST /ui/login: a known token of a role that may read the
// page is kept in the cookie, and the browser sent on to the page; any
// other answer shows the form again with the reason, and sets nothing.
func (srv *Server) login(w http.ResponseWriter, r *http.Request) {
	tokens := loginTokens(r.Context())
	if tokens == nil {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	fail := func(status int, msg string) {
		renderHTML(w, status, "login", loginView{Node: srv.s.ID(), Message: msg})
	}
	if why := crossSite(r); why != "" {
		fail(http.StatusForbidden, why)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, "the form does not parse: "+err.Error())
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	name, role, ok := tokens.lookup(token)
	need, _ := RequiredRole(http.MethodGet, uiCookiePath)
	switch {
	case token == "":
		fail(http.StatusBadRequest, "no token given: paste a token of this node's token file")
		return
	case !ok:
		fail(http.StatusUnauthorized, "the token is not known to this node")
		return
	case role < need:
		fail(http.StatusForbidden, fmt.Sprintf("token %q has role %s; the status page needs role %s", name, role, need))
		return
	case !cookieSafe(token):
		fail(http.StatusBadRequest, fmt.Sprintf("token %q holds characters a cookie cannot carry (spaces, quotes, commas, semicolons, backslashes or non-ASCII): use a token made by 'rangealloc token create'", name))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: uiCookieName, Value: token, Path: uiCookiePath,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// crossSite returns why a login posted from another site's page is
// refused, or "" for one from this node's own form (or from a client
// that sends no Origin). Without it a page elsewhere could log the
// browser in with a token of the page author's choosing.
func crossSite(r *http.Request) string {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Sprintf("the login form was posted from %q, not from this node (%s)", origin, r.Host)
	}
	return ""
}

// cookieSafe reports whether a cookie can carry s unchanged: net/http
// drops other bytes from a cookie's value, and quotes values with spaces
// or commas.
func cookieSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == ';' || c == '\\' || c == ',' {
			return false
		}
	}
	return true
}

// isUIRead reports whether a request is a read of a /ui/ path without an
// Authorization header: what a browser sends for the status page. The
// guard takes the token of such a request from the page's cookie, and
// sends it to the login form when there is none or the token is unknown.
func isUIRead(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		len(r.Header.Values("Authorization")) == 0 && pathSegments(r.URL.EscapedPath())[0] == "ui"
}

// uiCookieToken returns the token of the status page's cookie, or why
// there is none.
func uiCookieToken(r *http.Request) (token, why string) {
	c, err := r.Cookie(uiCookieName)
	if err != nil || c.Value == "" {
		return "", "no credentials: log in at " + uiLoginPath
	}
	return c.Value, ""
}

// toLogin sends a browser to the login form.
func toLogin(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, uiLoginPath, http.StatusSeeOther)
}
