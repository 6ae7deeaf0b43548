package transport

import (
	"errors"
	"io"
	"net"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/internal/testaddr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noLeak fails the test if goroutines running this package's code outlive
// it (test helpers blocked in the package count too).
func noLeak(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		var leaked []string
		ok := assert.Eventually(t, func() bool {
			leaked = packageGoroutines()
			return len(leaked) == 0
		}, 2*time.Second, 10*time.Millisecond, "goroutines in package transport outlive the test")
		if !ok {
			t.Log(strings.Join(leaked, "\n\n"))
		}
	})
}

// inPackage matches a stack frame in this package's non-test code.
var inPackage = regexp.MustCompile(`/transport/[a-z]+\.go:\d+`)

func packageGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if inPackage.MatchString(g) && !strings.Contains(g, "packageGoroutines") {
			out = append(out, g)
		}
	}
	return out
}

// dialRPC dials the forwarding RPC as a node without a cluster would.
func dialRPC(addr string, timeout time.Duration) (net.Conn, error) {
	return (&Mux{logger: hclog.NewNullLogger(), clusterID: func() string { return "" },
		dialRPC: func(a string, d time.Duration) (net.Conn, error) { return net.DialTimeout("tcp", a, d) }}).DialRPC(addr, timeout)
}

func listenT(t *testing.T, handshake time.Duration) *Mux {
	t.Helper()
	m, err := Listen("127.0.0.1:0", nil, Options{HandshakeTimeout: handshake})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

// acceptor accepts from l until it is closed (the test's cleanup closes
// it) and hands the connections over.
func acceptor(t *testing.T, l net.Listener) <-chan net.Conn {
	t.Helper()
	ch := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	return ch
}

// next returns the next connection from ch, or nil if none comes within d.
func next(t *testing.T, ch <-chan net.Conn, d time.Duration) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(d):
		return nil
	}
}

// assertClosedByPeer checks that the other end closed conn.
func assertClosedByPeer(t *testing.T, conn net.Conn) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(3*time.Second)))
	_, err := conn.Read(make([]byte, 1))
	assert.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET),
		"Read() = %v, want EOF or reset: the Mux closes the connection", err)
}

func TestMuxRoutesByFirstByte(t *testing.T) {
	noLeak(t)
	m := listenT(t, DefaultHandshakeTimeout)
	addr := m.Addr().String()
	raftConns, rpcConns := acceptor(t, m.Raft()), acceptor(t, m.RPC())
	tests := []struct {
		name       string
		dial       func() (net.Conn, error)
		want, skip <-chan net.Conn
	}{
		{"raft", func() (net.Conn, error) { return m.Raft().Dial(raft.ServerAddress(addr), time.Second) }, raftConns, rpcConns},
		{"rpc", func() (net.Conn, error) { return dialRPC(addr, time.Second) }, rpcConns, raftConns},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.dial()
			require.NoError(t, err)
			defer c.Close()
			got := next(t, tt.want, 2*time.Second)
			require.NotNil(t, got, "no connection on the %s listener", tt.name)
			_, err = c.Write([]byte(tt.name))
			require.NoError(t, err)
			buf := make([]byte, len(tt.name))
			_, err = io.ReadFull(got, buf)
			require.NoError(t, err)
			assert.Equal(t, tt.name, string(buf), "the protocol byte is consumed, the rest arrives")
			assert.Nil(t, next(t, tt.skip, 50*time.Millisecond), "the other protocol sees nothing")
		})
	}
}

func TestMuxRejects(t *testing.T) {
	noLeak(t)
	m := listenT(t, 100*time.Millisecond)
	raftConns, rpcConns := acceptor(t, m.Raft()), acceptor(t, m.RPC())
	tests := []struct {
		name string
		send []byte // nil: send nothing
	}{
		{"unknown protocol byte", []byte("GET / HTTP/1.1\r\n\r\n")},
		{"zero byte", []byte{0}},
		{"high byte", []byte{0xff, 'R'}},
		{"silent past the handshake timeout", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", m.Addr().String())
			require.NoError(t, err)
			defer conn.Close()
			if tt.send != nil {
				_, err = conn.Write(tt.send)
				require.NoError(t, err)
			}
			assertClosedByPeer(t, conn)
		})
	}
	t.Run("hang up before naming a protocol", func(t *testing.T) {
		conn, err := net.Dial("tcp", m.Addr().String())
		require.NoError(t, err)
		require.NoError(t, conn.Close())
	})
	assert.Nil(t, next(t, raftConns, 50*time.Millisecond), "no rejected connection reached Raft")
	assert.Nil(t, next(t, rpcConns, 50*time.Millisecond), "no rejected connection reached the RPC")

	c, err := dialRPC(m.Addr().String(), time.Second)
	require.NoError(t, err, "the Mux still serves after rejecting")
	defer c.Close()
	assert.NotNil(t, next(t, rpcConns, 2*time.Second))
}

func TestMuxClose(t *testing.T) {
	noLeak(t)
	m, err := Listen("127.0.0.1:0", nil, Options{})
	require.NoError(t, err)
	errs := make(chan error, 2)
	for _, l := range []net.Listener{m.Raft(), m.RPC()} {
		go func() {
			_, err := l.Accept()
			errs <- err
		}()
	}
	silent, err := net.Dial("tcp", m.Addr().String()) // still naming its protocol at Close
	require.NoError(t, err)
	defer silent.Close()
	require.Eventually(t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.naming) == 1
	}, 2*time.Second, 5*time.Millisecond)

	start := time.Now()
	require.NoError(t, m.Close())
	assert.Less(t, time.Since(start), time.Second, "Close does not wait out the handshake timeout")
	for range 2 {
		select {
		case err := <-errs:
			assert.ErrorIs(t, err, net.ErrClosed)
		case <-time.After(time.Second):
			t.Fatal("Accept still blocked after Close")
		}
	}
	assertClosedByPeer(t, silent)
	_, err = m.Raft().Accept()
	assert.ErrorIs(t, err, net.ErrClosed, "Accept after Close")
	assert.NoError(t, m.Close(), "Close twice")
	_, err = dialRPC(m.Addr().String(), time.Second)
	assert.Error(t, err, "nothing listens after Close")
}

func TestMuxCloseOneProtocol(t *testing.T) {
	noLeak(t)
	m := listenT(t, DefaultHandshakeTimeout)
	require.NoError(t, m.Raft().Close())
	_, err := m.Raft().Accept()
	require.ErrorIs(t, err, net.ErrClosed)

	rc, err := m.Raft().Dial(raft.ServerAddress(m.Addr().String()), time.Second)
	require.NoError(t, err)
	defer rc.Close()
	assertClosedByPeer(t, rc)

	c, err := dialRPC(m.Addr().String(), time.Second)
	require.NoError(t, err)
	defer c.Close()
	assert.NotNil(t, next(t, acceptor(t, m.RPC()), 2*time.Second), "the RPC protocol outlives Raft's listener")
}

// hostAddr is a net.Addr that is not a *net.TCPAddr.
type hostAddr string

func (a hostAddr) Network() string { return "tcp" }
func (a hostAddr) String() string  { return string(a) }

func TestListenAdvertise(t *testing.T) {
	tests := []struct {
		name      string
		bind      string
		advertise net.Addr
		want      string // "" : any 127.0.0.1 port; else exact
		wantErr   error
	}{
		{"nil advertises the listener", "127.0.0.1:0", nil, "", nil},
		{"port 0 takes the bound port", "127.0.0.1:0", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, "", nil},
		{"explicit", "127.0.0.1:0", &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 7000}, "10.1.2.3:7000", nil},
		{"host name", "127.0.0.1:0", hostAddr("node1.internal:7000"), "node1.internal:7000", nil},
		{"0.0.0.0", "127.0.0.1:0", &net.TCPAddr{IP: net.IPv4zero, Port: 7000}, "", ErrUnspecifiedAdvertise},
		{"::", "127.0.0.1:0", &net.TCPAddr{IP: net.IPv6unspecified, Port: 7000}, "", ErrUnspecifiedAdvertise},
		{"no IP", "127.0.0.1:0", &net.TCPAddr{Port: 7000}, "", ErrUnspecifiedAdvertise},
		{"bound to 0.0.0.0 without advertise", "0.0.0.0:0", nil, "", ErrUnspecifiedAdvertise},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Listen(tt.bind, tt.advertise, Options{})
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			defer m.Close()
			got := m.Raft().Addr().String()
			assert.Equal(t, got, m.RPC().Addr().String())
			if tt.want != "" {
				assert.Equal(t, tt.want, got)
				return
			}
			host, port, err := net.SplitHostPort(got)
			require.NoError(t, err)
			assert.Equal(t, "127.0.0.1", host)
			assert.NotEqual(t, "0", port, "the bound port is advertised")
		})
	}
}

func TestDialFails(t *testing.T) {
	// A claimed port below the ephemeral range, where nothing listens: a
	// released ":0" port could be taken by any connection in between.
	addr := testaddr.Loopback(t)
	_, err := dialRPC(addr, time.Second)
	assert.Error(t, err, "DialRPC(%q) to nothing", addr)
}
