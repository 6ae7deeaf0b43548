package testaddr

import (
	"net"
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
