package transport

import (
	"crypto/tls"
	"net"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/certs/certstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tlsMux returns a Mux of cluster c1 speaking mutual TLS with the files
// of p (nil files: plain TCP).
func tlsMux(t *testing.T, f *certs.Files) *Mux {
	t.Helper()
	opts := Options{HandshakeTimeout: time.Second, ClusterID: func() string { return "c1" }}
	if f != nil {
		var err error
		opts.ServerTLS, err = f.ServerConfig(true)
		require.NoError(t, err)
		opts.ClientTLS, err = f.ClientConfig()
		require.NoError(t, err)
	}
	m, err := Listen("127.0.0.1:0", nil, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

func load(t *testing.T, p certs.Paths) *certs.Files {
	t.Helper()
	f, err := certs.Load(p, hclog.NewNullLogger())
	require.NoError(t, err)
	return f
}

// dials are the two ways a node connects to another's Mux.
var dials = []struct {
	name  string
	dial  func(d *Mux, addr string) (net.Conn, error)
	conns func(a *Mux) net.Listener
}{
	{"raft", func(d *Mux, addr string) (net.Conn, error) {
		return d.Raft().Dial(raft.ServerAddress(addr), time.Second)
	},
		func(a *Mux) net.Listener { return a.Raft() }},
	{"rpc", func(d *Mux, addr string) (net.Conn, error) { return d.DialRPC(addr, time.Second) },
		func(a *Mux) net.Listener { return a.RPC() }},
}

// TestTLSBetweenNodes: two nodes of one CA connect on both protocols, and
// the acceptor learns the dialer's node ID from its certificate.
func TestTLSBetweenNodes(t *testing.T) {
	noLeak(t)
	b := certstest.New(t, "n1", "n2")
	d, a := tlsMux(t, load(t, b.Node["n1"])), tlsMux(t, load(t, b.Node["n2"]))
	for _, p := range dials {
		t.Run(p.name, func(t *testing.T) {
			conns := acceptor(t, p.conns(a))
			conn, err := p.dial(d, a.Addr().String())
			require.NoError(t, err)
			defer conn.Close()
			got := next(t, conns, 2*time.Second)
			require.NotNil(t, got, "connection handed over")
			id, secure := PeerID(got)
			assert.True(t, secure)
			assert.Equal(t, "n1", id, "the acceptor knows the dialer by its certificate")
		})
	}
}

// TestTLSRefusesStrangers: a peer with another CA's certificate, a TLS
// dialer to a plaintext port, and a plaintext dialer to a TLS port are all
// closed during the handshake, and nothing reaches Raft or the RPC.
func TestTLSRefusesStrangers(t *testing.T) {
	noLeak(t)
	ours, theirs := certstest.New(t, "n1", "n2"), certstest.New(t, "n1", "x9")
	cases := []struct {
		name             string
		dialer, acceptor *certs.Files
	}{
		{"another CA's node dials", load(t, theirs.Node["x9"]), load(t, ours.Node["n2"])},
		{"dials a node of another CA", load(t, ours.Node["n1"]), load(t, theirs.Node["x9"])},
		{"plaintext dials TLS", nil, load(t, ours.Node["n2"])},
		{"TLS dials plaintext", load(t, ours.Node["n1"]), nil},
	}
	for _, c := range cases {
		for _, p := range dials {
			t.Run(c.name+"/"+p.name, func(t *testing.T) {
				d, a := tlsMux(t, c.dialer), tlsMux(t, c.acceptor)
				conns := acceptor(t, p.conns(a))
				conn, err := p.dial(d, a.Addr().String())
				if err == nil {
					conn.Close()
				}
				require.ErrorIs(t, err, ErrHandshake)
				assert.Nil(t, next(t, conns, 200*time.Millisecond), "the acceptor hands nothing over")
			})
		}
	}
}

// TestTLSNeedsClientCertificate: a TLS client that verifies the node but
// presents no certificate, as a forged-AppendEntries program would, is
// closed before it can name a protocol.
func TestTLSNeedsClientCertificate(t *testing.T) {
	noLeak(t)
	b := certstest.New(t, "n2")
	a := tlsMux(t, load(t, b.Node["n2"]))
	conns := acceptor(t, a.Raft())
	f := load(t, certs.Paths{CA: b.CA})
	cfg, err := f.ClientConfig()
	require.NoError(t, err)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", a.Addr().String(), certs.ForHost(cfg, a.Addr().String()))
	if err == nil { // TLS 1.3: the server judges the client's certificate after the client's handshake ends
		defer conn.Close()
		_, _ = conn.Write([]byte{ProtoRaft, ProtocolVersion, 2, 'c', '1'})
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
		_, err = conn.Read(make([]byte, 8))
	}
	require.Error(t, err, "closed in the handshake")
	assert.Nil(t, next(t, conns, 200*time.Millisecond), "nothing reaches Raft")
}

// TestTLSExpiredCertificate: a node whose certificate has expired can
// neither dial nor be dialed.
func TestTLSExpiredCertificate(t *testing.T) {
	noLeak(t)
	b := certstest.New(t, "n1", "n2")
	ca, err := certs.LoadCA(b.CA, b.Dir+"/ca.key")
	require.NoError(t, err)
	certPEM, keyPEM, err := ca.IssueAt("n3", []string{"127.0.0.1"}, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	expired := certs.Paths{Cert: b.Dir + "/n3.crt", Key: b.Dir + "/n3.key", CA: b.CA}
	require.NoError(t, os.WriteFile(expired.Cert, certPEM, 0o600))
	require.NoError(t, os.WriteFile(expired.Key, keyPEM, 0o600))
	good, old := load(t, b.Node["n1"]), load(t, expired)
	for _, c := range []struct {
		name             string
		dialer, acceptor *certs.Files
	}{{"expired dials", old, good}, {"dials expired", good, old}} {
		t.Run(c.name, func(t *testing.T) {
			d, a := tlsMux(t, c.dialer), tlsMux(t, c.acceptor)
			conns := acceptor(t, a.Raft())
			_, err := d.Raft().Dial(raft.ServerAddress(a.Addr().String()), time.Second)
			require.ErrorIs(t, err, ErrHandshake)
			assert.Nil(t, next(t, conns, 200*time.Millisecond))
		})
	}
}

// TestTLSRotation: a node's certificate files replaced on disk are used by
// its next connections, without a new Mux.
func TestTLSRotation(t *testing.T) {
	noLeak(t)
	b := certstest.New(t, "n1", "n2")
	f1 := load(t, b.Node["n1"])
	d, a := tlsMux(t, f1), tlsMux(t, load(t, b.Node["n2"]))
	conns := acceptor(t, a.RPC())
	serial := func() string {
		conn, err := d.DialRPC(a.Addr().String(), time.Second)
		require.NoError(t, err)
		defer conn.Close()
		got := next(t, conns, 2*time.Second)
		require.NotNil(t, got)
		return got.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	ca, err := certs.LoadCA(b.CA, b.Dir+"/ca.key")
	require.NoError(t, err)
	certPEM, keyPEM, err := ca.Issue("n1", []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(b.Node["n1"].Cert, certPEM, 0o600))
	require.NoError(t, os.WriteFile(b.Node["n1"].Key, keyPEM, 0o600))
	changed, err := f1.Reload()
	require.NoError(t, err)
	require.True(t, changed)
	after := serial()
	assert.NotEqual(t, before, after, "the new certificate is presented")
}

// TestTLSHandshakeThatStalls: a peer that opens a connection to a TLS port
// and stops partway through its ClientHello (or sends nothing) is closed at
// the handshake timeout, and holds nothing of Raft's or the RPC's.
func TestTLSHandshakeThatStalls(t *testing.T) {
	noLeak(t)
	b := certstest.New(t, "n2")
	a := tlsMux(t, load(t, b.Node["n2"]))
	raftConns, rpcConns := acceptor(t, a.Raft()), acceptor(t, a.RPC())
	for _, sent := range [][]byte{nil, {0x16, 0x03, 0x01, 0x02, 0x00}} { // nothing; a record header promising 512 bytes
		conn, err := net.Dial("tcp", a.Addr().String())
		require.NoError(t, err)
		_, err = conn.Write(sent)
		require.NoError(t, err)
		start := time.Now()
		assertClosedByPeer(t, conn)
		assert.Less(t, time.Since(start), 2500*time.Millisecond, "closed at the 1 s handshake timeout")
		conn.Close()
	}
	assert.Nil(t, next(t, raftConns, 100*time.Millisecond))
	assert.Nil(t, next(t, rpcConns, 100*time.Millisecond))
}

// TestHandshakeFloodBounded: a host without a certificate opens 2,000
// connections and sends each a TLS record header announcing 16 KiB. The
// Mux holds at most MaxPendingConns of them in their handshake and closes
// the rest at once (it held all, each with a goroutine and a record
// buffer); once the flood ends, a node of the cluster connects again.
func TestHandshakeFloodBounded(t *testing.T) {
	b := certstest.New(t, "n1", "n2")
	tlsOf := func(id string) (*tls.Config, *tls.Config) {
		f := load(t, b.Node[id])
		sc, err := f.ServerConfig(true)
		require.NoError(t, err)
		cc, err := f.ClientConfig()
		require.NoError(t, err)
		return sc, cc
	}
	sc, cc := tlsOf("n1")
	m, err := Listen("127.0.0.1:0", nil, Options{ServerTLS: sc, ClientTLS: cc, HandshakeTimeout: 30 * time.Second})
	require.NoError(t, err)
	defer m.Close()

	const n = 2000
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", m.Addr().String())
		require.NoError(t, err)
		_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x40, 0x00})
		conns = append(conns, c)
	}
	require.Eventually(t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.naming) == MaxPendingConns
	}, 10*time.Second, 10*time.Millisecond, "the Mux holds MaxPendingConns in their handshake")
	time.Sleep(200 * time.Millisecond)
	m.mu.Lock()
	pending := len(m.naming)
	m.mu.Unlock()
	assert.Equal(t, MaxPendingConns, pending, "and no more")

	for _, c := range conns {
		c.Close()
	}
	conns = nil
	sc2, cc2 := tlsOf("n2")
	other, err := Listen("127.0.0.1:0", nil, Options{ServerTLS: sc2, ClientTLS: cc2})
	require.NoError(t, err)
	defer other.Close()
	require.Eventually(t, func() bool {
		c, err := other.DialRPC(m.Addr().String(), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "a node of the cluster connects once the flood ends")
}
