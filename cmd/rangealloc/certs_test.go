package main

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/certs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runCLI runs the rangealloc command line in-process and returns what it
// printed.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	b, rest := pem.Decode(data)
	require.NotNil(t, b, path)
	require.Empty(t, bytes.TrimSpace(rest))
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return c
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Mode().Perm()
}

func TestCertsInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	out, err := runCLI(t, "certs", "init", "--dir", dir, "--node", "n1=10.0.0.1,node1.example", "--node", "n2= 10.0.0.2 ,fd00::2")
	require.NoError(t, err, out)
	ca := filepath.Join(dir, "ca.crt")
	for _, name := range []string{"ca.key", "ca.crt", "n1.key", "n1.crt", "n2.key", "n2.crt"} {
		assert.Contains(t, out, "wrote "+filepath.Join(dir, name)+" ", "one line per file")
	}
	assert.Contains(t, out, "--tls-cert "+filepath.Join(dir, "n1.crt")+" --tls-key "+filepath.Join(dir, "n1.key")+" --tls-ca "+ca)
	assert.Contains(t, out, "--api-tls-cert")
	assert.Contains(t, out, "--cacert "+ca)
	assert.NotContains(t, out, "using the existing CA")

	assert.Equal(t, os.FileMode(0o700), mode(t, dir))
	assert.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, "ca.key")))
	assert.Equal(t, os.FileMode(0o644), mode(t, ca))
	root := readCert(t, ca)
	assert.True(t, root.IsCA)
	assert.WithinDuration(t, time.Now().AddDate(10, 0, 0), root.NotAfter, time.Hour)
	roots := x509.NewCertPool()
	roots.AddCert(root)

	for id, want := range map[string]struct {
		ips   []string
		names []string
	}{"n1": {[]string{"10.0.0.1"}, []string{"node1.example"}}, "n2": {[]string{"10.0.0.2", "fd00::2"}, nil}} {
		assert.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, id+".key")))
		assert.Equal(t, os.FileMode(0o644), mode(t, filepath.Join(dir, id+".crt")))
		c := readCert(t, filepath.Join(dir, id+".crt"))
		assert.Equal(t, id, c.Subject.CommonName)
		assert.Equal(t, want.names, c.DNSNames)
		var ips []string
		for _, ip := range c.IPAddresses {
			ips = append(ips, ip.String())
		}
		assert.Equal(t, want.ips, ips)
		assert.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, c.ExtKeyUsage)
		assert.WithinDuration(t, time.Now().Add(825*24*time.Hour), c.NotAfter, time.Hour)
		_, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: want.ips[0]})
		require.NoError(t, err)
		// The files are what the node loads.
		f, err := certs.Load(certs.Paths{Cert: filepath.Join(dir, id+".crt"), Key: filepath.Join(dir, id+".key"), CA: ca}, nil)
		require.NoError(t, err)
		_, err = f.ServerConfig(true)
		require.NoError(t, err)
	}
	noTemps(t, dir)
}

// noTemps checks that no temporary file is left in dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), "."), "temporary file %s left", e.Name())
	}
}

func TestCertsInitReusesCAAndRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	_, err := runCLI(t, "certs", "init", "--dir", dir, "--node", "n1=10.0.0.1")
	require.NoError(t, err)
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		return data
	}
	caCrt, caKey, n1Crt, n1Key := read("ca.crt"), read("ca.key"), read("n1.crt"), read("n1.key")

	// A node added later comes from the same CA.
	out, err := runCLI(t, "certs", "init", "--dir", dir, "--node", "n2=10.0.0.2", "--days", "30")
	require.NoError(t, err, out)
	assert.Contains(t, out, "using the existing CA in "+filepath.Join(dir, "ca.crt"))
	assert.NotContains(t, out, "wrote "+filepath.Join(dir, "ca."))
	assert.Equal(t, caCrt, read("ca.crt"))
	assert.Equal(t, caKey, read("ca.key"))
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, filepath.Join(dir, "ca.crt")))
	n2 := readCert(t, filepath.Join(dir, "n2.crt"))
	_, err = n2.Verify(x509.VerifyOptions{Roots: roots})
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(30*24*time.Hour), n2.NotAfter, time.Hour, "--days")

	// An existing node's files are kept unless --force; nothing else is
	// written either.
	_, err = runCLI(t, "certs", "init", "--dir", dir, "--node", "n3=10.0.0.3", "--node", "n1=10.0.0.9")
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "n1.crt"))
	assert.Contains(t, err.Error(), "--force")
	assert.Equal(t, n1Crt, read("n1.crt"))
	assert.Equal(t, n1Key, read("n1.key"))
	assert.NoFileExists(t, filepath.Join(dir, "n3.crt"))
	require.NoError(t, os.Remove(filepath.Join(dir, "n1.crt")))
	_, err = runCLI(t, "certs", "init", "--dir", dir, "--node", "n1=10.0.0.9")
	require.Error(t, err, "a key alone is not overwritten either")
	assert.Contains(t, err.Error(), filepath.Join(dir, "n1.key"))

	out, err = runCLI(t, "certs", "init", "--dir", dir, "--node", "n1=10.0.0.9", "--force")
	require.NoError(t, err, out)
	assert.NotEqual(t, n1Key, read("n1.key"))
	n1 := readCert(t, filepath.Join(dir, "n1.crt"))
	assert.True(t, n1.IPAddresses[0].Equal(net.ParseIP("10.0.0.9")))
	assert.Equal(t, caCrt, read("ca.crt"), "--force never replaces the CA")

	// JSON output lists the files.
	out, err = runCLI(t, "certs", "init", "--dir", dir, "--node", "n4=10.0.0.4", "-o", "json")
	require.NoError(t, err)
	var rep struct {
		CAReused bool `json:"ca_reused"`
		Files    []struct{ Path, Kind, Mode string }
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.True(t, rep.CAReused)
	require.Len(t, rep.Files, 2)
	assert.Equal(t, filepath.Join(dir, "n4.key"), rep.Files[0].Path)
	assert.Equal(t, "0600", rep.Files[0].Mode)
	noTemps(t, dir)
}

func TestCertsInitHalfCA(t *testing.T) {
	dir := t.TempDir()
	_, err := runCLI(t, "certs", "init", "--dir", dir)
	require.NoError(t, err, "a CA alone")
	_, err = runCLI(t, "certs", "init", "--dir", dir)
	assert.ErrorContains(t, err, "nothing to write")

	require.NoError(t, os.Remove(filepath.Join(dir, "ca.key")))
	_, err = runCLI(t, "certs", "init", "--dir", dir, "--node", "n1=10.0.0.1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "ca.crt")+" exists but "+filepath.Join(dir, "ca.key")+" does not")
	assert.NoFileExists(t, filepath.Join(dir, "n1.crt"))

	require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.key"), []byte("not a key"), 0o600))
	_, err = runCLI(t, "certs", "init", "--dir", dir, "--node", "n1=10.0.0.1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "ca.key"))
	assert.Contains(t, err.Error(), "not PEM")
}

func TestCertsInitBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node", "n1"}, `--node "n1": want ID=HOST`},
		{[]string{"--node", "=10.0.0.1"}, `--node "=10.0.0.1": empty ID`},
		{[]string{"--node", "a/b=10.0.0.1"}, `--node "a/b=10.0.0.1": ID "a/b" contains '/'`},
		{[]string{"--node", `a\b=10.0.0.1`}, `ID "a\\b" contains '\\'`},
		{[]string{"--node", "n 1=10.0.0.1"}, `--node "n 1=10.0.0.1": ID "n 1" contains a space`},
		{[]string{"--node", "..=10.0.0.1"}, `starts with '.'`},
		{[]string{"--node", "CA=10.0.0.1"}, `would overwrite the CA's files`},
		{[]string{"--node", "n1=10.0.0.1", "--node", "n1=10.0.0.2"}, `--node "n1=10.0.0.2": node n1 is given twice`},
		{[]string{"--node", "n1="}, `--node "n1=": no hosts`},
		{[]string{"--node", "n1=10.0.0.1,"}, `an empty host`},
		{[]string{"--node", "n1=10.0.0.256"}, `--node "n1=10.0.0.256": host "10.0.0.256": not a valid IP address`},
		{[]string{"--node", "n1=10.0.0"}, `host "10.0.0": not a valid IP address`},
		{[]string{"--node", "n1=10.0.0.1:7081"}, `without a port`},
		{[]string{"--node", "n1=fd00::zz"}, `host "fd00::zz": not a valid IP address`},
		{[]string{"--node", "n1=node_1.example"}, `host "node_1.example": not a valid DNS name`},
		{[]string{"--node", "n1=10.0.0.1", "--days", "0"}, `--days 0`},
		{[]string{"--node", "n1=10.0.0.1", "--days", "-5"}, `--days -5`},
		{[]string{"--node", "n1=10.0.0.1", "--dir", ""}, `--dir: empty`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "tls")
			args := append([]string{"certs", "init", "--dir", dir}, tc.args...)
			_, err := runCLI(t, args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NoDirExists(t, dir, "nothing written on bad input")
		})
	}
}

func TestCertsInitHelp(t *testing.T) {
	out, err := runCLI(t, "certs", "init", "--help")
	require.NoError(t, err)
	assert.Contains(t, out, "Examples:")
	assert.Contains(t, out, "--node n1=10.0.0.1,node1.example")
	out, err = runCLI(t, "--help")
	require.NoError(t, err)
	assert.Contains(t, out, "certs")
}
