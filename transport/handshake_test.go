package transport

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// muxOf returns a Mux whose cluster ID is *id.
func muxOf(t *testing.T, id *atomic.Value, raftClosed bool) *Mux {
	t.Helper()
	m, err := Listen("127.0.0.1:0", nil, Options{HandshakeTimeout: time.Second, RaftClosed: raftClosed,
		ClusterID: func() string { return id.Load().(string) }})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

func idOf(s string) *atomic.Value {
	v := &atomic.Value{}
	v.Store(s)
	return v
}

func TestHandshakeClusterID(t *testing.T) {
	noLeak(t)
	cases := []struct {
		dialer, acceptor string
		ok               bool
	}{
		{"c1", "c1", true},
		{"", "c1", true}, // a node without state joins any cluster
		{"c1", "", true},
		{"", "", true},
		{"c1", "c2", false},
	}
	for _, c := range cases {
		t.Run(c.dialer+"->"+c.acceptor, func(t *testing.T) {
			d, a := muxOf(t, idOf(c.dialer), false), muxOf(t, idOf(c.acceptor), false)
			raftConns, rpcConns := acceptor(t, a.Raft()), acceptor(t, a.RPC())
			for _, p := range []struct {
				name  string
				dial  func() (net.Conn, error)
				conns <-chan net.Conn
			}{
				{"raft", func() (net.Conn, error) { return d.Raft().Dial(raft.ServerAddress(a.Addr().String()), time.Second) }, raftConns},
				{"rpc", func() (net.Conn, error) { return d.DialRPC(a.Addr().String(), time.Second) }, rpcConns},
			} {
				conn, err := p.dial()
				if !c.ok {
					require.ErrorIs(t, err, ErrHandshake, "%s dial across clusters", p.name)
					assert.Contains(t, err.Error(), "the peer belongs to cluster c2, this node to cluster c1")
					assert.Nil(t, next(t, p.conns, 200*time.Millisecond), "the acceptor hands nothing to %s", p.name)
					continue
				}
				require.NoError(t, err, p.name)
				conn.Close()
				assert.NotNil(t, next(t, p.conns, 2*time.Second), "%s connection handed over", p.name)
			}
		})
	}
}

func TestHandshakeRefusesOtherVersion(t *testing.T) {
	noLeak(t)
	a := muxOf(t, idOf("c1"), false)
	rpcConns := acceptor(t, a.RPC())
	conn, err := net.Dial("tcp", a.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte{ProtoRPC, 9, 2, 'c', '1'})
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
	hello := make([]byte, 4)
	_, err = io.ReadFull(conn, hello)
	require.NoError(t, err, "the acceptor answers with its own hello, so the dialer learns why")
	assert.Equal(t, []byte{ProtocolVersion, 2, 'c', '1'}, hello)
	assertClosedByPeer(t, conn)
	assert.Nil(t, next(t, rpcConns, 100*time.Millisecond))
}

func TestRaftClosedUntilOpened(t *testing.T) {
	noLeak(t)
	d, a := muxOf(t, idOf(""), false), muxOf(t, idOf(""), true)
	raftConns, rpcConns := acceptor(t, a.Raft()), acceptor(t, a.RPC())
	_, err := d.Raft().Dial(raft.ServerAddress(a.Addr().String()), time.Second)
	require.ErrorIs(t, err, ErrHandshake, "Raft is closed")
	conn, err := d.DialRPC(a.Addr().String(), time.Second)
	require.NoError(t, err, "the forwarding RPC is open: a node that is starting answers probes")
	conn.Close()
	require.NotNil(t, next(t, rpcConns, 2*time.Second))
	a.OpenRaft()
	conn, err = d.Raft().Dial(raft.ServerAddress(a.Addr().String()), time.Second)
	require.NoError(t, err)
	conn.Close()
	require.NotNil(t, next(t, raftConns, 2*time.Second))
}

func TestHandshakeSeesANewClusterID(t *testing.T) {
	noLeak(t)
	id := idOf("")
	d, a := muxOf(t, id, false), muxOf(t, idOf("c2"), false)
	acceptor(t, a.RPC())
	conn, err := d.DialRPC(a.Addr().String(), time.Second)
	require.NoError(t, err, "no cluster yet")
	conn.Close()
	id.Store("c1") // the node learned its cluster
	_, err = d.DialRPC(a.Addr().String(), time.Second)
	require.ErrorIs(t, err, ErrHandshake, "new connections carry the cluster ID learned")
}
