// Package certstest writes a CA and node certificates into a test's
// temporary directory, for tests of packages that serve or dial with TLS.
package certstest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/certs"
)

// Bundle is what New wrote: the CA's certificate file, and each node's
// certificate, key and the CA file as Paths.
type Bundle struct {
	Dir, CA   string
	Node      map[string]certs.Paths
	Authority *certs.CA // issues more certificates from the same CA
}

// New writes into t.TempDir() a CA (ca.crt, ca.key) and, for each node,
// <id>.crt and <id>.key valid for a year, naming the hosts 127.0.0.1, ::1
// and localhost, and also, for a node given as "n1=10.0.0.1,host", the
// hosts after '='. It fails the test on any error.
func New(t testing.TB, nodes ...string) *Bundle {
	t.Helper()
	ca, err := certs.NewCA("rangealloc test CA", 365*24*time.Hour)
	if err != nil {
		t.Fatalf("certstest: %v", err)
	}
	b := &Bundle{Dir: t.TempDir(), Node: map[string]certs.Paths{}, Authority: ca}
	b.CA = filepath.Join(b.Dir, "ca.crt")
	caKey, err := ca.KeyPEM()
	if err != nil {
		t.Fatalf("certstest: %v", err)
	}
	write(t, b.CA, ca.CertPEM())
	write(t, filepath.Join(b.Dir, "ca.key"), caKey)
	for _, n := range nodes {
		id, extra, _ := strings.Cut(n, "=")
		hosts := []string{"127.0.0.1", "::1", "localhost"}
		if extra != "" {
			hosts = append(hosts, strings.Split(extra, ",")...)
		}
		certPEM, keyPEM, err := ca.Issue(id, hosts, 365*24*time.Hour)
		if err != nil {
			t.Fatalf("certstest: node %q: %v", n, err)
		}
		p := certs.Paths{Cert: filepath.Join(b.Dir, id+".crt"), Key: filepath.Join(b.Dir, id+".key"), CA: b.CA}
		write(t, p.Cert, certPEM)
		write(t, p.Key, keyPEM)
		b.Node[id] = p
	}
	return b
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("certstest: %v", err)
	}
}
