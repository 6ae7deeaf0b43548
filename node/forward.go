package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/wire"
	"github.com/rangealloc/rangealloc/transport"
	"github.com/rangealloc/rangealloc/version"
)

// Calls made on a follower travel to the leader over an internal RPC on
// the leader's Raft port (the 'F' protocol of transport.Mux), not over the
// HTTP API: an embedded node needs no HTTP server, the leader's Raft
// address is always known from Raft itself (the member table may lag), and
// one port per node is one firewall rule. The RPC is net/rpc with gob,
// which multiplexes concurrent calls over one connection per leader.

// dialTimeout bounds connecting to the leader.
const dialTimeout = 2 * time.Second

// forwarder keeps one RPC client per leader address.
type forwarder struct {
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

func newForwarder(dial func(string, time.Duration) (net.Conn, error)) *forwarder {
	return &forwarder{dial: dial, clients: make(map[string]*rpcClient)}
}

func (f *forwarder) client(addr string) (*rpcClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
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
func (f *forwarder) current(addr string) *rpcClient {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clients[addr]
}

func (f *forwarder) drop(addr string, c *rpcClient) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.clients[addr] == c {
		delete(f.clients, addr)
		c.shut()
	}
}

func (f *forwarder) close() {
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
func (f *forwarder) call(ctx context.Context, addr string, method wire.Method, args, reply any, moved func() bool) (sent bool, err error) {
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
func (f *forwarder) send(addr string, method wire.Method, args, reply any) (*pending, error) {
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
func (f *forwarder) abandon(addr string, c *rpcClient, arrived uint64) {
	if c.arrived.Load() == arrived {
		f.drop(addr, c)
	}
}

// finish reports a completed call, dropping the client when its
// connection broke.
func (f *forwarder) finish(addr string, c *rpcClient, done *rpc.Call, sent bool) (bool, error) {
	if done.Error == nil {
		return true, nil
	}
	var se rpc.ServerError
	if !errors.As(done.Error, &se) {
		f.drop(addr, c) // the connection broke
	}
	return sent, done.Error
}

// leaderMoved returns a function reporting whether this node knows a
// leader other than addr.
func (n *Node) leaderMoved(addr string) func() bool {
	return func() bool {
		now, _ := n.raft.LeaderWithID()
		return now != "" && string(now) != addr
	}
}

type (
	wireErr      = wire.Error
	submitArgs   = wire.SubmitArgs
	submitReply  = wire.SubmitReply
	readRPCReply = wire.ReadRPCReply
	callReply    = wire.CallReply
	restoreArgs  = wire.RestoreArgs
	removeArgs   = wire.RemoveMemberArgs
)

func toWireErr(err error) *wireErr {
	if err == nil {
		return nil
	}
	var fe *fsm.Error
	var ue *UnknownOutcomeError
	switch {
	case errors.As(err, &ue): // first: it may wrap a domain refusal
		return &wireErr{Unknown: true, Msg: err.Error()}
	case errors.As(err, &fe):
		return &wireErr{Domain: fe}
	case errors.Is(err, ErrInvalidBackup):
		return &wireErr{Invalid: true, Msg: err.Error()}
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrNoLeader):
		return &wireErr{NotLeader: true, Msg: err.Error()}
	}
	return &wireErr{Unknown: true, Msg: err.Error()}
}

// fromWireErr restores the class of an error carried by the RPC.
func fromWireErr(w *wireErr) error {
	switch {
	case w == nil:
		return nil
	case w.Domain != nil:
		return w.Domain
	case w.NotLeader:
		return fmt.Errorf("%w: %s", ErrNotLeader, w.Msg)
	case w.Invalid:
		return fmt.Errorf("%w: %s", ErrInvalidBackup, w.Msg)
	}
	return fmt.Errorf("%w: leader: %s", ErrUnknownOutcome, w.Msg)
}

// forwardSubmitOne proposes a request through the leader at addr in a
// call of its own: for a leader of a release without SubmitBatch
// (fwdbatch.go).
func (n *Node) forwardSubmitOne(ctx context.Context, addr string, req *fsm.Request) outcome {
	var reply submitReply
	args := &submitArgs{Entry: fsm.EncodeBatch([]*fsm.Request{req}), Protocol: version.Protocol}
	sent, err := n.fwd.call(ctx, addr, wire.MethodSubmit, args, &reply, n.leaderMoved(addr))
	if err != nil {
		return outcome{err: fmt.Errorf("forward to leader %s: %w", addr, err), definite: !sent}
	}
	return submitOutcome(addr, &reply)
}

// forwardRead runs a read on the leader at addr.
func (n *Node) forwardRead(ctx context.Context, addr string, args *readArgs) (*readReply, error) {
	var reply readRPCReply
	args.Protocol = version.Protocol
	if _, err := n.fwd.call(ctx, addr, wire.MethodRead, args, &reply, n.leaderMoved(addr)); err != nil {
		return nil, fmt.Errorf("forward to leader %s: %w", addr, err)
	}
	if reply.Err != nil {
		return nil, fromWireErr(reply.Err)
	}
	return reply.Reply, nil
}

// forwardCall runs a cluster or restore call on the leader at addr.
func (n *Node) forwardCall(ctx context.Context, addr string, method wire.Method, args any) error {
	var reply callReply
	if _, err := n.fwd.call(ctx, addr, method, args, &reply, nil); err != nil {
		if e := olderLeader(addr, method, err); e != nil {
			if a, ok := args.(*removeArgs); ok && fsm.IsDrawnRequestID(a.RequestID) {
				// A leader of a release before member removals carried
				// request IDs removes the member as it always did. Only an
				// ID this node drew may be dropped: a caller's would be
				// promised and then not kept.
				return n.forwardCall(ctx, addr, wire.MethodRemoveMember, a.ID)
			}
			return e
		}
		return fmt.Errorf("forward to leader %s: %w", addr, err)
	}
	return fromWireErr(reply.Err)
}

// olderLeader recognises the answer of a leader of an older release to a
// call it does not have (net/rpc's "can't find method"): a definite
// refusal, not a reason to retry until the deadline.
func olderLeader(addr string, method wire.Method, err error) *fsm.Error {
	if !strings.Contains(err.Error(), "rpc: can't find method") {
		return nil
	}
	return &fsm.Error{Code: fsm.CodeVersionMismatch, Op: -1, Message: fmt.Sprintf(
		"the leader at %s runs an older release, which has no %s: upgrade it first, or move leadership to an upgraded node",
		addr, method)}
}

// serveRPC answers forwarded calls until the node closes. Each connection
// gets a service of its own that knows the peer: the node its TLS
// certificate names.
func (n *Node) serveRPC() {
	l := n.mux.RPC()
	for {
		conn, err := l.Accept()
		if err != nil {
			select {
			case <-n.shutdown:
			default:
				n.logger.Error("forwarding RPC listener stopped", "error", err)
			}
			return
		}
		n.goFunc(func() {
			done := make(chan struct{})
			defer close(done)
			go func() { // close the connection if the node closes first
				select {
				case <-n.shutdown:
					conn.Close()
				case <-done:
				}
			}()
			peer, secure := transport.PeerID(conn)
			srv := rpc.NewServer()
			if err := srv.RegisterName("Node", &rpcService{n: n, peer: peer, secure: secure}); err != nil {
				n.logger.Error("forwarding RPC: cannot serve a connection", "error", err)
				_ = conn.Close()
				return
			}
			served := conn
			if secure {
				isMember := func() bool { m, _ := n.inConfiguration(peer); return m }
				if !isMember() {
					served = &budgetConn{Conn: conn, left: nonMemberReadBudget, isMember: isMember, spent: func() {
						n.logger.Warn("forwarding RPC: closing a connection from a node that is not a member: it sent more than a newcomer may",
							"peer", peer, "remote", conn.RemoteAddr().String(), "budget", nonMemberReadBudget)
					}}
				}
			}
			srv.ServeConn(served)
		})
	}
}

// nonMemberReadBudget is how much a connection from a node that is not a
// member (by its certificate) may send before it is asked again: a
// newcomer's probes and Join take far less. net/rpc decodes a call's
// arguments whole before the method refuses a non-member, and gob turns
// one byte into an element of a slice (a Service spec: 192 bytes), so
// without the budget a certificate of the cluster's CA outside the
// cluster made this node allocate some 700 times what it sent.
const nonMemberReadBudget = 8 << 10

// errReadBudget ends a connection whose peer spent its budget and is
// still not a member.
var errReadBudget = errors.New("forwarding RPC: a node that is not a member sent more than it may")

// budgetConn reads at most left bytes from a non-member's connection;
// then, if the peer has become a member (a newcomer that joined, a
// founder once the cluster is bootstrapped), without limit. Else the
// connection ends, and spent, if set, is called once to say so. net/rpc
// reads a connection from one goroutine.
type budgetConn struct {
	net.Conn
	left     int
	isMember func() bool
	spent    func()
	lifted   bool
	ended    bool
}

func (c *budgetConn) Read(p []byte) (int, error) {
	if !c.lifted {
		if c.left <= 0 {
			if !c.isMember() {
				if !c.ended && c.spent != nil {
					c.spent()
				}
				c.ended = true
				return 0, errReadBudget
			}
			c.lifted = true
		} else if len(p) > c.left {
			p = p[:c.left]
		}
	}
	n, err := c.Conn.Read(p)
	if !c.lifted {
		c.left -= n
	}
	return n, err
}

// rpcService is what the leader serves to followers. A receiver that is no
// longer the leader answers NotLeader and never forwards again, so calls
// cannot loop.
//
// Over TLS (secure), peer is the node ID the caller's certificate was
// issued to: only members of the configuration may forward calls; any
// node of the cluster's CA may probe, and join as itself.
type rpcService struct {
	n      *Node
	peer   string
	secure bool
}

// member refuses a caller that is not a member of the configuration: a
// node with a certificate of the cluster's CA, but not (or no longer) in
// the cluster, must not commit anything through it. Every forwarded read
// and write passes here first, so it also turns every caller away while
// this node finishes founding its cluster from a backup: the restore
// would replace what was written or read before it.
func (s *rpcService) member() *wireErr {
	if s.n.founder.restoring.Load() && s.n.life.get() < phaseServing {
		return &wireErr{NotLeader: true, Msg: "founding its cluster from a backup: not serving yet"}
	}
	if !s.secure {
		return nil // plain TCP: --insecure, or loopback only
	}
	if member, _ := s.n.inConfiguration(s.peer); member {
		return nil
	}
	s.n.logger.Warn("refusing a forwarded call from a node that is not a member", "peer", s.peer)
	return &wireErr{Domain: &fsm.Error{Code: fsm.CodePermissionDenied, Op: -1, Message: fmt.Sprintf(
		"node %s refuses forwarded calls from %q: its certificate names no member of the cluster's configuration", s.n.id, s.peer)}}
}

// rpcTimeout bounds a forwarded call on the leader.
const rpcTimeout = 10 * time.Second

func (s *rpcService) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), rpcTimeout)
}

func (s *rpcService) leaderOnly() *wireErr {
	if !s.n.IsLeader() {
		return &wireErr{NotLeader: true, Msg: "not the leader"}
	}
	return nil
}

// protocol refuses a call from a node that speaks a newer protocol than
// this one: it may mean what this release cannot know. A node of the
// release before protocol versions sends 0, which is protocol 1.
func (s *rpcService) protocol(p int) *wireErr {
	if p <= version.Protocol {
		return nil
	}
	return &wireErr{Domain: &fsm.Error{Code: fsm.CodeVersionMismatch, Op: -1, Message: fmt.Sprintf(
		"a forwarded call speaks protocol %d, and leader %s (release %s) speaks %d: finish the upgrade, or let an upgraded node lead",
		p, s.n.id, version.String(), version.Protocol)}}
}

// admitWrite refuses a forwarded write from a non-member, to a node that
// does not lead, or in a newer protocol.
func (s *rpcService) admitWrite(protocol int) *wireErr {
	if e := s.member(); e != nil {
		return e
	}
	if e := s.leaderOnly(); e != nil {
		return e
	}
	return s.protocol(protocol)
}

// Submit proposes a forwarded request.
func (s *rpcService) Submit(args *submitArgs, reply *submitReply) error {
	defer since(keyForwardServe, time.Now())
	if reply.Err = s.admitWrite(args.Protocol); reply.Err != nil {
		return nil
	}
	reqs, err := fsm.DecodeEntry(args.Entry)
	if err != nil || len(reqs) != 1 {
		reply.Err = &wireErr{Domain: &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: fmt.Sprintf("forwarded entry: want one request, got %d (%v)", len(reqs), err)}}
		return nil
	}
	req := reqs[0]
	if e := s.n.disk.refuse(req); e != nil {
		reply.Result = fsm.EncodeResult(&fsm.Result{Err: e})
		return nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	s.answer(reply, s.n.propose(ctx, req))
	return nil
}

// Read serves a forwarded read.
func (s *rpcService) Read(args *readArgs, reply *readRPCReply) error {
	if reply.Err = s.member(); reply.Err != nil {
		return nil
	}
	if reply.Err = s.protocol(args.Protocol); reply.Err != nil {
		return nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	r, err := s.n.readOnLeader(ctx, args)
	reply.Reply, reply.Err = r, toWireErr(err)
	if err != nil && !errors.Is(err, ErrClosed) {
		reply.Err = &wireErr{NotLeader: true, Msg: err.Error()} // reads are safe to retry
	}
	return nil
}

func (s *rpcService) run(reply *callReply, fn func(ctx context.Context) error) error {
	if reply.Err = s.member(); reply.Err != nil {
		return nil
	}
	if reply.Err = s.leaderOnly(); reply.Err != nil {
		return nil
	}
	ctx, cancel := s.ctx()
	defer cancel()
	reply.Err = toWireErr(fn(ctx))
	return nil
}

// AddMember adds a forwarded member.
func (s *rpcService) AddMember(m fsm.Member, reply *callReply) error {
	return s.run(reply, func(ctx context.Context) error { return s.n.addMemberOnLeader(ctx, m) })
}

// FinalizeUpgrade raises the feature level for a follower (feature.go);
// the argument is unused (net/rpc wants one).
func (s *rpcService) FinalizeUpgrade(_ int, reply *callReply) error {
	return s.run(reply, func(ctx context.Context) error { _, err := s.n.raiseFeatureLevel(ctx); return err })
}

// RemoveMember removes a member for a follower of a release before
// member removals carried request IDs.
func (s *rpcService) RemoveMember(id string, reply *callReply) error {
	return s.RemoveMemberRequest(&removeArgs{ID: id}, reply)
}

// RemoveMemberRequest removes a forwarded member under the request ID the
// follower received the call with (Node.RemoveMember).
func (s *rpcService) RemoveMemberRequest(args *removeArgs, reply *callReply) error {
	return s.run(reply, func(ctx context.Context) error {
		if err := checkRequestID(args.RequestID); err != nil {
			return err
		}
		return s.n.removeMemberOnLeader(ctx, args.ID, args.RequestID)
	})
}

// Transfer transfers leadership on a follower's behalf.
func (s *rpcService) Transfer(id string, reply *callReply) error {
	return s.run(reply, func(ctx context.Context) error { return s.n.TransferLeadership(ctx, id) })
}

// Join adds a member on behalf of a node that is joining through this
// one: the leader adds it directly, a follower carries it one hop to the
// leader's AddMember (which never forwards).
//
// Over TLS a node joins only as itself: m.ID must be the ID its
// certificate names.
func (s *rpcService) Join(m fsm.Member, reply *wire.JoinReply) error {
	if s.secure && m.ID != s.peer {
		reply.Err = &wireErr{Domain: &fsm.Error{Code: fsm.CodePermissionDenied, Op: -1, Message: fmt.Sprintf(
			"a node may join only as itself: it asked to join as %q, its certificate names %q", m.ID, s.peer)}}
		return nil
	}
	if m.Nonvoter { // before it travels: a leader of an older release would drop the flag
		if e := checkKindLevel(fsm.KindSetMemberNonvoter, s.n.fsm.FeatureLevel()); e != nil {
			reply.Err = &wireErr{Domain: e}
			return nil
		}
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if s.n.IsLeader() {
		reply.Err = toWireErr(s.n.addMemberOnLeader(ctx, m))
	} else if addr, _ := s.n.raft.LeaderWithID(); addr != "" {
		reply.Err = toWireErr(s.n.forwardCall(ctx, string(addr), wire.MethodAddMember, m))
	} else {
		reply.Err = &wireErr{NotLeader: true, Msg: "no leader known"}
	}
	if reply.Err == nil {
		reply.ClusterID = s.n.ClusterID()
	}
	return nil
}

// Probe answers what this node is (membership.go). It is served before
// the node has founded or joined a cluster.
func (s *rpcService) Probe(_ *wire.ProbeArgs, reply *wire.ProbeReply) error {
	*reply = *s.n.probeReply()
	return nil
}

// Restore restores a backup forwarded by a follower of a release before
// restores carried request IDs; it gets one drawn here.
func (s *rpcService) Restore(data []byte, reply *callReply) error {
	return s.RestoreRequest(&restoreArgs{Data: data}, reply)
}

// RestoreRequest restores a forwarded backup under the request ID the
// follower received it with (Node.Restore). The backup arrives whole, as
// net/rpc carries arguments; the follower checked it before it sent it,
// so only a valid backup, as large as the state it holds, travels.
func (s *rpcService) RestoreRequest(args *restoreArgs, reply *callReply) error {
	return s.run(reply, func(context.Context) error {
		if err := checkRequestID(args.ID); err != nil {
			return err
		}
		b, err := fsm.ReadBackup(bytes.NewReader(args.Data))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidBackup, err)
		}
		id, fp := args.ID, args.Fingerprint
		if id == "" {
			id, fp = drawRequestID(), b.Fingerprint()
		}
		maybe, err := s.n.restoreOnLeader(b, id, fp)
		if err != nil && !maybe && lostLead(err) {
			// Nothing reached raft.Restore: a definite refusal, which the
			// follower retries through the next leader.
			return fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return err
	})
}
