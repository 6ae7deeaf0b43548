package certs_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/certs/certstest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMutualTLS(t *testing.T) {
	b := certstest.New(t, "n1", "n2")
	srv := serverConfig(t, b.Node["n1"], true)
	base, err := load(t, b.Node["n2"]).ClientConfig()
	require.NoError(t, err)

	byName := base.Clone()
	byName.ServerName = "localhost" // what a dialer of localhost:port sets
	for name, cli := range map[string]*tls.Config{
		"IPv4 through ForHost":      certs.ForHost(base, "127.0.0.1"),
		"host:port through ForHost": certs.ForHost(base, "127.0.0.1:7081"),
		"DNS name on a Clone":       byName,
		"DNS name through ForHost":  certs.ForHost(base, "localhost"),
		// The name check does not depend on the address dialed (IPv4 loopback).
		"[IPv6]:port through ForHost": certs.ForHost(base, "[::1]:7081"),
		"the last of nested ForHosts": certs.ForHost(certs.ForHost(base, "10.9.9.9"), "127.0.0.1"),
	} {
		t.Run(name, func(t *testing.T) {
			o := exchange(t, srv, cli)
			require.NoError(t, o.serverErr)
			require.NoError(t, o.clientErr)
			assert.Equal(t, uint16(tls.VersionTLS13), o.server.Version)
			assert.Equal(t, "n2", certs.PeerID(o.server), "the server knows which node dialed")
			assert.Equal(t, "n1", o.client.PeerCertificates[0].Subject.CommonName)
			assert.Empty(t, certs.PeerID(o.client), "a client's state records no verified chain")
		})
	}
	assert.Empty(t, certs.PeerID(tls.ConnectionState{}))
}

// clientOnlyCert writes a certificate from ca that allows client
// authentication only, and returns its paths.
func clientOnlyCert(t *testing.T, b *certstest.Bundle, id string) certs.Paths {
	keyPEM, err := b.Authority.KeyPEM()
	require.NoError(t, err)
	blk, _ := pem.Decode(keyPEM)
	caKey, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: id},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, b.Authority.Certificate(), key.Public(), caKey)
	require.NoError(t, err)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	p := certs.Paths{Cert: filepath.Join(b.Dir, id+".crt"), Key: filepath.Join(b.Dir, id+".key"), CA: b.CA}
	writeInPlace(t, p.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeInPlace(t, p.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	return p
}

// issueAt writes a certificate for id from b's CA valid from notBefore to
// notAfter and returns its paths.
func issueAt(t *testing.T, b *certstest.Bundle, id string, notBefore, notAfter time.Time) certs.Paths {
	certPEM, keyPEM, err := b.Authority.IssueAt(id, []string{"127.0.0.1"}, notBefore, notAfter)
	require.NoError(t, err)
	p := certs.Paths{Cert: filepath.Join(b.Dir, id+".crt"), Key: filepath.Join(b.Dir, id+".key"), CA: b.CA}
	writeInPlace(t, p.Cert, certPEM)
	writeInPlace(t, p.Key, keyPEM)
	return p
}

func TestRefused(t *testing.T) {
	b := certstest.New(t, "n1", "n2")
	other := certstest.New(t, "n1", "n2") // a second CA
	now := time.Now()
	expired := issueAt(t, b, "old", now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	future := issueAt(t, b, "early", now.Add(24*time.Hour), now.Add(48*time.Hour))
	clientOnly := clientOnlyCert(t, b, "clientonly")

	srv := func(p certs.Paths) func(*testing.T) *tls.Config {
		return func(t *testing.T) *tls.Config { return serverConfig(t, p, true) }
	}
	cli := func(p certs.Paths) func(*testing.T) *tls.Config {
		return func(t *testing.T) *tls.Config { return clientConfig(t, p) }
	}
	tls12 := func(mk func(*testing.T) *tls.Config) func(*testing.T) *tls.Config {
		return func(t *testing.T) *tls.Config {
			c := mk(t).Clone()
			c.MinVersion, c.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
			return c
		}
	}
	// A server that speaks at most TLS 1.2, built by hand: handshakes of
	// ServerConfig's config run on a copy of the original, so a Clone's
	// MaxVersion would not count.
	tls12Server := func(p certs.Paths) func(*testing.T) *tls.Config {
		return func(t *testing.T) *tls.Config {
			kp, err := tls.LoadX509KeyPair(p.Cert, p.Key)
			require.NoError(t, err)
			return &tls.Config{Certificates: []tls.Certificate{kp}, MaxVersion: tls.VersionTLS12}
		}
	}
	for _, tc := range []struct {
		name     string
		srv, cli func(*testing.T) *tls.Config
		// refusedBy is the side whose check fails; both sides end with an error.
		refusedBy, want string
	}{
		{"client certificate from another CA", srv(b.Node["n1"]), cli(certs.Paths{Cert: other.Node["n2"].Cert, Key: other.Node["n2"].Key, CA: b.CA}),
			"server", "unknown authority"},
		{"no client certificate", srv(b.Node["n1"]), cli(certs.Paths{CA: b.CA}),
			"server", "didn't provide a certificate"},
		{"server from another CA", srv(other.Node["n1"]), cli(b.Node["n2"]),
			"client", "unknown authority"},
		{"server certificate without serverAuth", func(t *testing.T) *tls.Config { return serverConfig(t, clientOnly, false) }, cli(b.Node["n2"]),
			"client", "incompatible key usage"},
		{"server certificate for another IP", srv(b.Node["n1"]), func(t *testing.T) *tls.Config {
			return certs.ForHost(clientConfig(t, b.Node["n2"]), "10.9.9.9") // the last ForHost counts
		}, "client", "valid for 127.0.0.1, ::1, not 10.9.9.9"},
		{"server certificate for another DNS name", srv(b.Node["n1"]), func(t *testing.T) *tls.Config {
			c, err := load(t, b.Node["n2"]).ClientConfig()
			require.NoError(t, err)
			c = c.Clone()
			c.ServerName = "n9.example"
			return c
		}, "client", "valid for localhost, not n9.example"},
		{"ServerName changed after ForHost", srv(b.Node["n1"]), func(t *testing.T) *tls.Config {
			c := clientConfig(t, b.Node["n2"]).Clone()
			c.ServerName = "localhost"
			return c
		}, "client", "set after ForHost"},
		{"an IP address as ServerName on a plain Clone cannot be checked", srv(b.Node["n1"]), func(t *testing.T) *tls.Config {
			c, err := load(t, b.Node["n2"]).ClientConfig()
			require.NoError(t, err)
			c = c.Clone()
			c.ServerName = "127.0.0.1"
			return c
		}, "client", "certs.ForHost"},
		{"expired server certificate", srv(expired), cli(b.Node["n2"]), "client", "expired"},
		{"server certificate not valid yet", srv(future), cli(b.Node["n2"]), "client", "not yet valid"},
		{"expired client certificate", srv(b.Node["n1"]), cli(expired), "server", "expired"},
		{"TLS 1.2 client", srv(b.Node["n1"]), tls12(cli(b.Node["n2"])), "server", "unsupported versions"},
		{"TLS 1.2 server", tls12Server(b.Node["n1"]), cli(b.Node["n2"]), "client", "protocol version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := exchange(t, tc.srv(t), tc.cli(t))
			require.Error(t, o.serverErr, "server")
			require.Error(t, o.clientErr, "client")
			refusal := o.serverErr
			if tc.refusedBy == "client" {
				refusal = o.clientErr
			}
			assert.Contains(t, refusal.Error(), tc.want)
			assert.Empty(t, certs.PeerID(o.server))
		})
	}
}

func TestPlaintextToTLSServer(t *testing.T) {
	b := certstest.New(t, "n1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	srv := serverConfig(t, b.Node["n1"], true)
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		errc <- tls.Server(c, srv).Handshake()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("GET /v1/pools HTTP/1.1\r\nHost: n1\r\n\r\n"))
	require.NoError(t, err)
	err = <-errc
	var rh tls.RecordHeaderError
	require.True(t, errors.As(err, &rh), "got %v", err)
}

func TestConfigNeeds(t *testing.T) {
	b := certstest.New(t, "n1")
	_, err := load(t, certs.Paths{CA: b.CA}).ServerConfig(false)
	assert.ErrorContains(t, err, "certificate and key")
	_, err = load(t, certs.Paths{Cert: b.Node["n1"].Cert, Key: b.Node["n1"].Key}).ServerConfig(true)
	assert.ErrorContains(t, err, "CA file")

	// A server with a certificate only speaks TLS 1.3 and asks for nothing.
	cfg, err := load(t, certs.Paths{Cert: b.Node["n1"].Cert, Key: b.Node["n1"].Key}).ServerConfig(false)
	require.NoError(t, err)
	assert.Equal(t, uint16(tls.VersionTLS13), cfg.MinVersion)
	o := exchange(t, cfg, clientConfig(t, certs.Paths{CA: b.CA}))
	require.NoError(t, o.serverErr)
	require.NoError(t, o.clientErr)
	assert.Empty(t, certs.PeerID(o.server))

	// With no CA, a client verifies against the system roots, which do not
	// hold the test CA.
	sys, err := load(t, certs.Paths{}).ClientConfig()
	require.NoError(t, err)
	assert.False(t, sys.InsecureSkipVerify)
	assert.Nil(t, sys.GetClientCertificate)
	o = exchange(t, cfg, certs.ForHost(sys, "127.0.0.1"))
	require.Error(t, o.clientErr)
	assert.Contains(t, o.clientErr.Error(), "unknown authority")
}
