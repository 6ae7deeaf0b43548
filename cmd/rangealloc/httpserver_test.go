package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/certs/certstest"
	"github.com/rangealloc/rangealloc/internal/testaddr"
	"github.com/rangealloc/rangealloc/node"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testLimits are small enough for a test to run into each of them.
func testLimits() httpLimits {
	return httpLimits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond,
		IdleTimeout: 300 * time.Millisecond, MaxHeaderBytes: 1 << 10, MaxConnections: 2}
}

// serveLimited serves h on a loopback port with the limits and returns the
// address and a count of the connections the server took.
func serveLimited(t *testing.T, l httpLimits, h http.Handler) (string, *atomic.Int64) {
	t.Helper()
	ln, err := listenHTTP("127.0.0.1:0", l)
	require.NoError(t, err)
	srv := newHTTPServer(h, l)
	var open atomic.Int64
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-done, http.ErrServerClosed, "Serve returns once closed, though an Accept waited for a slot")
	})
	return ln.Addr().String(), &open
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if _, err := io.ReadAll(r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	_, _ = io.WriteString(w, "ok")
})

// rawConn is a client connection that sends requests by hand.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// get sends a keep-alive GET and returns the answer's status, or an error
// when none arrives within wait.
func (c *rawConn) get(wait time.Duration) (int, error) {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, err
	}
	return c.status(wait)
}

func (c *rawConn) status(wait time.Duration) (int, error) {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestMaxConnections: beyond MaxConnections, connections wait unaccepted
// while the served ones go on, and are served once a slot frees.
func TestMaxConnections(t *testing.T) {
	l := testLimits()
	l.IdleTimeout = time.Hour // only closing frees a slot here
	addr, open := serveLimited(t, l, okHandler)
	served := []*rawConn{dialRaw(t, addr), dialRaw(t, addr)}
	for _, c := range served {
		status, err := c.get(5 * time.Second)
		require.NoError(t, err)
		require.Equal(t, 200, status)
	}
	waiting := dialRaw(t, addr) // the kernel completes the handshake; the node does not accept
	_, err := waiting.get(300 * time.Millisecond)
	require.Error(t, err, "a third connection waits while two are open")
	assert.EqualValues(t, 2, open.Load(), "the server holds two connections")
	for i := 0; i < 3; i++ {
		status, err := served[0].get(5 * time.Second)
		require.NoError(t, err, "served connections go on")
		assert.Equal(t, 200, status)
	}
	served[1].Close()
	status, err := waiting.status(5 * time.Second)
	require.NoError(t, err, "the waiting connection is served once a slot frees")
	assert.Equal(t, 200, status)
	// net/http closes a connection (which frees its slot) before it runs
	// the StateClosed hook, so the waiting connection can be counted
	// before the closed one is uncounted: the count settles at two.
	assert.Eventually(t, func() bool { return open.Load() == 2 }, 5*time.Second, time.Millisecond,
		"the server holds two connections once the closed one is gone")
}

// TestIdleTimeoutFreesSlots: idle keep-alive connections do not hold the
// node's slots forever.
func TestIdleTimeoutFreesSlots(t *testing.T) {
	l := testLimits()
	addr, _ := serveLimited(t, l, okHandler)
	for i := 0; i < l.MaxConnections; i++ {
		status, err := dialRaw(t, addr).get(5 * time.Second)
		require.NoError(t, err)
		require.Equal(t, 200, status) // and the connection stays open, idle
	}
	start := time.Now()
	status, err := dialRaw(t, addr).get(5 * time.Second)
	require.NoError(t, err, "served once the idle connections time out")
	assert.Equal(t, 200, status)
	assert.Less(t, time.Since(start), 3*time.Second)
}

// TestRequestLimits: each limit on a single request ends the request that
// runs into it.
func TestRequestLimits(t *testing.T) {
	l := testLimits()
	addr, _ := serveLimited(t, l, okHandler)
	cases := []struct {
		name string
		send func(c *rawConn) error
		// status is the answer expected; 0: the server closes the
		// connection without one.
		status int
	}{
		{"headers within the limit", func(c *rawConn) error {
			_, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", strings.Repeat("p", 512))
			return err
		}, 200},
		{"headers over MaxHeaderBytes", func(c *rawConn) error {
			_, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n", strings.Repeat("p", 8<<10))
			return err
		}, http.StatusRequestHeaderFieldsTooLarge},
		{"headers that stall", func(c *rawConn) error {
			_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n")
			return err
		}, 0},
		{"a body that stalls", func(c *rawConn) error {
			_, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12")
			return err
		}, 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, addr)
			start := time.Now()
			require.NoError(t, tc.send(c))
			status, err := c.status(5 * time.Second)
			if tc.status == 0 {
				var ne net.Error
				require.Error(t, err)
				require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server closes the connection: %v", err)
			} else {
				require.NoError(t, err)
				assert.Equal(t, tc.status, status)
			}
			assert.Less(t, time.Since(start), 3*time.Second, "within the limit, not the client's patience")
		})
	}
}

func TestHTTPLimitsValidate(t *testing.T) {
	require.NoError(t, defaultHTTPLimits().validate())
	l := defaultHTTPLimits()
	l.MaxConnections = 0
	require.ErrorContains(t, l.validate(), "--max-connections 0")
	_, err := listenHTTP("127.0.0.1:0", l)
	require.Error(t, err, "nothing is opened with a bad limit")
}

// slowReader hands out its bytes in pieces, pausing before each.
type slowReader struct {
	data  []byte
	piece int
	pause time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	time.Sleep(s.pause)
	n := copy(p[:min(len(p), s.piece)], s.data)
	s.data = s.data[n:]
	return n, nil
}

// TestRestoreOutlivesReadTimeout: a restore's upload may take longer than
// the read timeout sized for JSON bodies; the restore handler extends it.
func TestRestoreOutlivesReadTimeout(t *testing.T) {
	cfg := node.DefaultConfig()
	cfg.RaftAddr = testaddr.Loopback(t)
	cfg.DataDir = t.TempDir()
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 300*time.Millisecond, 300*time.Millisecond, 150*time.Millisecond
	cfg.Pools = []node.PoolSpec{{Name: "nodeport", Range: "30000-32767"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Open(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	require.NoError(t, n.WaitForLeader(ctx))
	require.Eventually(t, func() bool {
		ps, err := n.Pools(ctx, node.Linearizable)
		return err == nil && len(ps) == 1
	}, 10*time.Second, 10*time.Millisecond)
	var backup bytes.Buffer
	require.NoError(t, n.Backup(ctx, &backup))

	l := testLimits()
	addr, _ := serveLimited(t, l, api.NewServer(n, api.Options{}))
	body := &slowReader{data: backup.Bytes(), piece: max(1, backup.Len()/8), pause: l.ReadTimeout / 4}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/snapshot/restore", body)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/octet-stream")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", msg)
	assert.Greater(t, time.Since(start), l.ReadTimeout, "the upload took longer than the read timeout")
}

// TestTLSHandshakeStallsWithinLimits: over HTTPS, a client that stops
// partway through its TLS handshake is closed within the header timeout,
// like one that stalls in its headers, and frees its connection slot.
func TestTLSHandshakeStallsWithinLimits(t *testing.T) {
	b := certstest.New(t, "n1")
	f, err := certs.Load(b.Node["n1"], hclog.NewNullLogger())
	require.NoError(t, err)
	sec := &security{}
	sec.api, err = f.ServerConfig(false)
	require.NoError(t, err)
	l := testLimits()
	ln, err := listenHTTP("127.0.0.1:0", l)
	require.NoError(t, err)
	srv := newHTTPServer(okHandler, l)
	done := make(chan error, 1)
	go func() { done <- sec.serveAPI(srv, ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-done, http.ErrServerClosed)
	})
	for _, sent := range [][]byte{nil, {0x16, 0x03, 0x01, 0x02, 0x00}} { // nothing; a record header promising 512 bytes
		c := dialRaw(t, ln.Addr().String())
		_, err := c.Write(sent)
		require.NoError(t, err)
		start := time.Now()
		_, err = c.status(5 * time.Second)
		var ne net.Error
		require.Error(t, err)
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server closes the connection: %v", err)
		assert.Less(t, time.Since(start), 3*time.Second, "within the header timeout, not the client's patience")
	}
}
