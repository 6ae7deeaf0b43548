package transport

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// logical is one protocol's net.Listener on a Mux. The channel is
// unbuffered: a connection changes hands only into a running Accept, so
// closing the listener never strands one.
type logical struct {
	addr      net.Addr
	ch        chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

var _ net.Listener = (*logical)(nil)

func newLogical(addr net.Addr) *logical {
	return &logical{addr: addr, ch: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept waits for the next connection of this protocol. After Close it
// returns an error wrapping net.ErrClosed.
func (l *logical) Accept() (net.Conn, error) {
	select {
	case <-l.closed:
		return nil, fmt.Errorf("transport: accept: %w", net.ErrClosed)
	default:
	}
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, fmt.Errorf("transport: accept: %w", net.ErrClosed)
	}
}

// Close stops this protocol's listener; the Mux goes on serving the other
// one, and closes connections that name this one. Idempotent.
func (l *logical) Close() error {
	l.close()
	return nil
}

func (l *logical) close() { l.closeOnce.Do(func() { close(l.closed) }) }

// Addr returns the Mux's advertised address.
func (l *logical) Addr() net.Addr { return l.addr }

// raftLayer is the raft.StreamLayer of a Mux.
type raftLayer struct {
	*logical
	m *Mux
}

var _ raft.StreamLayer = (*raftLayer)(nil)

// Dial connects to the Raft protocol of the Mux at addr and shakes hands.
// While the Mux holds Raft messages (HoldRaft), it fails with ErrRaftHeld.
func (l *raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if l.m.RaftHeld() {
		return nil, ErrRaftHeld
	}
	conn, err := l.m.dial(string(addr), timeout, ProtoRaft, func(addr string, timeout time.Duration) (net.Conn, error) {
		return net.DialTimeout("tcp", addr, timeout)
	}, l.m.clusterID())
	if err != nil {
		return nil, err
	}
	return l.m.out.track(conn)
}
