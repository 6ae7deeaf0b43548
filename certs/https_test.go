package certs_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/certs/certstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHTTPS serves HTTPS with ServerConfig through net/http, as the API
// does, and calls it with each client config.
func TestHTTPS(t *testing.T) {
	b := certstest.New(t, "n1", "n2")
	srvCfg := serverConfig(t, b.Node["n1"], true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{
		TLSConfig: srvCfg,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s", r.Proto, certs.PeerID(*r.TLS))
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // the refusals below are expected
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "https://" + ln.Addr().String() + "/"

	cli := load(t, b.Node["n2"])
	dynamic, err := cli.ClientConfig()
	require.NoError(t, err)
	get := func(tr *http.Transport) (string, error) {
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}

	body, err := get(&http.Transport{TLSClientConfig: cli.StaticClientConfig(), ForceAttemptHTTP2: true})
	require.NoError(t, err)
	assert.Equal(t, "HTTP/2.0 n2", body, "HTTP/2, and the handler knows the client")

	body, err = get(&http.Transport{TLSClientConfig: cli.StaticClientConfig(), TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}})
	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.1 n2", body)

	// ClientConfig, which follows rotation, dials an IP address through ForHost.
	body, err = get(&http.Transport{DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&tls.Dialer{Config: certs.ForHost(dynamic, addr)}).DialContext(ctx, network, addr)
	}})
	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.1 n2", body)

	// Without ForHost, the Transport's Clone names an IP address, which the
	// check cannot see: refused, not accepted unchecked.
	_, err = get(&http.Transport{TLSClientConfig: dynamic})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certs.ForHost")

	// A static config is for another CA's server as strict as ClientConfig.
	_, err = get(&http.Transport{TLSClientConfig: load(t, certstest.New(t, "x").Node["x"]).StaticClientConfig()})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unknown authority")
}
