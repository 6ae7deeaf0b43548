package test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/certs/certstest"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// secureProcs is a three-node cluster of real processes with mutual TLS
// between nodes, HTTPS and tokens on the API, and a token per role.
type secureProcs struct {
	ps        []*proc
	certs     *certstest.Bundle
	tokens    map[api.Role]string
	tokenFile string
	hc        *http.Client
}

func newSecureProcs(t *testing.T) *secureProcs {
	s := &secureProcs{certs: certstest.New(t, "n1", "n2", "n3", "n4"), tokens: map[api.Role]string{}}
	tokenFile := filepath.Join(s.certs.Dir, "tokens")
	var lines []string
	for _, r := range []api.Role{api.RoleRead, api.RoleWrite, api.RoleAdmin} {
		tok, err := api.NewToken()
		require.NoError(t, err)
		s.tokens[r] = tok
		lines = append(lines, api.TokenLine(tok, r, "e2e-"+r.String()))
	}
	require.NoError(t, os.WriteFile(tokenFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	f, err := certs.Load(certs.Paths{CA: s.certs.CA}, hclog.NewNullLogger())
	require.NoError(t, err)
	cfg, err := f.ClientConfig()
	require.NoError(t, err)
	s.hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialTLSContext: certs.DialTLS(cfg)}}
	dir := t.TempDir()
	var peers []string
	for i := 1; i <= 3; i++ {
		p := &proc{id: fmt.Sprintf("n%d", i), http: freePort(t), raft: freePort(t), dir: filepath.Join(dir, fmt.Sprintf("n%d", i))}
		s.ps = append(s.ps, p)
		peers = append(peers, fmt.Sprintf("%s=%s=https://%s", p.id, p.raft, p.http))
	}
	s.tokenFile = tokenFile
	for _, p := range s.ps {
		p.args = append([]string{"--peers", strings.Join(peers, ",")}, s.secureArgs(p.id)...)
		p.start(t)
	}
	return s
}

// secureArgs are node id's TLS and token flags.
func (s *secureProcs) secureArgs(id string) []string {
	n := s.certs.Node[id]
	return []string{"--tls-cert", n.Cert, "--tls-key", n.Key, "--tls-ca", n.CA,
		"--api-tls-cert", n.Cert, "--api-tls-key", n.Key, "--token-file", s.tokenFile}
}

// client returns an HTTPS client of p with role r's token (0: none).
func (s *secureProcs) client(p *proc, r api.Role) *client.Client {
	return client.New("https://"+p.http, s.hc).WithToken(s.tokens[r])
}

// waitLeader waits until p knows a leader and serves the default pools.
func (s *secureProcs) waitLeader(t *testing.T, p *proc) *proc {
	t.Helper()
	var leader string
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := s.client(p, api.RoleRead).Cluster(ctx)
		if err != nil || st.Leader.ID == "" {
			return false
		}
		pools, err := s.client(p, api.RoleRead).Pools(ctx, client.Options{})
		leader = st.Leader.ID
		return err == nil && len(pools) == 2
	}, 30*time.Second, 100*time.Millisecond, "no leader via %s", p.id)
	return byID(s.ps, leader)
}

// TestE2ESecureClusterRefusesAttacks: against a cluster with TLS and
// tokens, the attacks that took an open cluster fail and change nothing:
// a forged AppendEntries to a follower's Raft port, from a program
// without a certificate or with one of another CA; forwarded calls
// (RemoveMember, Submit) likewise; and API calls without a token or with
// too weak a role. Members and every allocation stay as they were, and no
// node takes the forged term.
func TestE2ESecureClusterRefusesAttacks(t *testing.T) {
	t.Parallel()
	s := newSecureProcs(t)
	l := s.waitLeader(t, s.ps[0])
	var f *proc
	for _, p := range s.ps {
		if p != l {
			f = p
			break
		}
	}
	ctx := ctxE(t)
	for i := 0; i < 5; i++ {
		_, _, err := s.client(f, api.RoleWrite).Allocate(ctx, "nodeport", "", "honest", client.Options{})
		require.NoError(t, err, "a write token allocates, through a follower")
	}
	st, err := s.client(l, api.RoleRead).Cluster(ctx)
	require.NoError(t, err)
	// Every node must have applied the writes before the state is taken:
	// state reads each node's own (stale) view.
	var before []string
	if !assert.Eventually(t, func() bool {
		before = s.state(t, ctx)
		return strings.Count(before[0], "=honest") == 5 && sameViews(before)
	}, 10*time.Second, 50*time.Millisecond) {
		t.Fatalf("every node applies the honest writes: %v", s.state(t, ctx))
	}

	other := certstest.New(t, "n1", "x9")
	for _, who := range []struct {
		name  string
		paths *certs.Paths
	}{{"no certificate", nil}, {"another CA's certificate", ptr(other.Node["n1"])}} {
		t.Run(who.name, func(t *testing.T) {
			m := attackerMux(t, who.paths, st.ClusterID)
			trans := transport.NewTCPTransport(m.Raft(), hclog.NewNullLogger())
			t.Cleanup(func() { _ = trans.Close() })
			forged := fsm.EncodeBatch([]*fsm.Request{{Kind: fsm.KindTxn, ID: "forged",
				Ops: []fsm.Op{{Kind: fsm.OpAllocate, Pool: "nodeport", Value: "30999", Owner: "forged-on-follower-only"}}}})
			req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte(l.id), Addr: []byte(l.raft)},
				Term: st.Term + 100, PrevLogEntry: 0, PrevLogTerm: 0, LeaderCommitIndex: 1 << 20,
				Entries: []*raft.Log{{Index: 1 << 19, Term: st.Term + 100, Type: raft.LogCommand, Data: forged}}}
			var resp raft.AppendEntriesResponse
			err := trans.AppendEntries(raft.ServerID(f.id), raft.ServerAddress(f.raft), req, &resp)
			require.Error(t, err, "a forged AppendEntries is closed in the handshake")
			assert.False(t, resp.Success)

			_, err = m.DialRPC(l.raft, 2*time.Second)
			require.ErrorIs(t, err, transport.ErrHandshake, "the forwarding RPC too: no RemoveMember, no Submit")
		})
	}

	for _, c := range []struct {
		role   api.Role
		status int
		code   string
	}{{0, 401, api.CodeUnauthenticated}, {api.RoleRead, 403, api.CodePermissionDenied}} {
		_, _, err := s.client(l, c.role).Allocate(ctx, "nodeport", "", "no-right", client.Options{})
		var ae *client.Error
		require.ErrorAs(t, err, &ae, "allocate with role %v", c.role)
		assert.Equal(t, c.status, ae.Status)
		assert.Equal(t, c.code, ae.Code)
		err = s.client(l, c.role).RemoveMember(ctx, f.id)
		require.ErrorAs(t, err, &ae, "remove member with role %v", c.role)
		assert.Equal(t, c.status, ae.Status)
	}
	resp, err := s.hc.Get("https://" + l.http + "/readyz")
	require.NoError(t, err, "/readyz needs no token")
	resp.Body.Close()

	time.Sleep(3 * time.Second) // a forged entry that got in would have spread by now
	after := s.state(t, ctx)
	assert.Equal(t, before, after, "members and allocations unchanged on every node")
	// The forged calls carry the leader's term plus 100: an ordinary
	// election (a loaded machine) moves the term by less.
	for _, p := range s.ps {
		c, err := s.client(p, api.RoleRead).Cluster(ctx)
		require.NoError(t, err)
		assert.Less(t, c.Term, st.Term+100, "%s did not take the forged term", p.id)
	}
}

func ptr[T any](v T) *T { return &v }

// attackerMux is a Mux that dials with p's certificate (nil: plain TCP)
// and names the cluster, as a program with the right cluster ID would.
func attackerMux(t *testing.T, p *certs.Paths, clusterID string) *transport.Mux {
	t.Helper()
	opts := transport.Options{HandshakeTimeout: 2 * time.Second, ClusterID: func() string { return clusterID }}
	if p != nil {
		f, err := certs.Load(*p, hclog.NewNullLogger())
		require.NoError(t, err)
		opts.ServerTLS, err = f.ServerConfig(true)
		require.NoError(t, err)
		opts.ClientTLS, err = f.ClientConfig()
		require.NoError(t, err)
	}
	m, err := transport.Listen("127.0.0.1:0", nil, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// state is every node's view that an attack could change: members and
// the owners of the nodeport pool's allocations, read from each node's
// own state. (Its term may move with an ordinary election; the test
// checks it against the forged one.)
func (s *secureProcs) state(t *testing.T, ctx context.Context) []string {
	t.Helper()
	var out []string
	for _, p := range s.ps {
		c := s.client(p, api.RoleRead)
		st, err := c.Cluster(ctx)
		require.NoError(t, err)
		var members []string
		for _, m := range st.Members {
			members = append(members, fmt.Sprintf("%s/%s/%t", m.ID, m.RaftAddr, m.Voter))
		}
		as, err := c.ListAll(ctx, "nodeport", "", client.Options{Consistency: "stale"})
		require.NoError(t, err)
		var owners []string
		for _, a := range as {
			owners = append(owners, a.Value+"="+a.Owner)
		}
		out = append(out, fmt.Sprintf("%s: members %v, nodeport %v", p.id, members, owners))
	}
	return out
}

// TestE2ESecureJoinAndCLI: a fourth node joins a TLS cluster through
// --join https://… (asking the member's API with a read token and its own
// CA), becomes a voter, and the CLI works over HTTPS with --cacert and
// --token, and says Unauthenticated without a token.
func TestE2ESecureJoinAndCLI(t *testing.T) {
	t.Parallel()
	s := newSecureProcs(t)
	l := s.waitLeader(t, s.ps[0])
	n4 := &proc{id: "n4", http: freePort(t), raft: freePort(t), dir: filepath.Join(t.TempDir(), "n4")}
	n4.args = append([]string{"--join", "https://" + l.http, "--token", s.tokens[api.RoleRead]}, s.secureArgs("n4")...)
	n4.start(t)
	s.ps = append(s.ps, n4)
	require.Eventually(t, func() bool {
		st, err := s.client(l, api.RoleRead).Cluster(ctxE(t))
		if err != nil {
			return false
		}
		for _, m := range st.Members {
			if m.ID == "n4" {
				return m.Voter && m.APIAddr == "https://"+n4.http
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "n4 joins over TLS and becomes a voter")

	addr := "https://" + n4.http
	out, errOut, code := rangealloc(t, addr, "allocate", "nodeport", "--owner", "cli/secure",
		"--cacert", s.certs.CA, "--token", s.tokens[api.RoleWrite])
	require.Equal(t, 0, code, "stderr: %s", errOut)
	assert.Contains(t, out, "cli/secure")
	_, errOut, code = rangealloc(t, addr, "list", "nodeport", "--cacert", s.certs.CA)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "Unauthenticated")
	_, errOut, code = rangealloc(t, addr, "cluster", "remove", "n3", "--cacert", s.certs.CA, "--token", s.tokens[api.RoleWrite])
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "PermissionDenied")
	_, errOut, code = rangealloc(t, addr, "pools", "--token", s.tokens[api.RoleRead])
	assert.Equal(t, 1, code, "without --cacert the cluster's CA is not trusted")
	assert.Contains(t, errOut, "certificate")
}

// TestE2EAPIClientCertificates: with --api-client-ca the API's TLS
// handshake requires a client certificate of that CA on every path,
// /healthz too; the CLI presents one with --cert and --key.
func TestE2EAPIClientCertificates(t *testing.T) {
	t.Parallel()
	b := certstest.New(t, "n1", "ops")
	n := b.Node["n1"]
	tok, err := api.NewToken()
	require.NoError(t, err)
	tokenFile := filepath.Join(b.Dir, "tokens")
	require.NoError(t, os.WriteFile(tokenFile, []byte(api.TokenLine(tok, api.RoleAdmin, "ops")+"\n"), 0o600))
	p := newProcsArgs(t, 1, "--api-tls-cert", n.Cert, "--api-tls-key", n.Key, "--api-client-ca", b.CA, "--token-file", tokenFile)[0]
	addr := "https://" + p.http
	ops := b.Node["ops"]
	require.Eventually(t, func() bool {
		_, _, code := rangealloc(t, addr, "pools", "--cacert", b.CA, "--cert", ops.Cert, "--key", ops.Key, "--token", tok)
		return code == 0
	}, 30*time.Second, 200*time.Millisecond, "served with a client certificate")
	f, err := certs.Load(certs.Paths{CA: b.CA}, hclog.NewNullLogger())
	require.NoError(t, err)
	cfg, err := f.ClientConfig()
	require.NoError(t, err)
	noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialTLSContext: certs.DialTLS(cfg)}}
	for _, path := range []string{"/healthz", "/v1/pools"} {
		_, err := noCert.Get(addr + path)
		require.Error(t, err, "%s without a client certificate", path)
	}
	_, errOut, code := rangealloc(t, addr, "pools", "--cacert", b.CA, "--token", tok)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "certificate")
}

// sameViews reports whether every node's line of state, without its node
// name, is the same.
func sameViews(lines []string) bool {
	for _, l := range lines[1:] {
		_, a, _ := strings.Cut(l, ": ")
		_, b, _ := strings.Cut(lines[0], ": ")
		if a != b {
			return false
		}
	}
	return true
}
