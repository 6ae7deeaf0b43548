package testaddr

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

func TestLoopbackBelowEphemeralRange(t *testing.T) {
	for range 50 {
		addr := Loopback(t)
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		if host != "127.0.0.1" || p < 20000 || p >= 32000 {
			t.Fatalf("Loopback() = %s: want 127.0.0.1 and a port in 20000-31999", addr)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s is not free: %v", addr, err)
		}
		l.Close()
	}
}

// TestLoopbackClaimed checks that no two calls get the same port, and that
// a port handed out is locked against another process: a second open of its
// lock file (a separate open, as another test binary's would be) cannot
// take the lock.
func TestLoopbackClaimed(t *testing.T) {
	seen := make(map[string]bool)
	for range 500 {
		addr := Loopback(t)
		if seen[addr] {
			t.Fatalf("Loopback() handed out %s twice", addr)
		}
		seen[addr] = true
	}
	_, port, _ := net.SplitHostPort(Loopback(t))
	f, err := os.Open(filepath.Join(os.TempDir(), "rangealloc-testaddr", port))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if lock(f) && runtime.GOOS != "windows" {
		t.Fatalf("port %s: another open of its lock file took the lock", port)
	}
}
