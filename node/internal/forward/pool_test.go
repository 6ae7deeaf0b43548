package forward

import (
	"context"
	"errors"
	"io"
	"net"
	"net/rpc"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// TestForwardSent checks how a forwarded call that failed is classified:
// definite (never sent) only when the client already knew its connection
// was gone; unknown once the request may have left.
func TestForwardSent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// The leader reads the request, then its connection ends: the request
	// was sent, the outcome is unknown.
	leader, conn := net.Pipe()
	f := newPool(func(string, time.Duration) (net.Conn, error) { return conn, nil })
	go func() {
		_, _ = io.ReadAtLeast(leader, make([]byte, 1), 1)
		leader.Close()
	}()
	sent, err := f.call(ctx, "leader", wire.MethodSubmit, &wire.SubmitArgs{}, &wire.SubmitReply{}, nil)
	require.Error(t, err)
	assert.True(t, sent, "a call whose connection ended after it was written may have been applied: %v", err)

	// A client that knows its connection is gone fails the call before
	// sending it: definite.
	leader, conn = net.Pipe()
	f = newPool(func(string, time.Duration) (net.Conn, error) { return conn, nil })
	c, err := f.client("leader")
	require.NoError(t, err)
	leader.Close()
	require.Eventually(t, func() bool { // until the client's reader has seen the end
		done := <-c.Go("Node.Submit", &wire.SubmitArgs{}, &wire.SubmitReply{}, make(chan *rpc.Call, 1)).Done
		return errors.Is(done.Error, rpc.ErrShutdown)
	}, 5*time.Second, 10*time.Millisecond)
	sent, err = f.call(ctx, "leader", wire.MethodSubmit, &wire.SubmitArgs{}, &wire.SubmitReply{}, nil)
	require.ErrorIs(t, err, rpc.ErrShutdown)
	assert.False(t, sent, "nothing was sent on a connection known to be gone")

	// A call to a leader that never answers is abandoned once another
	// leader is known: sent, unknown, at once rather than at the deadline.
	leader, conn = net.Pipe()
	defer leader.Close()
	f = newPool(func(string, time.Duration) (net.Conn, error) { return conn, nil })
	go func() { _, _ = io.Copy(io.Discard, leader) }()
	moved := make(chan struct{})
	time.AfterFunc(100*time.Millisecond, func() { close(moved) })
	sent, err = f.call(ctx, "leader", wire.MethodSubmit, &wire.SubmitArgs{}, &wire.SubmitReply{}, func() bool {
		select {
		case <-moved:
			return true
		default:
			return false
		}
	})
	require.ErrorIs(t, err, errLeaderMoved)
	assert.True(t, sent)
	assert.NoError(t, ctx.Err(), "abandoned before the caller's deadline")
}

// stubLeader answers forwarded calls: Echo at once, Block only when the
// test ends. arrived tells of each Block call the leader received.
type stubLeader struct {
	block   chan struct{}
	arrived chan struct{}
}

func (s *stubLeader) Echo(_ *wire.SubmitArgs, _ *wire.SubmitReply) error { return nil }
func (s *stubLeader) Block(_ *wire.SubmitArgs, _ *wire.SubmitReply) error {
	s.arrived <- struct{}{}
	<-s.block
	return nil
}

// TestForwardAbandonSilentConnection checks what an abandoned call does to
// its connection: one on which nothing arrived during the whole wait is
// closed, so the next call dials afresh instead of queueing behind a
// connection that neither fails nor delivers, and the calls still in
// flight on it end as unknown outcomes; one that delivered anything
// meanwhile is kept.
func TestForwardAbandonSilentConnection(t *testing.T) {
	stub := &stubLeader{block: make(chan struct{}), arrived: make(chan struct{}, 4)}
	defer close(stub.block)
	srv := rpc.NewServer()
	require.NoError(t, srv.RegisterName("Node", stub))
	var dials atomic.Int32
	f := newPool(func(string, time.Duration) (net.Conn, error) {
		dials.Add(1)
		leader, conn := net.Pipe()
		go srv.ServeConn(leader)
		return conn, nil
	})
	defer f.close()
	echo := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := f.call(ctx, "leader", "Echo", &wire.SubmitArgs{}, &wire.SubmitReply{}, nil)
		return err
	}
	type result struct {
		sent bool
		err  error
	}
	// block starts a Block call, waits until the leader has it, and
	// returns its cancel and its result.
	block := func() (context.CancelFunc, chan result) {
		ctx, cancel := context.WithCancel(context.Background())
		out := make(chan result, 1)
		go func() {
			sent, err := f.call(ctx, "leader", "Block", &wire.SubmitArgs{}, &wire.SubmitReply{}, nil)
			out <- result{sent, err}
		}()
		<-stub.arrived
		return cancel, out
	}
	require.NoError(t, echo())

	// An answer arrives while the blocked call waits: kept.
	cancel, out := block()
	require.NoError(t, echo())
	cancel()
	r := <-out
	require.ErrorIs(t, r.err, context.Canceled)
	require.NoError(t, echo())
	assert.Equal(t, int32(1), dials.Load(), "a connection that delivered meanwhile is kept")

	// Nothing arrives while the second blocked call waits: the connection
	// is closed, the other call in flight on it ends as sent (an unknown
	// outcome), and the next call dials.
	cancelFirst, first := block()
	defer cancelFirst()
	cancel, out = block()
	cancel()
	r = <-out
	require.ErrorIs(t, r.err, context.Canceled)
	select {
	case r = <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight did not end: the silent connection was not closed")
	}
	require.Error(t, r.err)
	assert.True(t, r.sent, "a call in flight on a connection closed under it may have been applied")
	require.NoError(t, echo())
	assert.Equal(t, int32(2), dials.Load(), "a silent connection is replaced")
}
