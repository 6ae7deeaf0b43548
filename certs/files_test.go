package certs_test

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/certs/certstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadErrors(t *testing.T) {
	b := certstest.New(t, "n1", "n2")
	n1, n2 := b.Node["n1"], b.Node["n2"]
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	read := func(p string) string {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		return string(data)
	}
	certPEM, keyPEM, caPEM := read(n1.Cert), read(n1.Key), read(b.CA)
	missing := filepath.Join(dir, "missing.crt")

	for _, tc := range []struct {
		name string
		p    certs.Paths
		file string // the file the error must name
		want string
	}{
		{"missing certificate", certs.Paths{Cert: missing, Key: n1.Key}, missing, "missing"},
		{"missing key", certs.Paths{Cert: n1.Cert, Key: missing}, missing, "missing"},
		{"missing CA", certs.Paths{CA: missing}, missing, "missing"},
		{"empty certificate", certs.Paths{Cert: file("empty.crt", "\n"), Key: n1.Key}, "empty.crt", "empty"},
		{"certificate not PEM", certs.Paths{Cert: file("der.crt", "\x30\x82\x01\x0a garbage"), Key: n1.Key}, "der.crt", "not PEM"},
		{"certificate cut short", certs.Paths{Cert: file("half.crt", certPEM[:len(certPEM)/2]), Key: n1.Key}, "half.crt", "not PEM"},
		{"garbage after the certificate", certs.Paths{Cert: file("tail.crt", certPEM+"-----BEGIN CERT"), Key: n1.Key}, "tail.crt", "cut short or damaged after PEM block 1"},
		{"certificate file holds a key", certs.Paths{Cert: file("key.crt", keyPEM), Key: n1.Key}, "key.crt", "no CERTIFICATE block (found PRIVATE KEY)"},
		{"certificate block not DER", certs.Paths{Cert: file("bad.crt", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), Key: n1.Key}, "bad.crt", "certificate 1"},
		{"key file holds a certificate", certs.Paths{Cert: n1.Cert, Key: file("cert.key", certPEM)}, "cert.key", "no PRIVATE KEY block (found CERTIFICATE)"},
		{"key cut short", certs.Paths{Cert: n1.Cert, Key: file("half.key", keyPEM[:len(keyPEM)-20])}, "half.key", "not PEM"},
		{"key of another certificate", certs.Paths{Cert: n1.Cert, Key: n2.Key}, n2.Key, "does not match the certificate in " + n1.Cert},
		{"encrypted key", certs.Paths{Cert: n1.Cert, Key: file("enc.key", "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n")}, "enc.key", "encrypted"},
		{"key block not a key", certs.Paths{Cert: n1.Cert, Key: file("junk.key", "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")}, "junk.key", "EC PRIVATE KEY block"},
		{"CA file with no certificate", certs.Paths{CA: file("key.ca", keyPEM)}, "key.ca", "no CERTIFICATE block"},
		{"CA file cut short", certs.Paths{CA: file("half.ca", caPEM[:len(caPEM)-30])}, "half.ca", "not PEM"},
		{"certificate without key", certs.Paths{Cert: n1.Cert}, n1.Cert, "go together"},
		{"key without certificate", certs.Paths{Key: n1.Key}, n1.Key, "go together"},
		{"a directory", certs.Paths{CA: dir}, dir, "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := certs.Load(tc.p, nil)
			require.Error(t, err)
			assert.Nil(t, f)
			assert.Contains(t, err.Error(), tc.file)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	// A file may hold the certificate and its key together.
	both := file("both.pem", certPEM+keyPEM)
	f, err := certs.Load(certs.Paths{Cert: both, Key: both, CA: b.CA}, nil)
	require.NoError(t, err)
	assert.Equal(t, "n1", f.Leaf().Subject.CommonName)
	var fe *certs.FileError
	_, err = certs.Load(certs.Paths{CA: missing}, nil)
	require.True(t, errors.As(err, &fe))
	assert.Equal(t, "CA", fe.Role)
	assert.Equal(t, missing, fe.Path)
}

func TestReloadRotates(t *testing.T) {
	for _, how := range []struct {
		name  string
		write func(*testing.T, string, []byte)
	}{{"in place", writeInPlace}, {"by rename", writeByRename}} {
		t.Run(how.name, func(t *testing.T) {
			b := certstest.New(t, "n1", "n2")
			srv, cli := load(t, b.Node["n1"]), load(t, b.Node["n2"])
			srvCfg, err := srv.ServerConfig(true)
			require.NoError(t, err)
			base, err := cli.ClientConfig()
			require.NoError(t, err)
			cliCfg := certs.ForHost(base, "127.0.0.1")

			changed, err := srv.Reload()
			require.NoError(t, err)
			assert.False(t, changed, "nothing was written")

			// The server's certificate.
			certPEM, keyPEM, err := b.Authority.Issue("n1", []string{"127.0.0.1"}, time.Hour)
			require.NoError(t, err)
			how.write(t, b.Node["n1"].Cert, certPEM)
			how.write(t, b.Node["n1"].Key, keyPEM)
			changed, err = srv.Reload()
			require.NoError(t, err)
			assert.True(t, changed)
			o := exchange(t, srvCfg, cliCfg)
			require.NoError(t, o.clientErr)
			assert.Equal(t, serial(t, certPEM), o.client.PeerCertificates[0].SerialNumber, "the new certificate, same config")

			// The client's certificate.
			certPEM, keyPEM, err = b.Authority.Issue("n2", nil, time.Hour)
			require.NoError(t, err)
			how.write(t, b.Node["n2"].Cert, certPEM)
			how.write(t, b.Node["n2"].Key, keyPEM)
			changed, err = cli.Reload()
			require.NoError(t, err)
			assert.True(t, changed)
			o = exchange(t, srvCfg, cliCfg)
			require.NoError(t, o.serverErr)
			assert.Equal(t, serial(t, certPEM), o.server.PeerCertificates[0].SerialNumber)

			// The CA: both sides move to a new one. Until the server has
			// the new CA it refuses the client's new certificate.
			other := certstest.New(t, "n1", "n2")
			for _, id := range []string{"n1", "n2"} {
				for _, ext := range []string{".crt", ".key"} {
					data, err := os.ReadFile(filepath.Join(other.Dir, id+ext))
					require.NoError(t, err)
					how.write(t, filepath.Join(b.Dir, id+ext), data)
				}
			}
			changed, err = cli.Reload()
			require.NoError(t, err)
			assert.True(t, changed)
			o = exchange(t, srvCfg, cliCfg)
			require.Error(t, o.clientErr, "the client's CA file still names the old CA")

			caPEM, err := os.ReadFile(other.CA)
			require.NoError(t, err)
			how.write(t, b.CA, caPEM)
			for _, f := range []*certs.Files{srv, cli} {
				changed, err = f.Reload()
				require.NoError(t, err)
				assert.True(t, changed)
			}
			o = exchange(t, srvCfg, cliCfg)
			require.NoError(t, o.serverErr)
			require.NoError(t, o.clientErr)
			assert.Equal(t, "n2", certs.PeerID(o.server))
		})
	}
}

func TestReloadKeepsGoodMaterial(t *testing.T) {
	b := certstest.New(t, "n1", "n2")
	srv := load(t, b.Node["n1"])
	srvCfg, err := srv.ServerConfig(true)
	require.NoError(t, err)
	cliCfg := clientConfig(t, b.Node["n2"])
	before := srv.Leaf().SerialNumber

	certPEM, keyPEM, err := b.Authority.Issue("n1", []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	// The cases run in order, each starting from the files the one before
	// left (a nil cert removes the file, a nil key leaves it).
	for _, tc := range []struct {
		name       string
		cert, key  []byte
		file, want string
	}{
		{"certificate half written", certPEM[:len(certPEM)/2], nil, b.Node["n1"].Cert, "not PEM"},
		{"new certificate, old key", certPEM, nil, b.Node["n1"].Key, "does not match"},
		{"garbage key", certPEM, []byte("\x00\x01garbage"), b.Node["n1"].Key, "not PEM"},
		{"certificate removed", nil, keyPEM, b.Node["n1"].Cert, "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cert == nil {
				require.NoError(t, os.Remove(b.Node["n1"].Cert))
			} else {
				writeInPlace(t, b.Node["n1"].Cert, tc.cert)
			}
			if tc.key != nil {
				writeInPlace(t, b.Node["n1"].Key, tc.key)
			}
			changed, err := srv.Reload()
			require.Error(t, err)
			assert.False(t, changed)
			assert.Contains(t, err.Error(), tc.file)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, before, srv.Leaf().SerialNumber)
			o := exchange(t, srvCfg, cliCfg)
			require.NoError(t, o.clientErr)
			assert.Equal(t, before, o.client.PeerCertificates[0].SerialNumber, "the last good certificate still serves")
		})
	}
	writeInPlace(t, b.Node["n1"].Cert, certPEM)
	writeInPlace(t, b.Node["n1"].Key, keyPEM)
	changed, err := srv.Reload()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Equal(t, serial(t, certPEM), srv.Leaf().SerialNumber)
}

func TestWatch(t *testing.T) {
	b := certstest.New(t, "n1", "n2")
	var logs lockedBuffer
	srv, err := certs.Load(b.Node["n1"], bufferLogger(&logs))
	require.NoError(t, err)
	srvCfg, err := srv.ServerConfig(true)
	require.NoError(t, err)
	cliCfg := clientConfig(t, b.Node["n2"])
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); srv.Watch(stop, 20*time.Millisecond) }()
	defer func() { close(stop); <-done }()
	served := func() string {
		o := exchange(t, srvCfg, cliCfg)
		require.NoError(t, o.clientErr)
		return o.client.PeerCertificates[0].SerialNumber.String()
	}

	// A half-written certificate is logged, naming the file, and the old
	// one keeps serving.
	old := served()
	certPEM, keyPEM, err := b.Authority.Issue("n1", []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	writeInPlace(t, b.Node["n1"].Cert, certPEM[:100])
	if !assert.Eventually(t, func() bool { return containsAll(logs.String(), "[WARN]", b.Node["n1"].Cert) },
		5*time.Second, 10*time.Millisecond) {
		t.Fatalf("a warning naming the file; logs:\n%s", logs.String())
	}
	assert.Equal(t, old, served())

	// Written whole, in place and then by rename, each is picked up.
	writeInPlace(t, b.Node["n1"].Key, keyPEM)
	writeInPlace(t, b.Node["n1"].Cert, certPEM)
	require.Eventually(t, func() bool { return served() == serial(t, certPEM).String() }, 5*time.Second, 10*time.Millisecond)
	certPEM, keyPEM, err = b.Authority.Issue("n1", []string{"127.0.0.1"}, time.Hour)
	require.NoError(t, err)
	writeByRename(t, b.Node["n1"].Key, keyPEM)
	writeByRename(t, b.Node["n1"].Cert, certPEM)
	require.Eventually(t, func() bool { return served() == serial(t, certPEM).String() }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, logs.String(), "TLS files usable again")
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestWatchWaitsForSettledFiles drives Watch's reads one by one through a
// CA file rewritten in place: caught after its first certificate, the
// bundle still parses, yet taking it would drop trust in the other CA.
func TestWatchWaitsForSettledFiles(t *testing.T) {
	old, nw := certstest.New(t, "n1", "n2"), certstest.New(t, "n3")
	srv := load(t, old.Node["n1"])
	srvCfg, err := srv.ServerConfig(true)
	require.NoError(t, err)
	fromOld := clientConfig(t, old.Node["n2"])
	fromNew := clientConfig(t, certs.Paths{Cert: nw.Node["n3"].Cert, Key: nw.Node["n3"].Key, CA: old.CA})
	accepts := func(cli *tls.Config) bool { return exchange(t, srvCfg, cli).clientErr == nil }
	require.True(t, accepts(fromOld))
	require.False(t, accepts(fromNew), "a certificate of another CA is refused")

	oldCA, err := os.ReadFile(old.CA)
	require.NoError(t, err)
	newCA, err := os.ReadFile(nw.CA)
	require.NoError(t, err)
	bundle := append(append([]byte(nil), newCA...), oldCA...)

	// The bundle written in place, caught with its first certificate only.
	writeInPlace(t, old.CA, newCA)
	changed, err := srv.Poll()
	require.NoError(t, err)
	assert.False(t, changed, "a CA file read once is not taken")
	assert.True(t, accepts(fromOld), "the CA in use is still trusted")
	writeInPlace(t, old.CA, bundle)
	changed, err = srv.Poll()
	require.NoError(t, err)
	assert.False(t, changed, "new content read once is not taken yet")
	assert.False(t, accepts(fromNew))
	changed, err = srv.Poll()
	require.NoError(t, err)
	assert.True(t, changed, "read twice, it is taken")
	assert.True(t, accepts(fromOld), "the bundle trusts the old CA")
	assert.True(t, accepts(fromNew), "and the new one")

	// A file that does not parse is reported once it stays, and only then.
	writeInPlace(t, old.CA, oldCA[:100])
	_, err = srv.Poll()
	require.NoError(t, err, "not judged on one read")
	_, err = srv.Poll()
	require.Error(t, err)
	assert.Contains(t, err.Error(), old.CA)
	assert.True(t, accepts(fromNew), "the bundle in use stays")

	// Reload takes what it reads at once.
	writeInPlace(t, old.CA, oldCA)
	changed, err = srv.Reload()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.False(t, accepts(fromNew))
	assert.True(t, accepts(fromOld))
}
