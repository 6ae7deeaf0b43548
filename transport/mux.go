package transport

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Protocol bytes: the first byte a dialer writes on a connection to a Mux.
const (
	// ProtoRaft names a connection of raft.NetworkTransport.
	ProtoRaft byte = 'R'
	// ProtoRPC names a connection of the node's forwarding RPC.
	ProtoRPC byte = 'F'
)

// DefaultHandshakeTimeout bounds how long an accepted connection may take
// to write its protocol byte before the Mux closes it.
const DefaultHandshakeTimeout = 5 * time.Second

// Accept-loop backoff after a failed Accept (for example EMFILE), doubling
// from the first to the last, as raft's NetworkTransport does.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// Mux accepts TCP connections on one address and hands each to the
// protocol named by its first byte: ProtoRaft to Raft(), ProtoRPC to RPC().
// A connection that names no known protocol within the handshake timeout is
// closed and logged.
type Mux struct {
	ln        net.Listener
	advertise net.Addr
	logger    hclog.Logger
	handshake time.Duration
	raft      *logical
	rpc       *logical

	closed    chan struct{} // closed by Close: stops the accept loop and every route
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // the accept loop and every route goroutine

	mu sync.Mutex
	// mu guards the following
	closing bool                  // set by Close; no connection is registered after it
	naming  map[net.Conn]struct{} // accepted connections still naming their protocol
}

// Listen listens for TCP on bindAddr. advertise is the address other nodes
// dial to reach this one: nil means the listener's own address, and a
// *net.TCPAddr with port 0 takes the port the listener got. An advertise
// address without a specific IP (0.0.0.0, ::, empty) cannot be dialed and
// fails with ErrUnspecifiedAdvertise; so does binding to one with a nil
// advertise. A nil logger discards.
func Listen(bindAddr string, advertise net.Addr, logger hclog.Logger) (*Mux, error) {
	return listen(bindAddr, advertise, logger, DefaultHandshakeTimeout)
}

func listen(bindAddr string, advertise net.Addr, logger hclog.Logger, handshake time.Duration) (*Mux, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	ln, err := net.Listen("tcp", bindAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen on %s: %w", bindAddr, err)
	}
	adv, err := advertised(ln.Addr().(*net.TCPAddr), advertise)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	m := &Mux{
		ln:        ln,
		advertise: adv,
		logger:    logger.Named("mux"),
		handshake: handshake,
		closed:    make(chan struct{}),
		naming:    map[net.Conn]struct{}{},
	}
	m.raft = newLogical(adv)
	m.rpc = newLogical(adv)
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// advertised returns the address to advertise for a listener bound at
// bound, or ErrUnspecifiedAdvertise.
func advertised(bound *net.TCPAddr, advertise net.Addr) (net.Addr, error) {
	switch ta, ok := advertise.(*net.TCPAddr); {
	case advertise == nil:
		advertise = bound
	case ok && ta.Port == 0:
		advertise = &net.TCPAddr{IP: ta.IP, Port: bound.Port, Zone: ta.Zone}
	}
	host, _, err := net.SplitHostPort(advertise.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrUnspecifiedAdvertise, advertise.String(), err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return nil, fmt.Errorf("%w: %s cannot be dialed; bind to a specific IP or give an advertise address",
			ErrUnspecifiedAdvertise, advertise)
	}
	return advertise, nil
}

// acceptLoop accepts until Close, starting one route per connection.
func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	var backoff time.Duration
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			if m.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
			m.logger.Error("accept failed; retrying", "error", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-m.closed:
				return
			}
		}
		backoff = 0
		if !m.register(conn) {
			_ = conn.Close()
			return
		}
		m.wg.Add(1)
		go m.route(conn)
	}
}

func (m *Mux) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}

// register notes conn as naming its protocol, so Close can cut it short;
// false once the Mux is closing.
func (m *Mux) register(conn net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return false
	}
	m.naming[conn] = struct{}{}
	return true
}

func (m *Mux) unregister(conn net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.naming, conn)
}

// route reads the protocol byte of conn and hands conn to that protocol's
// listener, or closes it.
func (m *Mux) route(conn net.Conn) {
	defer m.wg.Done()
	proto, err := m.readProto(conn)
	m.unregister(conn)
	if err != nil {
		m.reject(conn, err)
		return
	}
	var l *logical
	switch proto {
	case ProtoRaft:
		l = m.raft
	case ProtoRPC:
		l = m.rpc
	default:
		m.logger.Warn("closing connection with an unknown protocol byte",
			"remote", conn.RemoteAddr(), "byte", fmt.Sprintf("%#02x", proto))
		_ = conn.Close()
		return
	}
	select {
	case l.ch <- conn:
	case <-l.closed:
		m.logger.Debug("closing connection for a closed listener", "remote", conn.RemoteAddr(), "protocol", string(proto))
		_ = conn.Close()
	case <-m.closed:
		_ = conn.Close()
	}
}

func (m *Mux) readProto(conn net.Conn) (byte, error) {
	var b [1]byte
	if err := conn.SetReadDeadline(time.Now().Add(m.handshake)); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return 0, err
	}
	return b[0], conn.SetReadDeadline(time.Time{})
}

// reject closes a connection that named no protocol, logging why.
func (m *Mux) reject(conn net.Conn, err error) {
	_ = conn.Close()
	switch {
	case m.isClosed():
	case errors.Is(err, os.ErrDeadlineExceeded):
		m.logger.Warn("closing connection that named no protocol in time",
			"remote", conn.RemoteAddr(), "timeout", m.handshake)
	default: // closed by the peer: port scanners, health checks
		m.logger.Debug("connection closed before naming its protocol", "remote", conn.RemoteAddr(), "error", err)
	}
}

// Raft returns the stream layer for raft.NetworkTransport: Accept yields
// the connections that named ProtoRaft, Dial writes ProtoRaft, Addr is the
// advertised address. Its Close stops Raft's listener only.
func (m *Mux) Raft() raft.StreamLayer { return &raftLayer{logical: m.raft} }

// RPC returns the listener of the node's forwarding RPC: the connections
// that named ProtoRPC. Its Close stops this listener only.
func (m *Mux) RPC() net.Listener { return m.rpc }

// Addr returns the advertised address.
func (m *Mux) Addr() net.Addr { return m.advertise }

// Close stops accepting, closes the connections still naming a protocol and
// both logical listeners (their Accept returns an error wrapping
// net.ErrClosed), and waits for the Mux's goroutines. Connections already
// handed to a protocol belong to it and stay open. Close is idempotent.
func (m *Mux) Close() error {
	m.closeOnce.Do(func() {
		close(m.closed)
		m.closeErr = m.ln.Close()
		m.mu.Lock()
		m.closing = true
		for conn := range m.naming {
			_ = conn.Close()
		}
		m.mu.Unlock()
		m.raft.close()
		m.rpc.close()
		m.wg.Wait()
	})
	return m.closeErr
}
