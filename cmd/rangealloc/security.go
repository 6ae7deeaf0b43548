package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/spf13/pflag"
)

// securityFlags are the server's TLS and token flags. Loopback needs none
// of them; any other address needs them all, or --insecure:
//
//	port           listens on         protected by
//	--raft-addr    Raft + forwarding  --tls-cert, --tls-key, --tls-ca (mutual TLS 1.3)
//	--http-addr    the HTTP API       --api-tls-cert, --api-tls-key (HTTPS) and --token-file
//	                                  (--api-client-ca: client certificates too)
type securityFlags struct {
	tlsCert, tlsKey, tlsCA       string
	apiCert, apiKey, apiClientCA string
	tokenFile                    string
	insecure                     bool
}

func (s *securityFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&s.tlsCert, "tls-cert", "", "this node's certificate (PEM) for Raft and forwarded calls: mutual TLS 1.3 with --tls-key and --tls-ca")
	fl.StringVar(&s.tlsKey, "tls-key", "", "the key of --tls-cert (PEM)")
	fl.StringVar(&s.tlsCA, "tls-ca", "", "the CA (PEM) that signed every node's certificate; peers without one are closed in the handshake")
	fl.StringVar(&s.apiCert, "api-tls-cert", "", "certificate (PEM) to serve the HTTP API over HTTPS, with --api-tls-key")
	fl.StringVar(&s.apiKey, "api-tls-key", "", "the key of --api-tls-cert (PEM)")
	fl.StringVar(&s.apiClientCA, "api-client-ca", "", "also require API clients to present a certificate signed by this CA (PEM)")
	fl.StringVar(&s.tokenFile, "token-file", "", "API tokens, one per line: sha256:<hex> <read|write|admin> <name> (rangealloc token create)")
	fl.BoolVar(&s.insecure, "insecure", false, "serve a non-loopback address without TLS and tokens (anyone who reaches it can commit state)")
}

// isLoopback tells whether addr (host:port) listens on loopback only.
// "localhost" counts; an empty host, 0.0.0.0, :: and names do not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// check validates the flags without reading any file. It refuses a
// non-loopback address left open, unless --insecure; then it returns what
// is open, for a warning at every start.
func (s *securityFlags) check(httpAddr, raftAddr string) (open []string, err error) {
	var errs []error
	pair := func(a, aName, b, bName string) {
		if (a == "") != (b == "") {
			errs = append(errs, fmt.Errorf("%s and %s go together: give both or neither", aName, bName))
		}
	}
	pair(s.tlsCert, "--tls-cert", s.tlsKey, "--tls-key")
	pair(s.apiCert, "--api-tls-cert", s.apiKey, "--api-tls-key")
	if s.tlsCert != "" && s.tlsCA == "" || s.tlsCert == "" && s.tlsCA != "" {
		errs = append(errs, errors.New("--tls-ca goes with --tls-cert and --tls-key: mutual TLS needs this node's certificate and the CA of its peers"))
	}
	if s.apiClientCA != "" && s.apiCert == "" {
		errs = append(errs, errors.New("--api-client-ca needs --api-tls-cert and --api-tls-key: client certificates are asked for over HTTPS"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if !isLoopback(raftAddr) && s.tlsCert == "" {
		open = append(open, fmt.Sprintf("--raft-addr %s is not a loopback address and has no --tls-cert, --tls-key and --tls-ca: "+
			"anyone who reaches it can append Raft entries and forward calls", raftAddr))
	}
	if !isLoopback(httpAddr) && (s.apiCert == "" || s.tokenFile == "") {
		var missing []string
		if s.apiCert == "" {
			missing = append(missing, "--api-tls-cert")
		}
		if s.tokenFile == "" {
			missing = append(missing, "--token-file")
		}
		open = append(open, fmt.Sprintf("--http-addr %s is not a loopback address and has no %s: "+
			"anyone who reaches it can allocate, restore a backup or remove members", httpAddr, strings.Join(missing, " and ")))
	}
	if len(open) > 0 && !s.insecure {
		return nil, fmt.Errorf("refusing to start: %s.\nGive the missing flags (rangealloc certs init and rangealloc token create make "+
			"the files; see docs/OPERATIONS.md, \"A secure three-node install\"), or --insecure to run without them",
			strings.Join(open, "; and "))
	}
	return open, nil
}

// security is what the server loads from the security flags: TLS configs
// that follow their files, and the token file.
type security struct {
	nodeServer, nodeClient *tls.Config // nil: plain TCP between nodes
	nodeID                 string      // the CN of --tls-cert: the ID other nodes know this one by
	api                    *tls.Config // nil: plain HTTP
	tokens                 *api.Tokens // nil: no authentication
	stop                   chan struct{}
}

// load reads every file the flags name and starts watching them: a
// changed file is taken once two reads certs.DefaultWatchInterval apart
// agree, and a bad one keeps the last good material in use. close stops the watches.
func (s *securityFlags) load(logger hclog.Logger) (*security, error) {
	sec := &security{stop: make(chan struct{})}
	var watch []func()
	if s.tlsCert != "" {
		f, err := certs.Load(certs.Paths{Cert: s.tlsCert, Key: s.tlsKey, CA: s.tlsCA}, logger.Named("tls"))
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err)
		}
		if leaf := f.Leaf(); leaf != nil {
			sec.nodeID = leaf.Subject.CommonName
		}
		if sec.nodeServer, err = f.ServerConfig(true); err != nil {
			return nil, err
		}
		if sec.nodeClient, err = f.ClientConfig(); err != nil {
			return nil, err
		}
		watch = append(watch, func() { f.Watch(sec.stop, certs.DefaultWatchInterval) })
	}
	if s.apiCert != "" {
		f, err := certs.Load(certs.Paths{Cert: s.apiCert, Key: s.apiKey, CA: s.apiClientCA}, logger.Named("api-tls"))
		if err != nil {
			return nil, fmt.Errorf("--api-tls-cert/--api-tls-key/--api-client-ca: %w", err)
		}
		if sec.api, err = f.ServerConfig(s.apiClientCA != ""); err != nil {
			return nil, err
		}
		watch = append(watch, func() { f.Watch(sec.stop, certs.DefaultWatchInterval) })
	}
	if s.tokenFile != "" {
		t, err := api.LoadTokens(s.tokenFile, logger.Named("tokens"))
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		sec.tokens = t
		watch = append(watch, func() { t.Watch(sec.stop, certs.DefaultWatchInterval) })
	}
	for _, w := range watch {
		go w()
	}
	return sec, nil
}

func (sec *security) close() { close(sec.stop) }

// id returns the node ID to run with: over TLS, the one the certificate
// names, as other nodes know a node by it (a member's forwarded calls and
// Raft messages are taken only from the certificate of its ID). --id, if
// given, must agree.
func (sec *security) id(flag string) (string, error) {
	switch {
	case sec.nodeID == "":
		return flag, nil
	case flag == "":
		return sec.nodeID, nil
	case flag != sec.nodeID:
		return "", fmt.Errorf("refusing to start: --id is %q, but the certificate of --tls-cert names %q (its CN): "+
			"other nodes know a node by its certificate, and would refuse this one's Raft messages and forwarded calls. "+
			"Give the node's own certificate (rangealloc certs init --node %s=HOST), or --id %s", flag, sec.nodeID, flag, sec.nodeID)
	}
	return flag, nil
}

// scheme is the API's URL scheme.
func (sec *security) scheme() string {
	if sec.api != nil {
		return "https"
	}
	return "http"
}

// serveAPI serves h on ln, over TLS when the API has a certificate.
func (sec *security) serveAPI(srv *http.Server, ln net.Listener) error {
	if sec.api == nil {
		return srv.Serve(ln)
	}
	return srv.Serve(tls.NewListener(ln, sec.api))
}
