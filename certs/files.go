package certs

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultWatchInterval is how often Watch re-reads the files by default,
// well within the 10 seconds in which a replaced certificate must be in use.
const DefaultWatchInterval = 2 * time.Second

// expiryWarning is how close to its expiry a loaded certificate is logged
// as a warning.
const expiryWarning = 30 * 24 * time.Hour

// Paths names PEM files. Any may be empty; Cert and Key go together.
//
// Cert holds the certificate, optionally followed by intermediates; Key its
// unencrypted private key (PKCS #8, SEC 1 or PKCS #1; Key may be the same
// file as Cert); CA one or more CA certificates that peers' certificates
// must chain to.
type Paths struct{ Cert, Key, CA string }

// material is what one successful read of the files produced. It is never
// changed once published, so a handshake that loaded it sees a certificate
// with its own key and the CA pool read alongside them.
type material struct {
	cert *tls.Certificate     // nil without Paths.Cert
	pool *x509.CertPool       // nil without Paths.CA
	sums [3][sha256.Size]byte // of the cert, key and CA files' bytes
}

// Files holds a certificate with its key and a CA pool, loaded from Paths and
// re-read when the files change (Watch). Safe for concurrent use.
type Files struct {
	paths  Paths
	logger hclog.Logger
	cur    atomic.Pointer[material]

	mu       sync.Mutex           // serializes reloads, guards lastSums
	lastSums [3][sha256.Size]byte // what the last read found
}

// Load reads the files now. Errors name the file and what is wrong with it
// (missing, not PEM, key does not match certificate, CA file with no
// certificate, ...). A nil logger logs nothing.
func Load(p Paths, logger hclog.Logger) (*Files, error) {
	if (p.Cert == "") != (p.Key == "") {
		return nil, fmt.Errorf("certs: a certificate file and its key file go together (certificate %q, key %q)", p.Cert, p.Key)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	f := &Files{paths: p, logger: logger}
	raw, err := f.readAll()
	if err != nil {
		return nil, err
	}
	m, err := f.parse(raw)
	if err != nil {
		return nil, err
	}
	f.cur.Store(m)
	f.lastSums = m.sums
	f.describe(m, "loaded TLS files")
	return f, nil
}

// Paths returns the files f reads.
func (f *Files) Paths() Paths { return f.paths }

// Leaf returns the certificate in use now, or nil when Paths has none.
func (f *Files) Leaf() *x509.Certificate {
	if m := f.cur.Load(); m.cert != nil {
		return m.cert.Leaf
	}
	return nil
}

// Reload re-reads the files; on any error it keeps the material it had and
// returns the error. It returns whether anything changed. Unlike Watch,
// Reload does not wait for the files to settle: called in the middle of
// an in-place rewrite, it takes what it reads if that parses.
func (f *Files) Reload() (changed bool, err error) { return f.reload(false) }

// poll is one of Watch's reads: reload, taking new content only once it
// has settled.
func (f *Files) poll() (changed bool, err error) { return f.reload(true) }

// reload is Reload. With settle (Watch's reads), new content counts only
// once two reads in a row found it, byte for byte: a file rewritten in
// place holds only its first part for a moment, and a CA bundle or a
// certificate chain cut after one of its certificates still parses (a
// node would drop trust in the bundle's other CAs, or serve its
// certificate without the intermediates, until the next read). Content
// that does not parse is reported only once it has settled too.
func (f *Files) reload(settle bool) (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	raw, err := f.readAll()
	if err != nil {
		return false, err
	}
	sums := raw.sums()
	last := f.lastSums
	f.lastSums = sums
	if sums == f.cur.Load().sums {
		return false, nil
	}
	if settle && sums != last {
		return false, nil // the next read decides
	}
	m, err := f.parse(raw)
	if err != nil {
		return false, err
	}
	f.cur.Store(m)
	f.describe(m, "reloaded TLS files")
	return true, nil
}

// Watch re-reads the files every `every` (DefaultWatchInterval if not
// positive) until stop closes. A change, whether a file was replaced by
// rename or rewritten in place, is picked up once two reads in a row find
// the same new content (see reload), within two periods: the files'
// contents are compared, not their times. A bad file is logged as a
// warning naming it, once per distinct error, and the last good material
// stays in use.
func (f *Files) Watch(stop <-chan struct{}, every time.Duration) {
	if every <= 0 {
		every = DefaultWatchInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last string
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		_, err := f.poll()
		switch {
		case err != nil && err.Error() != last:
			args := []any{"error", err}
			var fe *FileError
			if errors.As(err, &fe) {
				args = append(args, "file", fe.Path)
			}
			f.logger.Warn("cannot use the TLS files; keeping the certificate and CA in use", args...)
			last = err.Error()
		case err == nil && last != "":
			f.logger.Info("TLS files usable again")
			last = ""
		}
	}
}

// rawFiles are the bytes of the certificate, key and CA files (nil for a
// file Paths does not name), read once per load so that what is parsed is
// what is hashed.
type rawFiles [3][]byte

func (r rawFiles) sums() (s [3][sha256.Size]byte) {
	for i, b := range r {
		if b != nil {
			s[i] = sha256.Sum256(b)
		}
	}
	return s
}

// readAll reads every file of f.paths.
func (f *Files) readAll() (r rawFiles, err error) {
	for i, p := range []struct{ role, path string }{{"certificate", f.paths.Cert}, {"key", f.paths.Key}, {"CA", f.paths.CA}} {
		if p.path == "" {
			continue
		}
		if r[i], err = readFile(p.role, p.path); err != nil {
			return r, err
		}
	}
	return r, nil
}

// parse checks the files' bytes and builds the material they make.
func (f *Files) parse(r rawFiles) (*material, error) {
	m := &material{sums: r.sums()}
	p := f.paths
	if p.Cert != "" {
		chain, ders, err := parseCertificates(r[0])
		if err != nil {
			return nil, &FileError{"certificate", p.Cert, err}
		}
		key, err := parsePrivateKey(r[1])
		if err != nil {
			return nil, &FileError{"key", p.Key, err}
		}
		if !matches(key, chain[0]) {
			return nil, &FileError{"key", p.Key, fmt.Errorf("does not match the certificate in %s (CN %q)", p.Cert, chain[0].Subject.CommonName)}
		}
		m.cert = &tls.Certificate{Certificate: ders, PrivateKey: key, Leaf: chain[0]}
	}
	if p.CA != "" {
		cas, _, err := parseCertificates(r[2])
		if err != nil {
			return nil, &FileError{"CA", p.CA, err}
		}
		m.pool = x509.NewCertPool()
		for _, c := range cas {
			m.pool.AddCert(c)
		}
	}
	return m, nil
}

// describe logs what m holds, and warns of what will make handshakes fail:
// a certificate outside its validity, or not issued by the CA in Paths.
func (f *Files) describe(m *material, msg string) {
	if m.cert == nil {
		f.logger.Info(msg, "ca", f.paths.CA)
		return
	}
	leaf := m.cert.Leaf
	f.logger.Info(msg, "cert", f.paths.Cert, "cn", leaf.Subject.CommonName,
		"serial", fmt.Sprintf("%x", leaf.SerialNumber), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339), "ca", f.paths.CA)
	now := time.Now()
	switch {
	case now.After(leaf.NotAfter):
		f.logger.Warn("TLS certificate has expired; peers will refuse it", "cert", f.paths.Cert, "not_after", leaf.NotAfter)
		return
	case now.Before(leaf.NotBefore):
		f.logger.Warn("TLS certificate is not valid yet; peers will refuse it", "cert", f.paths.Cert, "not_before", leaf.NotBefore)
		return
	case leaf.NotAfter.Sub(now) < expiryWarning:
		f.logger.Warn("TLS certificate expires soon", "cert", f.paths.Cert, "not_after", leaf.NotAfter)
	}
	if m.pool == nil {
		return
	}
	inter := x509.NewCertPool()
	for _, der := range m.cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	opts := x509.VerifyOptions{Roots: m.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := leaf.Verify(opts); err != nil {
		f.logger.Warn("TLS certificate does not chain to the CA file; peers that trust only that CA will refuse it",
			"cert", f.paths.Cert, "ca", f.paths.CA, "error", err)
	}
}
