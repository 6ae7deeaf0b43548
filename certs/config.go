package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
)

// ServerConfig returns a *tls.Config for a listener: MinVersion TLS 1.3; the
// certificate is the one current at each handshake; when requireClientCert,
// ClientAuth is RequireAndVerifyClientCert against the CA pool current at
// each handshake (client certificates must carry ExtKeyUsageClientAuth).
// It needs Paths.Cert and Paths.Key, and Paths.CA when requireClientCert.
//
// Each handshake runs on a copy of the returned config (GetConfigForClient)
// holding the material current then, so set NextProtos and the like on the
// returned config itself: fields a caller sets on a Clone of it are not
// seen by handshakes. Session tickets are off, so that every connection is
// checked against the CA pool and certificate of its own time rather than
// resuming a session verified under material since replaced.
func (f *Files) ServerConfig(requireClientCert bool) (*tls.Config, error) {
	if f.paths.Cert == "" {
		return nil, errors.New("certs: a TLS server needs a certificate and key file")
	}
	if requireClientCert && f.paths.CA == "" {
		return nil, errors.New("certs: a TLS server that requires client certificates needs a CA file to verify them against")
	}
	cfg := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		SessionTicketsDisabled: true,
		ClientAuth:             tls.NoClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return f.cur.Load().cert, nil
		},
	}
	if requireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := f.cur.Load()
		c := cfg.Clone()
		c.GetConfigForClient, c.GetCertificate = nil, nil
		c.Certificates = []tls.Certificate{*m.cert}
		c.ClientCAs = m.pool
		return c, nil
	}
	return cfg, nil
}

// ClientConfig returns a *tls.Config for dialing: MinVersion TLS 1.3; it
// presents the current certificate, if Paths has one, and verifies the
// server's chain against the CA pool current at each handshake, requiring
// ExtKeyUsageServerAuth, and the server's DNS name against ServerName.
// With no CA in Paths it verifies against the system roots, the usual way.
//
// The dialer sets ServerName to the host it dials on a Clone. TLS does not
// send an IP address as the server name, and a CA pool that changes can
// only be checked in VerifyConnection (with InsecureSkipVerify set), which
// sees what was sent, not the Clone's ServerName: so dial an IP address
// through ForHost, which carries the address to the check. A handshake
// with no name to check, such as a Clone with an IP address as ServerName,
// fails: it is never accepted unchecked.
func (f *Files) ClientConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	if f.paths.Cert != "" {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return f.cur.Load().cert, nil
		}
	}
	if f.paths.CA != "" {
		cfg.InsecureSkipVerify = true // VerifyConnection verifies, against the pool current now
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyServer(cs, f.cur.Load().pool)
		}
	}
	return cfg, nil
}

// StaticClientConfig returns a *tls.Config for dialing with the material
// current now, never re-read: MinVersion TLS 1.3, the certificate of Paths
// if any, and RootCAs the CA pool of Paths (the system roots without one).
// crypto/tls verifies the server the usual way against the ServerName of
// each Clone, IP addresses included, so it suits a short-lived client,
// such as the command line, behind an http.Transport.
func (f *Files) StaticClientConfig() *tls.Config {
	m := f.cur.Load()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: m.pool}
	if m.cert != nil {
		cfg.Certificates = []tls.Certificate{*m.cert}
	}
	return cfg
}

// ForHost returns a copy of cfg (from ClientConfig) for dialing host, a DNS
// name or an IP address (with or without a port, which is dropped): its
// ServerName is host, and the server's certificate is checked against host
// even when host is an IP address. Of nested ForHost calls the last one
// counts. Do not change ServerName on the copy: a DNS name set after
// ForHost fails the handshake; go through ForHost again instead.
func ForHost(cfg *tls.Config, host string) *tls.Config {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS13}
	}
	c := cfg.Clone()
	c.ServerName = host
	if v := c.VerifyConnection; v != nil {
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if !strings.HasPrefix(cs.ServerName, forHostMark) { // the last ForHost
				sent := strings.TrimRight(cs.ServerName, ".")
				if sent != "" && !strings.EqualFold(sent, strings.TrimRight(host, ".")) {
					return fmt.Errorf("certs: ServerName %q was set after ForHost(%q); use ForHost for the host dialed", cs.ServerName, host)
				}
				cs.ServerName = forHostMark + host
			}
			return v(cs)
		}
	}
	return c
}

// DialTLS returns a dialer for http.Transport.DialTLSContext that dials
// each address with ForHost(cfg, addr): the server's certificate is
// checked against the host dialed, an IP address too, with the material
// current at each handshake.
func DialTLS(cfg *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := tls.Dialer{Config: ForHost(cfg, addr)}
		return d.DialContext(ctx, network, addr)
	}
}

// forHostMark prefixes the host that ForHost hands to the check it wraps,
// telling it from a name the client sent, which never holds a NUL byte,
// so that an inner ForHost leaves an outer one's host alone.
const forHostMark = "\x00"

// verifyServer does what crypto/tls does for a client, against pool: the
// server's chain must lead to a certificate of pool, be valid now, allow
// server authentication, and name cs.ServerName.
func verifyServer(cs tls.ConnectionState, pool *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("certs: the server sent no certificate")
	}
	cs.ServerName = strings.TrimPrefix(cs.ServerName, forHostMark)
	if cs.ServerName == "" {
		return errors.New("certs: no server name to check the server's certificate against: " +
			"set ServerName to the DNS name dialed, or dial an IP address through certs.ForHost")
	}
	opts := x509.VerifyOptions{
		Roots:         pool,
		Intermediates: x509.NewCertPool(),
		DNSName:       cs.ServerName,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("certs: server certificate (CN %q) for %s: %w", cs.PeerCertificates[0].Subject.CommonName, cs.ServerName, err)
	}
	return nil
}

// PeerID returns the Common Name of the verified peer certificate of a TLS
// connection state (the node ID, see Issue), "" if none. A server made by
// ServerConfig(true) verifies every client, so on its connections this is
// the client's ID. A client's connection state records no verified chain
// when ClientConfig checked the server in VerifyConnection, so there it is
// "": the dialer checked the server's name instead.
func PeerID(cs tls.ConnectionState) string {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	return cs.VerifiedChains[0][0].Subject.CommonName
}
