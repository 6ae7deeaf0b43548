// Package testaddr gives tests loopback addresses for servers to listen on.
package testaddr

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Loopback returns a loopback address whose port is free now, for a
// server (a node, a process) to listen on a moment later, and that no
// other caller of Loopback gets while this test process lives.
//
// The port is drawn below the kernel's ephemeral range (32768 and up by
// default), where no outgoing connection takes one. A port from ":0" is
// ephemeral: between this check and the server binding it, any connection
// a test running beside opens may take it, and a node that cannot bind
// never joins its cluster.
//
// A free port is not enough: two calls, in this test binary or in another
// package's running beside it (go test runs packages in parallel), could
// draw the same port before either server binds it. So each port handed
// out is claimed with a lock file under the temp dir, held until the
// process exits (see claim).
func Loopback(t testing.TB) string {
	t.Helper()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		if !claim(port) {
			continue // handed out already, here or in another test process
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // in use
		}
		addr := l.Addr().String()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return addr
	}
	t.Fatal("no free port among 1,000 tried in 20000-31999")
	return ""
}

var claims struct {
	sync.Mutex
	held map[int]*os.File // the open lock files, kept open until exit
}

// claim takes port for this process: true when no caller of Loopback in
// this process or any other running one holds it. The claim is an
// exclusive flock on a file named for the port; the kernel drops it when
// the process exits, however it exits, so no claim outlives its test.
func claim(port int) bool {
	claims.Lock()
	defer claims.Unlock()
	if _, ok := claims.held[port]; ok {
		return false
	}
	dir := filepath.Join(os.TempDir(), "rangealloc-testaddr")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false
	}
	if !lock(f) {
		f.Close()
		return false
	}
	if claims.held == nil {
		claims.held = make(map[int]*os.File)
	}
	claims.held[port] = f
	return true
}
