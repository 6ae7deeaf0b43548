package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/wire"
	"github.com/rangealloc/rangealloc/transport"
	"github.com/rangealloc/rangealloc/version"
)

// The server side of forwarding: the leader's end of the calls a
// follower's forward.Client makes (package node/internal/forward says
// why they travel over an RPC on the Raft port).

type (
	wireErr      = wire.Error
	submitArgs   = wire.SubmitArgs
	submitReply  = wire.SubmitReply
	readRPCReply = wire.ReadRPCReply
	callReply    = wire.CallReply
	restoreArgs  = wire.RestoreArgs
	removeArgs   = wire.RemoveMemberArgs
)

// toWireErr carries an error's class over the RPC; the follower's
// forward.FromWire restores it.
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
				isMember := func() bool { m, _ := inConfiguration(n.raft, peer); return m }
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
	if member, _ := inConfiguration(s.n.raft, s.peer); member {
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
	s.answer(reply, s.n.commit.propose(ctx, req))
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
	return s.run(reply, func(ctx context.Context) error { return s.n.members.add(ctx, m) })
}

// FinalizeUpgrade raises the feature level for a follower (feature.go);
// the argument is unused (net/rpc wants one).
func (s *rpcService) FinalizeUpgrade(_ int, reply *callReply) error {
	return s.run(reply, func(ctx context.Context) error { _, err := s.n.levels.raise(ctx); return err })
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
		return s.n.members.remove(ctx, args.ID, args.RequestID)
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
		reply.Err = toWireErr(s.n.members.add(ctx, m))
	} else if addr, _ := s.n.raft.LeaderWithID(); addr != "" {
		_, err := s.n.fwd.Cluster(ctx, string(addr), wire.MethodAddMember, m)
		reply.Err = toWireErr(err)
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
		maybe, err := s.n.restores.onLeader(b, id, fp)
		if err != nil && !maybe && lostLead(err) {
			// Nothing reached raft.Restore: a definite refusal, which the
			// follower retries through the next leader.
			return fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return err
	})
}
