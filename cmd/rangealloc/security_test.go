package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSecurityCheck: loopback needs nothing; any other address needs TLS
// (and tokens on the API) or --insecure, and the refusal names the flags.
func TestSecurityCheck(t *testing.T) {
	nodeTLS := securityFlags{tlsCert: "n.crt", tlsKey: "n.key", tlsCA: "ca.crt"}
	full := nodeTLS
	full.apiCert, full.apiKey, full.tokenFile = "n.crt", "n.key", "tokens"
	cases := []struct {
		name       string
		flags      securityFlags
		http, raft string
		wantErr    []string // substrings of the error; nil: no error
		wantOpen   int
	}{
		{"loopback needs nothing", securityFlags{}, "127.0.0.1:7080", "127.0.0.1:7081", nil, 0},
		{"localhost and ::1 are loopback", securityFlags{}, "localhost:7080", "[::1]:7081", nil, 0},
		{"a LAN address without anything", securityFlags{}, "10.0.0.1:7080", "10.0.0.1:7081",
			[]string{"refusing to start", "--raft-addr 10.0.0.1:7081", "--tls-cert", "--http-addr 10.0.0.1:7080", "--api-tls-cert and --token-file", "--insecure"}, 0},
		{"0.0.0.0 is not loopback", securityFlags{}, "127.0.0.1:7080", "0.0.0.0:7081", []string{"--raft-addr 0.0.0.0:7081"}, 0},
		{":: is not loopback", securityFlags{}, "[::]:7080", "127.0.0.1:7081", []string{"--http-addr [::]:7080"}, 0},
		{"an empty host is not loopback", securityFlags{}, ":7080", "127.0.0.1:7081", []string{"--http-addr :7080"}, 0},
		{"node TLS but an open API", nodeTLS, "10.0.0.1:7080", "10.0.0.1:7081", []string{"--http-addr", "--api-tls-cert and --token-file"}, 0},
		{"HTTPS without tokens", securityFlags{apiCert: "a", apiKey: "b"}, "10.0.0.1:7080", "127.0.0.1:7081", []string{"has no --token-file"}, 0},
		{"everything", full, "10.0.0.1:7080", "10.0.0.1:7081", nil, 0},
		{"--insecure serves, and says what is open", securityFlags{insecure: true}, "10.0.0.1:7080", "10.0.0.1:7081", nil, 2},
		{"--tls-cert without --tls-key", securityFlags{tlsCert: "a", tlsCA: "c"}, "127.0.0.1:7080", "127.0.0.1:7081", []string{"--tls-cert and --tls-key go together"}, 0},
		{"--tls-cert without --tls-ca", securityFlags{tlsCert: "a", tlsKey: "b"}, "127.0.0.1:7080", "127.0.0.1:7081", []string{"--tls-ca goes with"}, 0},
		{"--api-client-ca without HTTPS", securityFlags{apiClientCA: "c"}, "127.0.0.1:7080", "127.0.0.1:7081", []string{"--api-client-ca needs --api-tls-cert"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			open, err := c.flags.check(c.http, c.raft)
			if c.wantErr == nil {
				require.NoError(t, err)
				assert.Len(t, open, c.wantOpen)
				return
			}
			require.Error(t, err)
			for _, w := range c.wantErr {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestSecurityID: over TLS a node runs as the ID its certificate names.
func TestSecurityID(t *testing.T) {
	tls := &security{nodeID: "n1"}
	id, err := tls.id("")
	require.NoError(t, err)
	assert.Equal(t, "n1", id, "no --id: the certificate's CN")
	id, err = tls.id("n1")
	require.NoError(t, err)
	assert.Equal(t, "n1", id)
	_, err = tls.id("n2")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--id is "n2", but the certificate of --tls-cert names "n1"`)
	id, err = (&security{}).id("")
	require.NoError(t, err)
	assert.Equal(t, "", id, "without TLS the node keeps or draws its own")
}

// TestSecurityLoadNamesTheFile: a missing or bad file stops the start with
// an error naming the flag and the file.
func TestSecurityLoadNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("not a token line\n"), 0o600))
	missing := filepath.Join(dir, "missing.crt")
	for _, c := range []struct {
		name  string
		flags securityFlags
		want  []string
	}{
		{"node certificate missing", securityFlags{tlsCert: missing, tlsKey: missing, tlsCA: missing}, []string{"--tls-cert/--tls-key/--tls-ca", missing}},
		{"API certificate missing", securityFlags{apiCert: missing, apiKey: missing}, []string{"--api-tls-cert", missing}},
		{"token file bad", securityFlags{tokenFile: bad}, []string{"--token-file", bad, "line 1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.flags.load(hclog.NewNullLogger())
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestServerRefusesShortCleanup: --cleanup-dead-after below
// node.MinCleanupDeadAfter (or negative) is refused before the node
// opens, and writes nothing into the data dir.
func TestServerRefusesShortCleanup(t *testing.T) {
	for _, d := range []string{"-1s", "1s", "9s"} {
		t.Run(d, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			_, err := runCLI(t, "server", "--data-dir", dir, "--cleanup-dead-after", d)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "--cleanup-dead-after "+d+": want 0 (never) or at least 10s")
			assert.NoDirExists(t, dir, "nothing written on bad input")
		})
	}
}
