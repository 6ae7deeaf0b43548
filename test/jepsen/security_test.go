package jepsen

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/test/checker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSecurity checks the run's security material without root: a node
// certificate for the node's address that the clients' transport verifies
// (and another run's CA does not), a token file of hashes that gives each
// token its role, the servers' flags, and the token of a --join start in
// its environment only.
func TestSecurity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	sec, err := NewSecurity(dir, false)
	require.NoError(t, err)
	args, err := sec.ServerArgs("n1", "127.0.0.1")
	require.NoError(t, err)
	flag := func(name string) string {
		i := slices.Index(args, name)
		require.GreaterOrEqual(t, i, 0, "%s in %v", name, args)
		return args[i+1]
	}
	assert.NotContains(t, args, "--insecure")
	assert.Equal(t, "https://10.77.1.1:7080", sec.URL("10.77.1.1:7080"))
	assert.Equal(t, []string{"RANGEALLOC_TOKEN=" + sec.Join}, sec.JoinEnv())
	for _, tok := range []string{sec.Admin, sec.Write, sec.Read, sec.Join} {
		for _, a := range args {
			assert.NotContains(t, a, tok, "no token on a command line")
		}
	}
	fi, err := os.Stat(flag("--tls-key"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the node's key")

	// The token file holds hashes only, and each token its role.
	raw, err := os.ReadFile(flag("--token-file"))
	require.NoError(t, err)
	for _, tok := range []string{sec.Admin, sec.Write, sec.Read, sec.Join} {
		assert.NotContains(t, string(raw), tok)
	}
	tokens, err := api.LoadTokens(flag("--token-file"), nil)
	require.NoError(t, err)

	// A node serving HTTPS with its certificate, behind the token guard.
	f, err := certs.Load(certs.Paths{Cert: flag("--api-tls-cert"), Key: flag("--api-tls-key")}, nil)
	require.NoError(t, err)
	cfg, err := f.ServerConfig(false)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"n1","members":[{"id":"n1"}]}`))
	})
	srv := &http.Server{Handler: api.Guard(ok, api.GuardOptions{Tokens: tokens}), TLSConfig: cfg, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)} // the handshake of another CA's client
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	url := sec.URL(ln.Addr().String())
	ctx := context.Background()

	for _, tc := range []struct {
		name, token   string
		read, members bool // GET /v1/cluster; DELETE /v1/cluster/members/x (admin)
	}{{"admin", sec.Admin, true, true}, {"write", sec.Write, true, false}, {"read", sec.Read, true, false},
		{"join", sec.Join, true, false}, {"none", "", false, false}} {
		c := sec.Client(url, 5*time.Second, tc.token)
		_, err := c.Cluster(ctx)
		assert.Equal(t, tc.read, err == nil, "%s token reads the cluster: %v", tc.name, err)
		err = c.RemoveMember(ctx, "x")
		var ce *client.Error
		if tc.members {
			assert.NoError(t, err, "%s token removes a member", tc.name)
		} else {
			require.ErrorAs(t, err, &ce, "%s token removes a member", tc.name)
			assert.Contains(t, []string{api.CodeUnauthenticated, api.CodePermissionDenied}, ce.Code)
		}
	}
	// The write token may allocate, the read token may not.
	_, _, err = sec.Client(url, 5*time.Second, sec.Write).Allocate(ctx, "p", "", "o", client.Options{})
	assert.NoError(t, err, "write token allocates")
	var ce *client.Error
	_, _, err = sec.Client(url, 5*time.Second, sec.Read).Allocate(ctx, "p", "", "o", client.Options{})
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, api.CodePermissionDenied, ce.Code)

	// Another run's CA does not verify this node.
	other, err := NewSecurity(filepath.Join(t.TempDir(), "tls"), false)
	require.NoError(t, err)
	_, err = other.Client(url, 5*time.Second, sec.Admin).Cluster(ctx)
	assert.Error(t, err, "a node of another CA")

	insecure, err := NewSecurity("", true)
	require.NoError(t, err)
	args, err = insecure.ServerArgs("n1", "10.77.1.1")
	require.NoError(t, err)
	assert.Equal(t, []string{"--insecure"}, args)
	assert.Equal(t, "http://10.77.1.1:7080", insecure.URL("10.77.1.1:7080"))
	assert.Nil(t, insecure.JoinEnv())
	assert.Contains(t, insecure.String(), "off")
	assert.Contains(t, sec.String(), "on")
}

// TestCheckAuth checks that a refused attempt fails "credentials accepted".
func TestCheckAuth(t *testing.T) {
	h := checker.History{{Kind: "get", Outcome: checker.OK}, {Kind: "allocate", Outcome: checker.Fail, Err: "RangeFull"}}
	r := CheckAuth(h)
	assert.True(t, r.OK)
	assert.Equal(t, 2, r.Checked)
	for range 11 {
		h = append(h, checker.Op{Kind: "list", Node: "n2", Outcome: checker.Fail, Err: api.CodePermissionDenied})
	}
	h = append(h, checker.Op{Kind: "release", Node: "n1", Outcome: checker.Fail, Err: api.CodeUnauthenticated})
	r = CheckAuth(h)
	assert.False(t, r.OK)
	assert.Len(t, r.Problems, 11, "ten lines, then the count")
	assert.Equal(t, "and 2 more refused attempts", r.Problems[10])
}
