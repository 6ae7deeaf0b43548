package transport

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHoldRaft: while a Mux holds its Raft messages, the Raft connections
// it dialed are closed and a new dial fails with ErrRaftHeld; connections
// others dialed to it, and its forwarding RPC, stay open. Released, it
// dials again.
func TestHoldRaft(t *testing.T) {
	noLeak(t)
	held, peer := listenT(t, DefaultHandshakeTimeout), listenT(t, DefaultHandshakeTimeout)
	atPeer, atHeld := acceptor(t, peer.Raft()), acceptor(t, held.Raft())
	rpcAtPeer := acceptor(t, peer.RPC())

	out, err := held.Raft().Dial(raft.ServerAddress(peer.Addr().String()), time.Second)
	require.NoError(t, err)
	defer out.Close()
	outAtPeer := next(t, atPeer, 2*time.Second)
	require.NotNil(t, outAtPeer)
	in, err := peer.Raft().Dial(raft.ServerAddress(held.Addr().String()), time.Second)
	require.NoError(t, err)
	defer in.Close()
	inAtHeld := next(t, atHeld, 2*time.Second)
	require.NotNil(t, inAtHeld)
	rpc, err := held.DialRPC(peer.Addr().String(), time.Second)
	require.NoError(t, err)
	defer rpc.Close()
	require.NotNil(t, next(t, rpcAtPeer, 2*time.Second))

	held.HoldRaft(true)
	assert.True(t, held.RaftHeld())
	assertClosedByPeer(t, outAtPeer)
	_, err = held.Raft().Dial(raft.ServerAddress(peer.Addr().String()), time.Second)
	require.ErrorIs(t, err, ErrRaftHeld)
	for name, pair := range map[string][2]net.Conn{"raft in": {in, inAtHeld}, "rpc out": {rpc, nil}} {
		_, err := pair[0].Write([]byte("x"))
		assert.NoError(t, err, "%s stays open", name)
	}
	buf := make([]byte, 1)
	require.NoError(t, inAtHeld.SetReadDeadline(time.Now().Add(2*time.Second)))
	_, err = inAtHeld.Read(buf)
	assert.NoError(t, err, "a connection another node dialed still carries its messages")

	held.HoldRaft(false)
	again, err := held.Raft().Dial(raft.ServerAddress(peer.Addr().String()), time.Second)
	require.NoError(t, err, "released, it dials again")
	defer again.Close()
	require.NotNil(t, next(t, atPeer, 2*time.Second))
	require.NoError(t, again.Close())
	held.out.mu.Lock()
	defer held.out.mu.Unlock()
	assert.Len(t, held.out.conns, 0, "a closed connection is forgotten")
}
