package transport

import (
	"errors"
	"net"
	"sync"
)

// ErrRaftHeld fails a Raft dial while the Mux holds this node's Raft
// messages (HoldRaft).
var ErrRaftHeld = errors.New("transport: this node's Raft messages are held: its disk has stalled")

// raftOut is the set of Raft connections this node dialed, so that
// HoldRaft can cut them: the connections hashicorp/raft's heartbeats and
// replication send on.
type raftOut struct {
	mu sync.Mutex
	// mu guards the following
	held  bool
	conns map[*outConn]struct{}
}

// HoldRaft, with hold true, makes this node send no Raft message: it
// closes every Raft connection it dialed and fails new dials with
// ErrRaftHeld until HoldRaft(false). Connections other nodes dialed to
// this one (their requests, this node's answers) stay open, and so does
// the forwarding RPC.
//
// A leader whose disk has stalled holds its Raft messages: hashicorp/raft
// sends heartbeats from goroutines its blocked leader loop does not stop,
// so without this the followers would never time out and elect another.
func (m *Mux) HoldRaft(hold bool) {
	o := &m.out
	o.mu.Lock()
	o.held = hold
	var cut []*outConn
	if hold {
		for c := range o.conns {
			cut = append(cut, c)
		}
	}
	o.mu.Unlock()
	for _, c := range cut {
		_ = c.Close()
	}
}

// RaftHeld reports whether HoldRaft holds this node's Raft messages.
func (m *Mux) RaftHeld() bool {
	m.out.mu.Lock()
	defer m.out.mu.Unlock()
	return m.out.held
}

// track records conn as a Raft connection this node dialed, or closes it
// and fails when Raft messages are held.
func (o *raftOut) track(conn net.Conn) (net.Conn, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held {
		_ = conn.Close()
		return nil, ErrRaftHeld
	}
	if o.conns == nil {
		o.conns = map[*outConn]struct{}{}
	}
	c := &outConn{Conn: conn, o: o}
	o.conns[c] = struct{}{}
	return c, nil
}

// outConn is a Raft connection this node dialed; closing it forgets it.
type outConn struct {
	net.Conn
	o    *raftOut
	once sync.Once
}

// Close closes the connection and forgets it.
func (c *outConn) Close() error {
	c.once.Do(func() {
		c.o.mu.Lock()
		delete(c.o.conns, c)
		c.o.mu.Unlock()
	})
	return c.Conn.Close()
}
