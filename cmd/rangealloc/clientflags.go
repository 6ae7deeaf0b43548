package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/spf13/pflag"
)

// globals are the flags every client command shares.
type globals struct {
	addr   string
	output string
	// TLS and token of the client commands (and of a server's --join).
	cacert, cert, key, token string
	// hc is the client commands' HTTP client, made once the flags are
	// parsed (newRoot), so a bad TLS file is named before anything is sent.
	hc *http.Client
}

func (g *globals) register(fl *pflag.FlagSet) {
	fl.StringVar(&g.addr, "addr", "http://127.0.0.1:7080", "HTTP address of any node (https://… for a node with --api-tls-cert)")
	fl.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	fl.StringVar(&g.cacert, "cacert", "", "CA (PEM) to trust for https:// addresses (default: the system's roots)")
	fl.StringVar(&g.cert, "cert", "", "client certificate (PEM), for a node with --api-client-ca")
	fl.StringVar(&g.key, "key", "", "the key of --cert (PEM)")
	fl.StringVar(&g.token, "token", "", "API token, sent as a bearer token (rangealloc token create); prefer env RANGEALLOC_TOKEN, as a command line is visible to other local users")
}

// httpClient returns an HTTP client for the API with the TLS flags, or
// with the defaults when none is given. fallback names node TLS files
// (a server's --tls-*) to use where the client flags are empty.
func (g *globals) httpClient(timeout time.Duration, maxIdle int, fallback certs.Paths) (*http.Client, error) {
	p := certs.Paths{Cert: g.cert, Key: g.key, CA: g.cacert}
	if p.CA == "" {
		p.CA = fallback.CA
	}
	if p.Cert == "" && p.Key == "" {
		p.Cert, p.Key = fallback.Cert, fallback.Key
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 0, max(maxIdle, 2) // bench: one kept connection per client
	if p != (certs.Paths{}) {
		f, err := certs.Load(p, hclog.NewNullLogger())
		if err != nil {
			return nil, fmt.Errorf("--cacert/--cert/--key: %w", err)
		}
		cfg, err := f.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("--cacert/--cert/--key: %w", err)
		}
		// Each connection checks the server's certificate against the
		// host it dials, an IP address too (certs.ForHost).
		tr.DialTLSContext = certs.DialTLS(cfg)
	}
	return &http.Client{Timeout: timeout, Transport: tr}, nil
}

// clientOf returns a client of the node at addr with the global flags.
func (g *globals) clientOf(addr string, hc *http.Client) *client.Client {
	return client.New(addr, hc).WithToken(g.token)
}

// client returns a client of --addr.
func (g *globals) client() *client.Client { return g.clientOf(g.addr, g.hc) }
