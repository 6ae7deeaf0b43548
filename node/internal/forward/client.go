package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/nodeerr"
	"github.com/rangealloc/rangealloc/node/internal/wire"
	"github.com/rangealloc/rangealloc/version"
)

// The metrics of a follower's forwarded writes (package node's trace.go
// lists the rest).
var (
	// keyCall: a forwarded write as the follower sees it.
	keyCall = []string{"node", "forward", "call"}
	// keyBatch samples the writes each forwarded batch carries.
	keyBatch = []string{"node", "forward", "batch"}
)

// Config is what a Client acts through.
type Config struct {
	// Dial connects to a node's forwarding RPC (transport.Mux.DialRPC).
	Dial func(addr string, timeout time.Duration) (net.Conn, error)
	// DialProbe connects for a Probe, on a connection that names no
	// cluster, so that it reaches nodes of other clusters too
	// (transport.Mux.DialProbe).
	DialProbe func(addr string, timeout time.Duration) (net.Conn, error)
	// Leader returns the address of the leader this node knows now, ""
	// when it knows none. A write, read or restore in flight to another
	// address is abandoned (see pool.call). Nil: none is.
	Leader func() string
	// BatchWait bounds how long the batch sender holds a batch open for
	// the writes it expects.
	BatchWait time.Duration
	// Shutdown closes when the node starts to close: no write is batched
	// after it, and a sender holding a batch sends it.
	Shutdown <-chan struct{}
	// Go starts the batch senders' goroutines; the node waits for them on
	// close. Nil: the go statement.
	Go func(func())
}

// Client makes a follower's calls to the leader (and its probes of other
// nodes). Close closes its connections.
type Client struct {
	cfg     Config
	leaders *pool // every call but Probe
	probes  *pool // Probe calls only

	mu sync.Mutex
	// mu guards batchers: one per leader address (batch.go).
	batchers map[string]*batcher
}

// New returns a Client that acts through cfg.
func New(cfg Config) *Client {
	if cfg.Go == nil {
		cfg.Go = func(f func()) { go f() }
	}
	if cfg.Leader == nil {
		cfg.Leader = func() string { return "" }
	}
	return &Client{cfg: cfg, leaders: newPool(cfg.Dial), probes: newPool(cfg.DialProbe), batchers: map[string]*batcher{}}
}

// Close closes every connection. The calls in flight on them end, as
// unknown outcomes; later calls fail with ErrClosed, never sent.
func (c *Client) Close() {
	c.leaders.close()
	c.probes.close()
}

// Call runs the RPC method on the node at addr. sent reports whether the
// request may have reached it: a failure before that is definite. moved,
// when set, is polled while the call is in flight; once it reports true
// the call is abandoned as sent (see pool.call).
func (c *Client) Call(ctx context.Context, addr string, method wire.Method, args, reply any, moved func() bool) (sent bool, err error) {
	return c.leaders.call(ctx, addr, method, args, reply, moved)
}

// Probe asks the node at addr about itself, on a probe connection.
func (c *Client) Probe(ctx context.Context, addr string, args *wire.ProbeArgs, reply *wire.ProbeReply) error {
	_, err := c.probes.call(ctx, addr, wire.MethodProbe, args, reply, nil)
	return err
}

// moved returns a function reporting whether this node knows a leader
// other than addr.
func (c *Client) moved(addr string) func() bool {
	return func() bool {
		now := c.cfg.Leader()
		return now != "" && now != addr
	}
}

// Outcome is what became of a forwarded write: the leader's result, or an
// error that is definite (nothing was applied) or not (it may have been).
type Outcome struct {
	Result   *fsm.Result
	Err      error
	Definite bool
}

// submitOne proposes a request through the leader at addr in a call of
// its own: for a leader of a release without SubmitBatch (batch.go).
func (c *Client) submitOne(ctx context.Context, addr string, req *fsm.Request) Outcome {
	var reply wire.SubmitReply
	args := &wire.SubmitArgs{Entry: fsm.EncodeBatch([]*fsm.Request{req}), Protocol: version.Protocol}
	sent, err := c.leaders.call(ctx, addr, wire.MethodSubmit, args, &reply, c.moved(addr))
	if err != nil {
		return Outcome{Err: fmt.Errorf("forward to leader %s: %w", addr, err), Definite: !sent}
	}
	return submitOutcome(addr, &reply)
}

// submitOutcome reads a leader's answer to one forwarded write.
func submitOutcome(addr string, reply *wire.SubmitReply) Outcome {
	if reply.Err != nil {
		return Outcome{Err: FromWire(reply.Err), Definite: reply.Err.NotLeader}
	}
	res, err := fsm.DecodeResult(reply.Result)
	if err != nil {
		return Outcome{Err: fmt.Errorf("leader %s sent an undecodable result: %w", addr, err)}
	}
	return Outcome{Result: res}
}

// Read runs a read on the leader at addr.
func (c *Client) Read(ctx context.Context, addr string, args *wire.ReadArgs) (*wire.ReadReply, error) {
	var reply wire.ReadRPCReply
	args.Protocol = version.Protocol
	if _, err := c.leaders.call(ctx, addr, wire.MethodRead, args, &reply, c.moved(addr)); err != nil {
		return nil, fmt.Errorf("forward to leader %s: %w", addr, err)
	}
	if reply.Err != nil {
		return nil, FromWire(reply.Err)
	}
	return reply.Reply, nil
}

// Cluster runs a cluster call (one answered with wire.CallReply: adding,
// removing, a leadership transfer, a feature level raise) on the leader
// at addr; maybe reports whether it may have been applied though err is
// set: it was sent and no answer came, or the leader did not know.
func (c *Client) Cluster(ctx context.Context, addr string, method wire.Method, args any) (maybe bool, err error) {
	var reply wire.CallReply
	sent, err := c.leaders.call(ctx, addr, method, args, &reply, nil)
	if err != nil {
		if e := olderLeader(addr, method, err); e != nil {
			if a, ok := args.(*wire.RemoveMemberArgs); ok && fsm.IsDrawnRequestID(a.RequestID) {
				// A leader of a release before member removals carried
				// request IDs removes the member as it always did. Only an
				// ID this node drew may be dropped: a caller's would be
				// promised and then not kept. That leader keeps no ID, so
				// a lost answer is never called a maybe: a retry under the
				// ID could not find it.
				_, err := c.Cluster(ctx, addr, wire.MethodRemoveMember, a.ID)
				return false, err
			}
			return false, e
		}
		return sent, fmt.Errorf("forward to leader %s: %w", addr, err)
	}
	err = FromWire(reply.Err)
	return errors.Is(err, nodeerr.ErrUnknownOutcome), err
}

// Restore runs a restore on the leader at addr; maybe reports whether it
// may have been applied though err is set.
func (c *Client) Restore(ctx context.Context, addr string, args *wire.RestoreArgs) (maybe bool, err error) {
	var reply wire.CallReply
	sent, err := c.leaders.call(ctx, addr, wire.MethodRestoreRequest, args, &reply, c.moved(addr))
	if err != nil {
		if e := olderLeader(addr, wire.MethodRestoreRequest, err); e != nil {
			return false, e
		}
		return sent, fmt.Errorf("forward to leader %s: %w", addr, err)
	}
	err = FromWire(reply.Err)
	return errors.Is(err, nodeerr.ErrUnknownOutcome), err
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

// FromWire restores the class of an error carried by the RPC: a domain
// refusal as itself, the others as node's sentinel errors.
func FromWire(w *wire.Error) error {
	switch {
	case w == nil:
		return nil
	case w.Domain != nil:
		return w.Domain
	case w.NotLeader:
		return fmt.Errorf("%w: %s", nodeerr.ErrNotLeader, w.Msg)
	case w.Invalid:
		return fmt.Errorf("%w: %s", nodeerr.ErrInvalidBackup, w.Msg)
	}
	return fmt.Errorf("%w: leader: %s", nodeerr.ErrUnknownOutcome, w.Msg)
}
