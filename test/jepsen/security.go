package jepsen

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/test/checker"
)

// By default a run is secured as a production install is: the harness
// makes a CA of its own, one certificate per node (CN the node's ID, its
// address the only SAN), and a token file, and every server runs with
// mutual TLS on the Raft port, HTTPS on the API and the token file. Every
// client of the harness dials HTTPS, verifying the node's certificate
// against the run's CA and its IP address, and sends the token of its
// role:
//
//	token          role   sent by
//	jepsen-harness admin  the harness's own calls (status, membership, final reads)
//	jepsen-client  write  the clients that write and read
//	jepsen-reader  read   the read-only clients and the burst reads
//	jepsen-join    read   a server started with --join (RANGEALLOC_TOKEN)
//
// Insecure (-jepsen.insecure) runs the old way instead, for comparison:
// plain HTTP and TCP, --insecure, no tokens.
//
// The material lives in a directory of the run's temp data dir, removed
// with it; the token file holds only the tokens' hashes, and the tokens
// themselves are kept in memory and handed to a server in its environment,
// never on a command line or in a log.

// certValidity is how long the run's CA and certificates are valid: more
// than the 30 days under which a server warns, at each start, that its
// certificate expires soon.
const certValidity = 365 * 24 * time.Hour

// Token names, as the servers log them.
const (
	tokenAdmin  = "jepsen-harness"
	tokenWrite  = "jepsen-client"
	tokenRead   = "jepsen-reader"
	tokenJoiner = "jepsen-join"
)

// Security is a run's TLS material and tokens, or Insecure.
type Security struct {
	Insecure bool
	// The tokens, by what sends them; empty when Insecure.
	Admin, Write, Read, Join string

	dir       string // certificates, keys and the token file
	ca        *certs.CA
	caFile    string
	tokenFile string
	tls       *tls.Config // a client's: verifies a node against the CA
}

// NewSecurity makes the run's CA and tokens in dir (created, mode 0700),
// or returns an insecure Security that needs nothing.
func NewSecurity(dir string, insecure bool) (*Security, error) {
	if insecure {
		return &Security{Insecure: true}, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := certs.NewCA("rangealloc jepsen CA", certValidity)
	if err != nil {
		return nil, err
	}
	s := &Security{dir: dir, ca: ca, caFile: filepath.Join(dir, "ca.crt"), tokenFile: filepath.Join(dir, "tokens")}
	if err := os.WriteFile(s.caFile, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	var lines []string
	for _, t := range []struct {
		dst  *string
		role api.Role
		name string
	}{{&s.Admin, api.RoleAdmin, tokenAdmin}, {&s.Write, api.RoleWrite, tokenWrite}, {&s.Read, api.RoleRead, tokenRead},
		{&s.Join, api.RoleRead, tokenJoiner}} {
		if *t.dst, err = api.NewToken(); err != nil {
			return nil, err
		}
		lines = append(lines, api.TokenLine(*t.dst, t.role, t.name))
	}
	if err := os.WriteFile(s.tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	f, err := certs.Load(certs.Paths{CA: s.caFile}, nil)
	if err != nil {
		return nil, err
	}
	if s.tls, err = f.ClientConfig(); err != nil {
		return nil, err
	}
	return s, nil
}

// String says how the run is secured, for the run's summary.
func (s *Security) String() string {
	if s.Insecure {
		return "security: off (-jepsen.insecure): plain HTTP and Raft, --insecure, no tokens"
	}
	return "security: on: mutual TLS between nodes, HTTPS API, tokens (admin for the harness, write for the clients, " +
		"read for the readers and --join)"
}

// URL returns the API's URL at hostport.
func (s *Security) URL(hostport string) string {
	if s.Insecure {
		return "http://" + hostport
	}
	return "https://" + hostport
}

// ServerArgs returns node id's security flags, issuing its certificate
// (for ip) first.
func (s *Security) ServerArgs(id, ip string) ([]string, error) {
	if s.Insecure {
		return []string{"--insecure"}, nil
	}
	certPEM, keyPEM, err := s.ca.Issue(id, []string{ip}, certValidity)
	if err != nil {
		return nil, err
	}
	crt, key := filepath.Join(s.dir, id+".crt"), filepath.Join(s.dir, id+".key")
	if err := os.WriteFile(crt, certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return []string{"--tls-cert", crt, "--tls-key", key, "--tls-ca", s.caFile,
		"--api-tls-cert", crt, "--api-tls-key", key, "--token-file", s.tokenFile}, nil
}

// JoinEnv is the environment a server started with --join adds: the
// token it asks the member's API with. (Its own --tls-ca verifies the
// member.)
func (s *Security) JoinEnv() []string {
	if s.Insecure {
		return nil
	}
	return []string{"RANGEALLOC_TOKEN=" + s.Join}
}

// Transport returns a transport without keep-alive: a refused connection
// then means the request was never sent, and net/http never replays a
// keyed request on a new connection behind the caller's back. Over TLS
// each connection verifies the node's certificate against the run's CA
// and the IP address dialed (certs.ForHost).
func (s *Security) Transport() *http.Transport {
	tr := &http.Transport{DisableKeepAlives: true}
	if !s.Insecure {
		tr.DialTLSContext = certs.DialTLS(s.tls)
	}
	return tr
}

// Client returns a client of the API at url (from URL) that sends token
// (none when Insecure); a zero timeout leaves the bound to the contexts.
func (s *Security) Client(url string, timeout time.Duration, token string) *client.Client {
	c := client.New(url, &http.Client{Timeout: timeout, Transport: s.Transport()})
	if s.Insecure {
		return c
	}
	return c.WithToken(token)
}

// CheckAuth judges "credentials accepted": every attempt of the history
// carried a token whose role may make it, so none may be answered 401
// Unauthenticated or 403 PermissionDenied. One line per refused attempt,
// the first ten, then a count of the rest.
func CheckAuth(h checker.History) checker.Report {
	r := checker.Report{Name: "credentials accepted", OK: true, Checked: len(h)}
	n := 0
	for _, op := range h {
		if op.Err != api.CodeUnauthenticated && op.Err != api.CodePermissionDenied {
			continue
		}
		if n++; n <= 10 {
			of := op.Pool + " " + op.Value
			if op.Service != "" {
				of = op.Service
			}
			r.Problems = append(r.Problems, fmt.Sprintf("client %d's %s of %s on %s at %.3fs was refused: %s",
				op.Client, op.Kind, of, op.Node, float64(op.Call)/1e9, op.Err))
		}
	}
	if n > 10 {
		r.Problems = append(r.Problems, fmt.Sprintf("and %d more refused attempts", n-10))
	}
	r.OK = n == 0
	return r
}
