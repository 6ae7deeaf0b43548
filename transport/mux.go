package transport

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Protocol bytes: the first byte a dialer writes on a connection.
const (
	ProtoRaft byte = 'R'
	ProtoRPC  byte = 'F'
)

// handshakeTimeout bounds how long an accepted connection may take to name
// its protocol.
const handshakeTimeout = 5 * time.Second

// Mux accepts TCP connections on one address and hands each to the
// protocol named by its first byte.
type Mux struct {
	ln        net.Listener
	advertise net.Addr
	logger    hclog.Logger
	raft      *subListener
	rpc       *subListener
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Listen listens on bindAddr. advertise is the address other nodes dial
// (nil: the listener's own); an unspecified IP (0.0.0.0, ::) cannot be
// dialed and is refused.
func Listen(bindAddr string, advertise net.Addr, logger hclog.Logger) (*Mux, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	ln, err := net.Listen("tcp", bindAddr)
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	switch ta, ok := advertise.(*net.TCPAddr); {
	case advertise == nil:
		advertise = ln.Addr()
	case ok && ta.Port == 0: // bound to port 0: advertise the port it got
		advertise = &net.TCPAddr{IP: ta.IP, Port: port, Zone: ta.Zone}
	}
	if ta, ok := advertise.(*net.TCPAddr); !ok || ta.IP == nil || ta.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("advertise address %s is not dialable: give a specific IP", advertise)
	}
	m := &Mux{ln: ln, advertise: advertise, logger: logger.Named("mux"), closed: make(chan struct{})}
	m.raft = &subListener{m: m, ch: make(chan net.Conn, 16)}
	m.rpc = &subListener{m: m, ch: make(chan net.Conn, 16)}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	for {
		conn, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.logger.Error("accept failed; listener stopped", "error", err)
			return
		}
		m.wg.Add(1)
		go m.route(conn)
	}
}

// route reads the protocol byte and hands the connection over.
func (m *Mux) route(conn net.Conn) {
	defer m.wg.Done()
	var b [1]byte
	_ = conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	if _, err := conn.Read(b[:]); err != nil {
		m.logger.Debug("connection closed before naming its protocol", "remote", conn.RemoteAddr(), "error", err)
		conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	var sub *subListener
	switch b[0] {
	case ProtoRaft:
		sub = m.raft
	case ProtoRPC:
		sub = m.rpc
	default:
		m.logger.Warn("closing connection with unknown protocol byte", "remote", conn.RemoteAddr(), "byte", b[0])
		conn.Close()
		return
	}
	select {
	case sub.ch <- conn:
	case <-m.closed:
		conn.Close()
	}
}

// Raft returns the stream layer for raft.NetworkTransport.
func (m *Mux) Raft() raft.StreamLayer { return &raftLayer{subListener: m.raft} }

// RPC returns the listener of the forwarding RPC.
func (m *Mux) RPC() net.Listener { return m.rpc }

// Close stops accepting and closes both logical listeners.
func (m *Mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.closed)
		err = m.ln.Close()
		m.wg.Wait()
		for _, sub := range []*subListener{m.raft, m.rpc} {
			for {
				select {
				case c := <-sub.ch:
					c.Close()
					continue
				default:
				}
				break
			}
		}
	})
	return err
}

// subListener is one protocol's net.Listener.
type subListener struct {
	m  *Mux
	ch chan net.Conn
}

func (s *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.ch:
		return c, nil
	case <-s.m.closed:
		return nil, fmt.Errorf("transport: %w", net.ErrClosed)
	}
}

// Close closes the whole Mux: both protocols share the port.
func (s *subListener) Close() error { return s.m.Close() }

// Addr returns the advertised address.
func (s *subListener) Addr() net.Addr { return s.m.advertise }

// raftLayer is a raft.StreamLayer over the Mux.
type raftLayer struct{ *subListener }

var _ raft.StreamLayer = (*raftLayer)(nil)

// Dial connects to a Raft peer.
func (l *raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return dial(string(addr), timeout, ProtoRaft)
}

// DialRPC connects to a node's forwarding RPC.
func DialRPC(addr string, timeout time.Duration) (net.Conn, error) {
	return dial(addr, timeout, ProtoRPC)
}

func dial(addr string, timeout time.Duration, proto byte) (net.Conn, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte{proto}); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// NewTCPTransport returns Raft's network transport over a stream layer.
func NewTCPTransport(stream raft.StreamLayer, logger hclog.Logger) *raft.NetworkTransport {
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 5, Timeout: 10 * time.Second, Logger: logger,
	})
}
