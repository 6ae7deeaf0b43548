package test

import (
	"net/rpc"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/certs/certstest"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/rangealloc/rangealloc/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The forwarding RPC's messages, as gob sees them (node/internal/wire):
// gob matches fields by name, so these decode the node's answers.
type (
	rpcErr struct {
		Domain                      *fsm.Error
		NotLeader, Unknown, Invalid bool
		Msg                         string
	}
	rpcCallReply   struct{ Err *rpcErr }
	rpcJoinReply   struct{ Err *rpcErr }
	rpcSubmitArgs  struct{ Entry []byte }
	rpcSubmitReply struct {
		Result []byte
		Err    *rpcErr
	}
)

// tlsFiles returns TLS configs of the node id of bundle b.
func tlsFiles(t *testing.T, b *certstest.Bundle, id string) (server, client node.Config) {
	t.Helper()
	f, err := certs.Load(b.Node[id], hclog.NewNullLogger())
	require.NoError(t, err)
	server.ServerTLS, err = f.ServerConfig(true)
	require.NoError(t, err)
	server.ClientTLS, err = f.ClientConfig()
	require.NoError(t, err)
	return server, server
}

// tlsCluster starts three nodes speaking mutual TLS with certificates of
// b (which must hold n0, n1 and n2).
func tlsCluster(t *testing.T, b *certstest.Bundle) *cluster.Cluster {
	return cluster.New(t, 3, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		tc, _ := tlsFiles(t, b, cfg.ID)
		cfg.ServerTLS, cfg.ClientTLS = tc.ServerTLS, tc.ClientTLS
	}})
}

// dialAs opens the forwarding RPC of the node at addr as the holder of
// id's certificate (plain TCP when id is ""), naming cluster clusterID.
func dialAs(t *testing.T, b *certstest.Bundle, id, addr, clusterID string) (*rpc.Client, error) {
	t.Helper()
	opts := transport.Options{HandshakeTimeout: 2 * time.Second, ClusterID: func() string { return clusterID }}
	if id != "" {
		tc, _ := tlsFiles(t, b, id)
		opts.ServerTLS, opts.ClientTLS = tc.ServerTLS, tc.ClientTLS
	}
	m, err := transport.Listen("127.0.0.1:0", nil, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	conn, err := m.DialRPC(addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	c := rpc.NewClient(conn)
	t.Cleanup(func() { _ = c.Close() })
	return c, nil
}

// TestForwardingNeedsMembership: over TLS, the leader takes forwarded
// calls only from members of the configuration. A node with a certificate
// of the cluster's CA that is not a member may probe and join as itself,
// but neither remove a member, nor commit an allocation, nor join under
// another node's ID; a plaintext caller does not get past the handshake.
func TestForwardingNeedsMembership(t *testing.T) {
	t.Parallel()
	b := certstest.New(t, "n0", "n1", "n2", "n9")
	c := tlsCluster(t, b)
	l := waitPools(t, c)
	ctx := ctxT(t, 30*time.Second)
	f := follower(c, l)
	_, err := f.Node.Allocate(ctx, "ip", "10.96.0.40", "through-a-follower", 0, "")
	require.NoError(t, err, "members forward over TLS")
	before, err := l.Node.Cluster()
	require.NoError(t, err)

	_, err = dialAs(t, b, "", l.Addr, l.Node.ClusterID())
	require.ErrorIs(t, err, transport.ErrHandshake, "a plaintext caller is closed in the handshake")

	stranger, err := dialAs(t, b, "n9", l.Addr, l.Node.ClusterID())
	require.NoError(t, err, "a certificate of the cluster's CA gets through TLS")
	var remove rpcCallReply
	require.NoError(t, stranger.Call("Node.RemoveMember", f.ID, &remove))
	require.NotNil(t, remove.Err, "RemoveMember from a non-member")
	require.NotNil(t, remove.Err.Domain, "%+v", remove.Err)
	assert.Equal(t, fsm.CodePermissionDenied, remove.Err.Domain.Code)

	entry := fsm.EncodeBatch([]*fsm.Request{{Kind: fsm.KindTxn, ID: "forged",
		Ops: []fsm.Op{{Kind: fsm.OpAllocate, Pool: "ip", Value: "10.96.0.41", Owner: "forged"}}}})
	var submit rpcSubmitReply
	require.NoError(t, stranger.Call("Node.Submit", &rpcSubmitArgs{Entry: entry}, &submit))
	require.NotNil(t, submit.Err)
	require.NotNil(t, submit.Err.Domain, "%+v", submit.Err)
	assert.Equal(t, fsm.CodePermissionDenied, submit.Err.Domain.Code)

	var join rpcJoinReply
	require.NoError(t, stranger.Call("Node.Join", fsm.Member{ID: f.ID, RaftAddr: "127.0.0.1:1"}, &join))
	require.NotNil(t, join.Err, "joining under another node's ID")
	require.NotNil(t, join.Err.Domain, "%+v", join.Err)
	assert.Equal(t, fsm.CodePermissionDenied, join.Err.Domain.Code)

	// The gate tells members apart: the same call with a member's
	// certificate gets past it (to MemberNotFound for an unknown ID).
	member, err := dialAs(t, b, f.ID, l.Addr, l.Node.ClusterID())
	require.NoError(t, err)
	var unknown rpcCallReply
	require.NoError(t, member.Call("Node.RemoveMember", "nobody", &unknown))
	require.NotNil(t, unknown.Err)
	require.NotNil(t, unknown.Err.Domain, "%+v", unknown.Err)
	assert.Equal(t, fsm.CodeMemberNotFound, unknown.Err.Domain.Code)

	after, err := l.Node.Cluster()
	require.NoError(t, err)
	assert.Equal(t, membership(before), membership(after), "membership unchanged")
	_, err = l.Node.Get(ctx, node.Linearizable, "ip", "10.96.0.41")
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeNotAllocated}, "the forged allocation was not committed")
}

// TestRaftPortNeedsMembership: over TLS, a node whose certificate is of
// the cluster's CA but names no member cannot speak Raft to a follower: a
// well-formed AppendEntries (a higher term, the follower's last entry as
// the previous one, a forged allocation committed at once) is closed with
// its connection, and the follower neither applies it nor takes its term.
// A member that is removed can open none either.
func TestRaftPortNeedsMembership(t *testing.T) {
	t.Parallel()
	b := certstest.New(t, "n0", "n1", "n2", "n9")
	c := tlsCluster(t, b)
	l := waitPools(t, c)
	f := follower(c, l)
	ctx := ctxT(t, 30*time.Second)
	_, err := l.Node.Allocate(ctx, "ip", "10.96.0.50", "honest", 0, "")
	require.NoError(t, err)

	forge := func(as string) error {
		tc, _ := tlsFiles(t, b, as)
		m, err := transport.Listen("127.0.0.1:0", nil, transport.Options{HandshakeTimeout: 2 * time.Second,
			ClusterID: func() string { return l.Node.ClusterID() }, ServerTLS: tc.ServerTLS, ClientTLS: tc.ClientTLS})
		require.NoError(t, err)
		defer m.Close()
		trans := transport.NewTCPTransport(m.Raft(), hclog.NewNullLogger())
		defer trans.Close()
		st := f.Node.Stats()
		last, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
		lastTerm, _ := strconv.ParseUint(st["last_log_term"], 10, 64)
		term, _ := strconv.ParseUint(st["term"], 10, 64)
		entry := fsm.EncodeBatch([]*fsm.Request{{Kind: fsm.KindTxn, ID: "forged-" + as,
			Ops: []fsm.Op{{Kind: fsm.OpAllocate, Pool: "ip", Value: "10.96.0.66", Owner: "forged-by-" + as}}}})
		req := &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(as),
				Addr: trans.EncodePeer(raft.ServerID(as), raft.ServerAddress(m.Addr().String()))},
			Term: term + 100, PrevLogEntry: last, PrevLogTerm: lastTerm, LeaderCommitIndex: last + 1,
			Entries: []*raft.Log{{Index: last + 1, Term: term + 100, Type: raft.LogCommand, Data: entry}},
		}
		var resp raft.AppendEntriesResponse
		return trans.AppendEntries(raft.ServerID(f.ID), raft.ServerAddress(f.Addr), req, &resp)
	}
	// The forged calls carry the follower's term plus 100. A term that
	// moves by less is an ordinary election of a loaded machine's cluster;
	// one that reaches the forged term is the forgery adopted.
	termOf := func() uint64 {
		term, err := strconv.ParseUint(f.Node.Stats()["term"], 10, 64)
		require.NoError(t, err)
		return term
	}
	before := termOf()
	require.Error(t, forge("n9"), "a non-member's Raft connection is closed")
	time.Sleep(300 * time.Millisecond)
	_, err = f.Node.LocalState().Get("ip", "10.96.0.66")
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeNotAllocated}, "nothing forged applied")
	assert.Less(t, termOf(), before+100, "the follower did not take the forged term")
	_, err = l.Node.Allocate(ctx, "ip", "10.96.0.51", "after", 0, "")
	require.NoError(t, err, "the cluster goes on")

	var gone *cluster.Member
	for _, m := range c.Live() {
		if m != l && m != f {
			gone = m
		}
	}
	require.NoError(t, l.Node.RemoveMember(ctx, gone.ID, ""))
	c.Kill(gone.Index)
	require.Eventually(t, func() bool {
		st, err := f.Node.Cluster()
		return err == nil && len(st.Members) == 2
	}, 10*time.Second, 20*time.Millisecond, "the follower learns of the removal")
	before = termOf()
	require.Error(t, forge(gone.ID), "a removed member's certificate opens no Raft connection")
	time.Sleep(300 * time.Millisecond)
	_, err = f.Node.LocalState().Get("ip", "10.96.0.66")
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeNotAllocated})
	assert.Less(t, termOf(), before+100, "the follower did not take the forged term")
}
