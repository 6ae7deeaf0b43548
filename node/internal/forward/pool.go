package forward

import (
	"context"
	"errors"
	"net"
	"net/rpc"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/nodeerr"
	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// dialTimeout bounds connecting to the leader.
const dialTimeout = 2 * time.Second

// pool keeps one RPC client per leader address.
type pool struct {
	dial func(addr string, timeout time.Duration) (net.Conn, error)

	mu sync.Mutex
	// mu guards the following
	clients map[string]*rpcClient
	closed  bool
}

// rpcClient is the RPC client of one leader address. arrived counts the
// reads that brought bytes from the leader: a call abandoned while it did
// not move saw nothing arrive during its whole wait. closing and closed
// bracket a local Close (see call).
type rpcClient struct {
	*rpc.Client
	arrived         atomic.Uint64
	closing, closed atomic.Bool
}

// shut closes the client, setting closing before and closed after.
func (c *rpcClient) shut() {
	c.closing.Store(true)
	c.Client.Close()
	c.closed.Store(true)
}

// countingConn counts the reads that return bytes.
type countingConn struct {
	net.Conn
	n *atomic.Uint64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.n.Add(1)
	}
	return n, err
}

func newPool(dial func(string, time.Duration) (net.Conn, error)) *pool {
	return &pool{dial: dial, clients: make(map[string]*rpcClient)}
}

func (f *pool) client(addr string) (*rpcClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, nodeerr.ErrClosed
	}
	if c, ok := f.clients[addr]; ok {
		return c, nil
	}
	conn, err := f.dial(addr, dialTimeout)
	if err != nil {
		return nil, err
	}
	c := &rpcClient{}
	c.Client = rpc.NewClient(countingConn{Conn: conn, n: &c.arrived})
	f.clients[addr] = c
	return c, nil
}

// current returns the client of addr, nil if none is open.
func (f *pool) current(addr string) *rpcClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clients[addr]
}

func (f *pool) drop(addr string, c *rpcClient) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clients[addr] == c {
		delete(f.clients, addr)
		c.shut()
	}
}

func (f *pool) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for addr, c := range f.clients {
		c.shut()
		delete(f.clients, addr)
	}
}

// leaderPoll is how often a forwarded call in flight checks whether the
// leader it went to is still the one this node knows.
const leaderPoll = 50 * time.Millisecond

// errLeaderMoved abandons a forwarded call: this node learned of another
// leader while the call was in flight.
var errLeaderMoved = errors.New("abandoned: this node learned of a new leader while the call was in flight")

// call runs an RPC on the node at addr. sent reports whether the request
// may have reached it: a failure before that is definite.
//
// moved, when set, is polled while the call is in flight: once it reports
// true (this node knows another leader) the call is abandoned as sent, an
// unknown outcome, so the caller retries through the new leader with the
// same request ID. Without it, a call to a leader that is paused or cut
// off by a firewall that drops packets would wait out the caller's whole
// deadline, though a new leader serves within an election timeout.
func (f *pool) call(ctx context.Context, addr string, method wire.Method, args, reply any, moved func() bool) (sent bool, err error) {
	p, err := f.send(addr, method, args, reply)
	if err != nil {
		return false, err
	}
	var poll <-chan time.Time
	if moved != nil {
		t := time.NewTicker(leaderPoll)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case done := <-p.call.Done:
			return f.finish(addr, p.c, done, !p.refused)
		case <-ctx.Done():
			f.abandon(addr, p.c, p.arrived)
			return true, ctx.Err()
		case <-poll:
			if moved() {
				f.abandon(addr, p.c, p.arrived)
				return true, errLeaderMoved
			}
		}
	}
}

// pending is an RPC sent on a leader's client.
type pending struct {
	c       *rpcClient
	arrived uint64 // c.arrived when it was sent (see abandon)
	call    *rpc.Call
	refused bool // net/rpc refused it on a client already shut: not sent
}

// send starts an RPC on the client of addr. An error means nothing was
// sent.
func (f *pool) send(addr string, method wire.Method, args, reply any) (*pending, error) {
	c, err := f.client(addr)
	if err != nil {
		return nil, err
	}
	p := &pending{c: c, arrived: c.arrived.Load()}
	closedBefore := c.closed.Load()
	p.call = c.Go("Node."+string(method), args, reply, make(chan *rpc.Call, 1))
	// net/rpc answers ErrShutdown in two cases: Go refused the call because
	// the client was already shut (nothing sent), or a local Close ended
	// the call after it was written (maybe applied). A first look right
	// after Go tells them apart only when no local Close can be involved:
	// one had finished before Go (it refused), or none has begun even now
	// (the client was shut by a broken connection, and refused). Any other
	// ErrShutdown is an unknown outcome.
	select {
	case done := <-p.call.Done:
		p.refused = errors.Is(done.Error, rpc.ErrShutdown) && (closedBefore || !c.closing.Load())
		p.call.Done <- done // buffered 1, and now empty
	default:
	}
	return p, nil
}

// abandon leaves a call in flight. When nothing arrived on the client's
// connection since this call was sent, it is suspect: a leader paused, or
// cut off by a firewall that drops packets, leaves a TCP connection that
// neither fails nor delivers, and after the heal its bytes wait for the
// next retransmission, which backs off to as much as two minutes. So the
// client is closed and the next call dials afresh. Calls still in flight
// on it end with the connection's error, which call reports as sent: a
// write's caller retries with the same request ID. A connection that
// delivers anything meanwhile is kept: one caller giving up says nothing
// about it.
func (f *pool) abandon(addr string, c *rpcClient, arrived uint64) {
	if c.arrived.Load() == arrived {
		f.drop(addr, c)
	}
}

// finish reports a completed call, dropping the client when its
// connection broke.
func (f *pool) finish(addr string, c *rpcClient, done *rpc.Call, sent bool) (bool, error) {
	if done.Error == nil {
		return true, nil
	}
	var se rpc.ServerError
	if !errors.As(done.Error, &se) {
		f.drop(addr, c) // the connection broke
	}
	return sent, done.Error
}
