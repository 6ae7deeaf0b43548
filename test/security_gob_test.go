package test

import (
	"net"
	"net/rpc"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/certs/certstest"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/rangealloc/rangealloc/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The types of a forwarded Read as a hostile peer encodes them: gob
// matches fields by name, so a Services list of one-field structs decodes
// into the node's []service.Spec.
type (
	amplSpec     struct{ HealthCheckNodePort int32 }
	amplReadArgs struct {
		Op       string
		Services []amplSpec
	}
	amplReadReply struct{ Err *rpcErr }
)

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// TestAuditGobAmplificationFromNonMember: over mutual TLS, a node whose
// certificate is of the cluster's CA but names no member (or a removed
// member) has every forwarded call refused, but net/rpc decodes the
// call's arguments with gob before the member check runs. A few MB sent
// make the leader allocate hundreds of MB.
// TestNonMemberCannotAmplify: a node with a certificate of the cluster's
// CA that is not a member sends a forwarded Read whose Services list
// claims 2,000,000 elements of one byte each. net/rpc decodes the
// arguments before the method refuses a non-member; the connection's
// budget ends it first. It made the leader's heap grow 1.3 GB (700 times
// what was sent) before.
func TestNonMemberCannotAmplify(t *testing.T) {
	// Not parallel (docs/TESTING.md): it measures this process's heap,
	// which tests running beside it would grow.
	b := certstest.New(t, "n0", "n9")
	c := cluster.New(t, 1, cluster.Options{Pools: testPools, Tune: func(cfg *node.Config) {
		tc, _ := tlsFiles(t, b, cfg.ID)
		cfg.ServerTLS, cfg.ClientTLS = tc.ServerTLS, tc.ClientTLS
	}})
	l := waitPools(t, c)

	// Dial as n9: a certificate of the CA, not a member.
	tc, _ := tlsFiles(t, b, "n9")
	m, err := transport.Listen("127.0.0.1:0", nil, transport.Options{HandshakeTimeout: 2 * time.Second,
		ServerTLS: tc.ServerTLS, ClientTLS: tc.ClientTLS})
	require.NoError(t, err)
	defer m.Close()
	conn, err := m.DialRPC(l.Addr, 2*time.Second)
	require.NoError(t, err)
	var sent atomic.Int64
	cl := rpc.NewClient(countingConn{Conn: conn, n: &sent})
	defer cl.Close()

	const n = 2_000_000
	args := &amplReadArgs{Op: "pools", Services: make([]amplSpec, n)}

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var s runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			runtime.ReadMemStats(&s)
			if s.HeapAlloc > peak.Load() {
				peak.Store(s.HeapAlloc)
			}
		}
	}()
	var reply amplReadReply
	callErr := cl.Call("Node.Read", args, &reply)
	close(stop)
	wg.Wait()
	require.Error(t, callErr, "the leader ends the connection")

	growth := int64(peak.Load()) - int64(base)
	t.Logf("non-member sent %d bytes; the leader's heap peaked %d MB above the baseline", sent.Load(), growth>>20)
	require.Less(t, growth, int64(64<<20), "%d bytes from a non-member made the leader hold %d MB", sent.Load(), growth>>20)

	// A small call, as a newcomer's probe, is still answered.
	conn2, err := m.DialRPC(l.Addr, 2*time.Second)
	require.NoError(t, err)
	cl2 := rpc.NewClient(conn2)
	defer cl2.Close()
	var small amplReadReply
	require.NoError(t, cl2.Call("Node.Read", &amplReadArgs{Op: "pools"}, &small))
	require.NotNil(t, small.Err)
	require.NotNil(t, small.Err.Domain, "%+v", small.Err)
	assert.Equal(t, fsm.CodePermissionDenied, small.Err.Domain.Code, "and refused, for what it is")
}
