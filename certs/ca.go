package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"time"
)

// clockSkew is how far in the past a new certificate's validity starts, so
// that a peer whose clock is a little behind accepts it at once.
const clockSkew = 5 * time.Minute

// maxCommonName is the longest Common Name X.509 allows (ub-common-name).
const maxCommonName = 64

// CA is a certificate authority for an air-gapped install: it issues the
// certificates the nodes present to each other and to API clients.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

// NewCA makes a CA with a new ECDSA P-256 key: a self-signed certificate
// with IsCA, KeyUsageCertSign and no intermediate below it, valid from a
// little in the past for validity.
func NewCA(commonName string, validity time.Duration) (*CA, error) {
	if commonName == "" || len(commonName) > maxCommonName {
		return nil, fmt.Errorf("certs: CA common name %q: want 1 to %d bytes", commonName, maxCommonName)
	}
	if validity <= 0 {
		return nil, fmt.Errorf("certs: CA validity %s: want a positive duration", validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, certPEM: encodeCert(der), key: key}, nil
}

// LoadCA reads a CA's certificate and private key, as CertPEM and KeyPEM
// wrote them. Errors name the file: missing, not PEM, not a CA, or a key
// that is not the certificate's.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := readFile("CA", certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFile("CA key", keyFile)
	if err != nil {
		return nil, err
	}
	certs, ders, err := parseCertificates(certPEM)
	if err != nil {
		return nil, &FileError{"CA", certFile, err}
	}
	cert := certs[0]
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, &FileError{"CA", certFile, fmt.Errorf("certificate %q is not a CA (it cannot sign certificates)", cert.Subject.CommonName)}
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, &FileError{"CA key", keyFile, err}
	}
	if !matches(key, cert) {
		return nil, &FileError{"CA key", keyFile, fmt.Errorf("does not match the CA certificate in %s", certFile)}
	}
	return &CA{cert: cert, certPEM: encodeCert(ders[0]), key: key}, nil
}

// Certificate returns the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// CertPEM returns the CA's certificate in PEM, for the CA file of Paths.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// KeyPEM returns the CA's private key in PEM (PKCS #8). Keep it secret:
// whoever has it can mint certificates every node accepts.
func (ca *CA) KeyPEM() ([]byte, error) { return encodeKey(ca.key) }

// Issue returns a node (or client) certificate signed by the CA: ECDSA
// P-256, CN = id, SANs from hosts (IP literals become IP SANs, others DNS
// SANs), ExtKeyUsage both ServerAuth and ClientAuth, so one certificate
// serves a node's listeners and its dials; valid from a little in the past
// (clock skew) for validity, but never past the CA's own expiry.
func (ca *CA) Issue(id string, hosts []string, validity time.Duration) (certPEM, keyPEM []byte, err error) {
	if validity <= 0 {
		return nil, nil, fmt.Errorf("certs: validity %s: want a positive duration", validity)
	}
	now := time.Now()
	if now.After(ca.cert.NotAfter) {
		return nil, nil, fmt.Errorf("certs: the CA %q expired at %s", ca.cert.Subject.CommonName, ca.cert.NotAfter.UTC().Format(time.RFC3339))
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	return ca.IssueAt(id, hosts, now.Add(-clockSkew), notAfter)
}

// IssueAt is Issue with explicit notBefore and notAfter (tests make expired
// certificates with it).
func (ca *CA) IssueAt(id string, hosts []string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	if id == "" || len(id) > maxCommonName {
		return nil, nil, fmt.Errorf("certs: id %q: want 1 to %d bytes", id, maxCommonName)
	}
	if !notAfter.After(notBefore) {
		return nil, nil, fmt.Errorf("certs: notAfter %s is not after notBefore %s", notAfter, notBefore)
	}
	ips, names, err := SplitHosts(hosts)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: id},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IPAddresses:           ips,
		DNSNames:              names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("certs: issue %q: %w", id, err)
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

// SplitHosts sorts hosts into IP addresses and DNS names for a
// certificate's SANs, dropping repeats. A host that looks like an IP
// address (it has a ':' or only digits and dots) must be one, without a
// zone or port; any other must be a DNS name: dot-separated labels of
// letters, digits and '-', no label starting or ending with '-'.
func SplitHosts(hosts []string) (ips []net.IP, names []string, err error) {
	seen := map[string]bool{}
	for _, h := range hosts {
		if h == "" {
			return nil, nil, errors.New("empty host")
		}
		if looksLikeIP(h) {
			a, err := netip.ParseAddr(h)
			if err != nil || a.Zone() != "" {
				why := "not a valid IP address"
				if _, _, perr := net.SplitHostPort(h); perr == nil {
					why += " (give the address without a port)"
				} else if err == nil {
					why += " (no IPv6 zone)"
				}
				return nil, nil, fmt.Errorf("host %q: %s", h, why)
			}
			if !seen[a.String()] {
				seen[a.String()] = true
				ips = append(ips, net.IP(a.AsSlice()))
			}
			continue
		}
		if err := checkDNSName(h); err != nil {
			return nil, nil, fmt.Errorf("host %q: not a valid DNS name: %v", h, err)
		}
		if n := strings.ToLower(h); !seen[n] {
			seen[n] = true
			names = append(names, h)
		}
	}
	return ips, names, nil
}

// looksLikeIP reports whether h is meant as an IP address.
func looksLikeIP(h string) bool {
	if strings.Contains(h, ":") {
		return true
	}
	return strings.Trim(h, "0123456789.") == ""
}

// checkDNSName checks h as a host name (RFC 1123), without a trailing dot.
func checkDNSName(h string) error {
	if len(h) > 253 {
		return fmt.Errorf("%d bytes, more than 253", len(h))
	}
	for _, label := range strings.Split(h, ".") {
		switch {
		case label == "":
			return errors.New("an empty label (two dots, or a dot at an end)")
		case len(label) > 63:
			return fmt.Errorf("label %q is longer than 63 bytes", label)
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Errorf("label %q starts or ends with '-'", label)
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Errorf("%q is not a letter, digit or '-'", r)
			}
		}
	}
	return nil
}

// newSerial returns a random serial number in [1, 2^128).
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	s, err := rand.Int(rand.Reader, limit.Sub(limit, big.NewInt(1)))
	if err != nil {
		return nil, err
	}
	return s.Add(s, big.NewInt(1)), nil
}
