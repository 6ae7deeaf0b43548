package certs_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/certs/certstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, rest := pem.Decode(certPEM)
	require.NotNil(t, b)
	require.Empty(t, rest)
	require.Equal(t, "CERTIFICATE", b.Type)
	c, err := x509.ParseCertificate(b.Bytes)
	require.NoError(t, err)
	return c
}

func TestCAIssue(t *testing.T) {
	ca, err := certs.NewCA("rangealloc CA", 10*365*24*time.Hour)
	require.NoError(t, err)
	root := ca.Certificate()
	assert.True(t, root.IsCA)
	assert.True(t, root.MaxPathLenZero)
	assert.NotZero(t, root.KeyUsage&x509.KeyUsageCertSign)
	assert.Equal(t, elliptic.P256(), root.PublicKey.(*ecdsa.PublicKey).Curve)
	assert.Equal(t, root.Raw, parseCert(t, ca.CertPEM()).Raw)

	start := time.Now()
	certPEM, keyPEM, err := ca.Issue("n1", []string{"10.0.0.1", "fd00::1", "node1.example", "10.0.0.1", "NODE1.example"}, 825*24*time.Hour)
	require.NoError(t, err)
	c := parseCert(t, certPEM)
	assert.Equal(t, "n1", c.Subject.CommonName)
	assert.Equal(t, []string{"node1.example"}, c.DNSNames, "repeats dropped, case-insensitively")
	require.Len(t, c.IPAddresses, 2)
	assert.True(t, c.IPAddresses[0].Equal(net.ParseIP("10.0.0.1")))
	assert.True(t, c.IPAddresses[1].Equal(net.ParseIP("fd00::1")))
	assert.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, c.ExtKeyUsage)
	assert.False(t, c.IsCA)
	assert.True(t, c.NotBefore.Before(start.Add(-time.Minute)), "valid from a little in the past")
	assert.WithinDuration(t, start.Add(825*24*time.Hour), c.NotAfter, time.Minute)
	assert.Greater(t, c.SerialNumber.BitLen(), 64, "a random 128-bit serial")
	assert.LessOrEqual(t, c.SerialNumber.BitLen(), 128)
	assert.Equal(t, elliptic.P256(), c.PublicKey.(*ecdsa.PublicKey).Curve)
	_, err = c.Verify(x509.VerifyOptions{Roots: pool(root), DNSName: "node1.example", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	kb, _ := pem.Decode(keyPEM)
	require.Equal(t, "PRIVATE KEY", kb.Type)

	certPEM, _, err = ca.Issue("n1", nil, 20*365*24*time.Hour)
	require.NoError(t, err)
	assert.Equal(t, root.NotAfter, parseCert(t, certPEM).NotAfter, "never past the CA's own expiry")

	for _, tc := range []struct {
		id    string
		hosts []string
		d     time.Duration
		want  string
	}{
		{"", nil, time.Hour, "id"},
		{string(make([]byte, 65)), nil, time.Hour, "1 to 64"},
		{"n1", nil, 0, "positive"},
		{"n1", []string{""}, time.Hour, "empty host"},
		{"n1", []string{"10.0.0.256"}, time.Hour, `host "10.0.0.256": not a valid IP address`},
		{"n1", []string{"10.0.0.1:7081"}, time.Hour, "without a port"},
		{"n1", []string{"fe80::1%eth0"}, time.Hour, "zone"},
		{"n1", []string{"-bad.example"}, time.Hour, "starts or ends with '-'"},
		{"n1", []string{"a..b"}, time.Hour, "empty label"},
		{"n1", []string{"under_score.example"}, time.Hour, "not a letter"},
		{"n1", []string{"*.example"}, time.Hour, "not a letter"},
	} {
		_, _, err := ca.Issue(tc.id, tc.hosts, tc.d)
		assert.ErrorContains(t, err, tc.want, "%q %q", tc.id, tc.hosts)
	}
	_, err = certs.NewCA("", time.Hour)
	assert.Error(t, err)
	_, err = certs.NewCA("x", 0)
	assert.Error(t, err)
}

func pool(cs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range cs {
		p.AddCert(c)
	}
	return p
}

func TestLoadCA(t *testing.T) {
	b := certstest.New(t, "n1")
	caKey := filepath.Join(b.Dir, "ca.key")
	ca, err := certs.LoadCA(b.CA, caKey)
	require.NoError(t, err)
	assert.Equal(t, b.Authority.Certificate().Raw, ca.Certificate().Raw)
	certPEM, _, err := ca.Issue("n2", []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	_, err = parseCert(t, certPEM).Verify(x509.VerifyOptions{Roots: pool(b.Authority.Certificate())})
	require.NoError(t, err, "a loaded CA issues certificates the original's pool accepts")

	other := certstest.New(t)
	missing := filepath.Join(b.Dir, "nope.key")
	for _, tc := range []struct {
		name, cert, key, file, want string
	}{
		{"missing key", b.CA, missing, missing, "missing"},
		{"missing certificate", missing, caKey, missing, "missing"},
		{"a node certificate", b.Node["n1"].Cert, b.Node["n1"].Key, b.Node["n1"].Cert, "not a CA"},
		{"another CA's key", b.CA, filepath.Join(other.Dir, "ca.key"), filepath.Join(other.Dir, "ca.key"), "does not match the CA certificate"},
		{"key and certificate swapped", caKey, b.CA, caKey, "no CERTIFICATE block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := certs.LoadCA(tc.cert, tc.key)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.file)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestCertstestHosts(t *testing.T) {
	b := certstest.New(t, "n1=10.0.0.1,node1.example", "n2")
	require.Len(t, b.Node, 2)
	for id, hosts := range map[string][]string{"n1": {"localhost", "node1.example"}, "n2": {"localhost"}} {
		p := b.Node[id]
		assert.Equal(t, b.CA, p.CA)
		data, err := os.ReadFile(p.Cert)
		require.NoError(t, err)
		c := parseCert(t, data)
		assert.Equal(t, id, c.Subject.CommonName)
		assert.Equal(t, hosts, c.DNSNames)
	}
	data, err := os.ReadFile(b.Node["n1"].Cert)
	require.NoError(t, err)
	assert.Len(t, parseCert(t, data).IPAddresses, 3, "127.0.0.1, ::1 and 10.0.0.1")
}
