package certs_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/stretchr/testify/require"
)

// outcome is what each side of one connection saw.
type outcome struct {
	server, client       tls.ConnectionState
	serverErr, clientErr error
}

// exchange makes one TLS connection over TCP loopback, the server side
// with srv and the client side with cli (whose ServerName the caller set).
// After the handshake the server sends a byte that the client reads: in
// TLS 1.3 the client's handshake returns before the server has checked
// the client's certificate, and a refusal reaches the client as an alert
// on that read.
func exchange(t *testing.T, srv, cli *tls.Config) outcome {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var o outcome
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			o.serverErr = err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		s := tls.Server(c, srv)
		if o.serverErr = s.Handshake(); o.serverErr != nil {
			return
		}
		o.server = s.ConnectionState()
		if _, o.serverErr = s.Write([]byte{1}); o.serverErr != nil {
			return
		}
		_, _ = io.Copy(io.Discard, s) // until the client closes
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, cli)
	if o.clientErr = tc.Handshake(); o.clientErr == nil {
		o.client = tc.ConnectionState()
		_, o.clientErr = tc.Read(make([]byte, 1))
	}
	c.Close()
	<-done
	return o
}

// load loads p, failing the test on an error.
func load(t *testing.T, p certs.Paths) *certs.Files {
	t.Helper()
	f, err := certs.Load(p, nil)
	require.NoError(t, err)
	return f
}

func serverConfig(t *testing.T, p certs.Paths, requireClientCert bool) *tls.Config {
	t.Helper()
	cfg, err := load(t, p).ServerConfig(requireClientCert)
	require.NoError(t, err)
	return cfg
}

// clientConfig is ClientConfig for p, dialing 127.0.0.1.
func clientConfig(t *testing.T, p certs.Paths) *tls.Config {
	t.Helper()
	cfg, err := load(t, p).ClientConfig()
	require.NoError(t, err)
	return certs.ForHost(cfg, "127.0.0.1")
}

// serial returns the serial number of the first certificate of a PEM file.
func serial(t *testing.T, certPEM []byte) *big.Int {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	require.NotNil(t, b)
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return c.SerialNumber
}

// writeInPlace rewrites path in place (truncate and write, same inode).
func writeInPlace(t *testing.T, path string, data []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, data, 0o600))
}

// writeByRename replaces path by renaming a new file over it.
func writeByRename(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	require.NoError(t, os.WriteFile(tmp, data, 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// lockedBuffer is a log destination safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func bufferLogger(buf *lockedBuffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Debug})
}
