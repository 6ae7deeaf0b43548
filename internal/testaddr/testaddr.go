// Package testaddr gives tests loopback addresses for servers to listen on.
package testaddr

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// Loopback returns a loopback address whose port is free now, for a
// server (a node, a process) to listen on a moment later.
//
// The port is drawn below the kernel's ephemeral range (32768 and up by
// default), where no outgoing connection takes one. A port from ":0" is
// ephemeral: between this check and the server binding it, any connection
// a test running beside opens may take it, and a node that cannot bind
// never joins its cluster.
func Loopback(t testing.TB) string {
	t.Helper()
	for range 1000 {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
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
