package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/certs"
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
// protocol named by its first byte: ProtoRaft to Raft(), ProtoRPC to RPC(),
// once the connection has passed the handshake (handshake.go). A
// connection that names no known protocol, or fails the handshake, within
// the handshake timeout is closed and logged. Raft connections are closed
// too until OpenRaft, if the Mux was opened with RaftClosed.
type Mux struct {
	ln        net.Listener
	advertise net.Addr
	logger    hclog.Logger
	handshake time.Duration
	clusterID func() string
	dialRPC   func(addr string, timeout time.Duration) (net.Conn, error)
	serverTLS *tls.Config // nil: plaintext
	clientTLS *tls.Config
	allowRaft func(id string) bool
	raftOpen  atomic.Bool
	raft      *logical
	rpc       *logical
	out       raftOut // the Raft connections this node dialed (HoldRaft)

	closed    chan struct{} // closed by Close: stops the accept loop and every route
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // the accept loop and every route goroutine

	mu sync.Mutex
	// mu guards the following
	closing bool                  // set by Close; no connection is registered after it
	naming  map[net.Conn]struct{} // accepted connections still naming their protocol
}

// Options configure a Mux; the zero value is usable.
type Options struct {
	// Logger receives the Mux's logs; nil discards.
	Logger hclog.Logger
	// HandshakeTimeout bounds the protocol byte and the handshake, of an
	// accepted connection and of a dial. Zero: DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// ClusterID returns the ID of this node's cluster, or "" while it has
	// none; the handshake carries it. Nil: always "".
	ClusterID func() string
	// DialRPC opens the TCP connection of a forwarding-RPC dial, on which
	// the Mux then writes the protocol byte and the handshake. Nil:
	// net.DialTimeout. Tests inject faults with it.
	DialRPC func(addr string, timeout time.Duration) (net.Conn, error)
	// RaftClosed makes the Mux close Raft connections until OpenRaft: a
	// node that has not yet joined or founded a cluster must not take part
	// in one.
	RaftClosed bool
	// ServerTLS and ClientTLS, given together, make every connection TLS
	// from its first byte: accepted connections handshake with ServerTLS
	// (which should require a client certificate), dials with ClientTLS
	// checking the server's certificate against the dialed host
	// (certs.ForHost). The protocol byte and the cluster-ID handshake
	// travel inside the TLS session. Nil: plain TCP.
	ServerTLS, ClientTLS *tls.Config
	// AllowRaftPeer, over TLS, decides whether the node a Raft
	// connection's certificate names (its CN) may speak Raft here: asked
	// when the connection is accepted, and again at most every
	// RaftPeerRecheck while it is read; false closes it. Nil: any node
	// of the CA.
	AllowRaftPeer func(id string) bool
}

// RaftPeerRecheck is how often an accepted Raft connection's peer is asked
// about again (Options.AllowRaftPeer), so a member removed from the
// configuration loses the connections it had.
const RaftPeerRecheck = time.Second

// Listen listens for TCP on bindAddr. advertise is the address other nodes
// dial to reach this one: nil means the listener's own address, and a
// *net.TCPAddr with port 0 takes the port the listener got. An advertise
// address without a specific IP (0.0.0.0, ::, empty) cannot be dialed and
// fails with ErrUnspecifiedAdvertise; so does binding to one with a nil
// advertise.
func Listen(bindAddr string, advertise net.Addr, opts Options) (*Mux, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.ClusterID == nil {
		opts.ClusterID = func() string { return "" }
	}
	if opts.DialRPC == nil {
		opts.DialRPC = func(addr string, timeout time.Duration) (net.Conn, error) {
			return net.DialTimeout("tcp", addr, timeout)
		}
	}
	if (opts.ServerTLS == nil) != (opts.ClientTLS == nil) {
		return nil, errors.New("transport: ServerTLS and ClientTLS go together: a node that accepts TLS must dial TLS")
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
		logger:    opts.Logger.Named("mux"),
		handshake: opts.HandshakeTimeout,
		clusterID: opts.ClusterID,
		dialRPC:   opts.DialRPC,
		serverTLS: opts.ServerTLS,
		clientTLS: opts.ClientTLS,
		allowRaft: opts.AllowRaftPeer,
		closed:    make(chan struct{}),
		naming:    map[net.Conn]struct{}{},
	}
	m.raftOpen.Store(!opts.RaftClosed)
	m.raft = newLogical(adv)
	m.rpc = newLogical(adv)
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

// OpenRaft lets Raft connections through (see Options.RaftClosed).
func (m *Mux) OpenRaft() { m.raftOpen.Store(true) }

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
	var lastFull time.Time
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
		switch m.register(conn) {
		case registerClosing:
			_ = conn.Close()
			return
		case registerFull:
			_ = conn.Close()
			if now := time.Now(); now.Sub(lastFull) > 10*time.Second {
				lastFull = now
				m.logger.Warn("closing new connections: too many are still in their handshake (a flood?)",
					"pending", MaxPendingConns, "remote", conn.RemoteAddr())
			}
			continue
		}
		m.wg.Add(1)
		go m.route(conn)
	}
}

// MaxPendingConns bounds the accepted connections still in their TLS
// handshake or naming their protocol; beyond it new ones are closed at
// once. Each costs a goroutine and, with TLS, a record buffer of up to
// 16 KiB for as long as the handshake timeout: without the bound, a host
// with no certificate opening connections by the thousand held memory and
// file descriptors until the process had none left. A cluster's own nodes
// need a few connections each, and keep them.
const MaxPendingConns = 256

// The answers of register.
const (
	registered = iota
	registerClosing
	registerFull
)

func (m *Mux) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}

// register notes conn as naming its protocol, so Close can cut it short;
// registerClosing once the Mux is closing, registerFull when
// MaxPendingConns are naming theirs.
func (m *Mux) register(conn net.Conn) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closing:
		return registerClosing
	case len(m.naming) >= MaxPendingConns:
		return registerFull
	}
	m.naming[conn] = struct{}{}
	return registered
}

func (m *Mux) unregister(conn net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.naming, conn)
}

// route runs the TLS handshake (if the Mux has TLS), reads the protocol
// byte of conn, runs the cluster handshake, and hands conn to that
// protocol's listener, or closes it.
func (m *Mux) route(raw net.Conn) {
	defer m.wg.Done()
	deadline := time.Now().Add(m.handshake)
	conn, err := m.serverHandshake(raw, deadline)
	if err != nil {
		m.unregister(raw)
		m.reject(raw, fmt.Errorf("TLS: %w", err))
		return
	}
	proto, err := m.readProto(conn, deadline)
	var l *logical
	switch {
	case err != nil:
	case proto == ProtoRaft:
		l = m.raft
		if !m.raftOpen.Load() {
			m.unregister(raw)
			m.logger.Debug("closing a Raft connection: this node has not joined or founded a cluster yet", "remote", conn.RemoteAddr())
			_ = conn.Close()
			return
		}
	case proto == ProtoRPC:
		l = m.rpc
	default:
		m.unregister(raw)
		m.logger.Warn("closing connection with an unknown protocol byte",
			"remote", conn.RemoteAddr(), "byte", fmt.Sprintf("%#02x", proto))
		_ = conn.Close()
		return
	}
	if err == nil {
		err = acceptHello(conn, deadline, m.clusterID())
	}
	m.unregister(raw)
	if err != nil {
		m.reject(conn, err)
		return
	}
	if l == m.raft && m.serverTLS != nil && m.allowRaft != nil {
		id, _ := PeerID(conn)
		if !m.allowRaft(id) {
			m.logger.Warn("closing a Raft connection from a node that is not a member of the configuration",
				"remote", conn.RemoteAddr(), "peer", id)
			_ = conn.Close()
			return
		}
		conn = &memberConn{Conn: conn, id: id, allow: m.allowRaft, logger: m.logger, checked: time.Now()}
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

// serverHandshake runs the server side of TLS on an accepted connection,
// within deadline; without TLS it returns raw.
func (m *Mux) serverHandshake(raw net.Conn, deadline time.Time) (net.Conn, error) {
	if m.serverTLS == nil {
		return raw, nil
	}
	tc := tls.Server(raw, m.serverTLS)
	if err := tc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	return tc, nil
}

// clientHandshake runs the client side of TLS on a dialed connection,
// within deadline (zero: none), checking the server's certificate names
// the dialed host; without TLS it returns raw.
func (m *Mux) clientHandshake(raw net.Conn, addr string, deadline time.Time) (net.Conn, error) {
	if m.clientTLS == nil {
		return raw, nil
	}
	tc := tls.Client(raw, certs.ForHost(m.clientTLS, addr))
	if err := tc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("%w with %s: TLS: %w", ErrHandshake, addr, err)
	}
	return tc, nil
}

func (m *Mux) readProto(conn net.Conn, deadline time.Time) (byte, error) {
	var b [1]byte
	if err := conn.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return 0, err
	}
	return b[0], nil
}

// reject closes a connection that named no protocol or failed the
// handshake, logging why.
func (m *Mux) reject(conn net.Conn, err error) {
	_ = conn.Close()
	var ne net.Error
	switch {
	case m.isClosed():
	case errors.Is(err, os.ErrDeadlineExceeded):
		m.logger.Warn("closing connection that did not name its protocol and shake hands in time",
			"remote", conn.RemoteAddr(), "timeout", m.handshake)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &ne):
		// closed by the peer: port scanners, health checks
		m.logger.Debug("connection closed before its handshake ended", "remote", conn.RemoteAddr(), "error", err)
	default:
		m.logger.Warn("closing connection: handshake refused", "remote", conn.RemoteAddr(), "reason", err)
	}
}

// Raft returns the stream layer for raft.NetworkTransport: Accept yields
// the connections that named ProtoRaft and passed the handshake, Dial
// writes ProtoRaft and shakes hands, Addr is the advertised address. Its
// Close stops Raft's listener only.
func (m *Mux) Raft() raft.StreamLayer { return &raftLayer{logical: m.raft, m: m} }

// RPC returns the listener of the node's forwarding RPC: the connections
// that named ProtoRPC and passed the handshake. Its Close stops this
// listener only.
func (m *Mux) RPC() net.Listener { return m.rpc }

// DialRPC connects to the forwarding RPC of the Mux at addr: it dials
// (Options.DialRPC), writes ProtoRPC and shakes hands, all within timeout
// (zero: no timeout).
func (m *Mux) DialRPC(addr string, timeout time.Duration) (net.Conn, error) {
	return m.dial(addr, timeout, ProtoRPC, m.dialRPC, m.clusterID())
}

// DialProbe is DialRPC for a connection that only asks a node what it is:
// it names no cluster in the handshake, so it reaches a node of any
// cluster (a leader must learn that a node asked to join belongs to
// another one).
func (m *Mux) DialProbe(addr string, timeout time.Duration) (net.Conn, error) {
	return m.dial(addr, timeout, ProtoRPC, m.dialRPC, "")
}

func (m *Mux) dial(addr string, timeout time.Duration, proto byte, dial func(string, time.Duration) (net.Conn, error), clusterID string) (net.Conn, error) {
	raw, err := dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	conn, err := m.clientHandshake(raw, addr, deadline)
	if err != nil {
		_ = raw.Close()
		m.logger.Warn("closing connection: TLS handshake failed", "remote", addr, "error", err)
		return nil, err
	}
	if err := conn.SetWriteDeadline(deadline); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if _, err := conn.Write([]byte{proto}); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("transport: name protocol %q to %s: %w", proto, addr, err)
	}
	if err := dialHello(conn, deadline, clusterID); err != nil {
		_ = conn.Close()
		if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
			m.logger.Warn("closing connection: handshake refused", "remote", addr, "reason", err)
		}
		return nil, fmt.Errorf("%w with %s: %w", ErrHandshake, addr, err)
	}
	return conn, nil
}

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
