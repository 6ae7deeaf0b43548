package node

import (
	"context"
	"errors"
	"io"
	"net"
	"net/rpc"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	f := newForwarder(func(string, time.Duration) (net.Conn, error) { return conn, nil })
	go func() {
		_, _ = io.ReadAtLeast(leader, make([]byte, 1), 1)
		leader.Close()
	}()
	sent, err := f.call(ctx, "leader", "Submit", &submitArgs{}, &submitReply{}, nil)
	require.Error(t, err)
	assert.True(t, sent, "a call whose connection ended after it was written may have been applied: %v", err)

	// A client that knows its connection is gone fails the call before
	// sending it: definite.
	leader, conn = net.Pipe()
	f = newForwarder(func(string, time.Duration) (net.Conn, error) { return conn, nil })
	c, err := f.client("leader")
	require.NoError(t, err)
	leader.Close()
	require.Eventually(t, func() bool { // until the client's reader has seen the end
		done := <-c.Go("Node.Submit", &submitArgs{}, &submitReply{}, make(chan *rpc.Call, 1)).Done
		return errors.Is(done.Error, rpc.ErrShutdown)
	}, 5*time.Second, 10*time.Millisecond)
	sent, err = f.call(ctx, "leader", "Submit", &submitArgs{}, &submitReply{}, nil)
	require.ErrorIs(t, err, rpc.ErrShutdown)
	assert.False(t, sent, "nothing was sent on a connection known to be gone")

	// A call to a leader that never answers is abandoned once another
	// leader is known: sent, unknown, at once rather than at the deadline.
	leader, conn = net.Pipe()
	defer leader.Close()
	f = newForwarder(func(string, time.Duration) (net.Conn, error) { return conn, nil })
	go func() { _, _ = io.Copy(io.Discard, leader) }()
	moved := make(chan struct{})
	time.AfterFunc(100*time.Millisecond, func() { close(moved) })
	sent, err = f.call(ctx, "leader", "Submit", &submitArgs{}, &submitReply{}, func() bool {
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
