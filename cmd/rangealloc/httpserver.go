package main

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// httpLimits bound what one client can hold of a node's HTTP server (SPEC
// §10 "HTTP limits"). The timeouts and the header limit are fixed
// (defaultHTTPLimits); --max-connections sets MaxConnections.
//
// Where each limit acts on a connection:
//
//	accept queue ─► headers ────────────► body ─────────────► handler ─► idle ─► next request
//	MaxConnections  ReadHeaderTimeout     ReadTimeout, from    --request-  IdleTimeout
//	                MaxHeaderBytes        the first byte       -timeout
type httpLimits struct {
	// ReadHeaderTimeout bounds reading a request's line and headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, headers and body, from
	// its first byte. A JSON body is at most 1 MiB; a restore's handler
	// extends the deadline for its body (api.RestoreReadTimeout).
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that waits this long for
	// its next request, so idle clients give their slots back.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and headers (net/http answers
	// 431 beyond it).
	MaxHeaderBytes int
	// MaxConnections bounds the client connections open at once. Beyond
	// it the node accepts no more: new connections wait in the kernel's
	// accept queue until a served one closes, and served ones go on.
	MaxConnections int
}

// defaultHTTPLimits are the limits of `rangealloc server`. The timeouts
// leave a slow client ample time (1 MiB in 30 s is 35 KB/s) while a
// stalled one gives its connection back within a minute.
func defaultHTTPLimits() httpLimits {
	return httpLimits{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		MaxConnections:    1024,
	}
}

// validate checks the limits without changing them.
func (l httpLimits) validate() error {
	if l.MaxConnections < 1 {
		return fmt.Errorf("--max-connections %d: want at least 1", l.MaxConnections)
	}
	if l.ReadHeaderTimeout <= 0 || l.ReadTimeout <= 0 || l.IdleTimeout <= 0 || l.MaxHeaderBytes <= 0 {
		return fmt.Errorf("HTTP limits %+v: every timeout and MaxHeaderBytes must be positive", l)
	}
	return nil
}

// listenHTTP opens the API's listener at addr, accepting at most
// l.MaxConnections connections at a time.
func listenHTTP(addr string, l httpLimits) (net.Listener, error) {
	if err := l.validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http-addr: %w", err)
	}
	return newLimitListener(ln, l.MaxConnections), nil
}

// newHTTPServer returns the API's server with the limits' timeouts.
func newHTTPServer(h http.Handler, l httpLimits) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// limitListener accepts at most cap(slots) connections at a time. While
// all are open, Accept waits for one to close before it takes the next
// from the kernel, so clients beyond the limit wait in the accept queue
// and cost the process no file descriptor. (golang.org/x/net/netutil's
// LimitListener does the same; rangealloc does not depend on x/net.)
type limitListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection
	done      chan struct{} // closed by Close: a waiting Accept returns
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

// Close stops the listener; an Accept waiting for a slot returns.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back when closed, once however often it is
// closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
