package transport

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/certs"
)

// PeerID returns the Common Name of the certificate the peer of an
// accepted connection presented and TLS verified: the node ID its
// certificate was issued to. secure is false for a plain TCP connection,
// whose peer is unknown. (A dialer checks the server's certificate
// against the address it dialed instead, and gets "" here.)
func PeerID(conn net.Conn) (id string, secure bool) {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return "", false
	}
	return certs.PeerID(tc.ConnectionState()), true
}

// memberConn is an accepted Raft connection whose peer is asked again,
// at most every RaftPeerRecheck, whether it may still speak Raft here: a
// member removed from the configuration keeps no connection through which
// it could append entries or win votes. Raft reads a connection from one
// goroutine, so checked needs no lock.
type memberConn struct {
	net.Conn
	id      string
	allow   func(id string) bool
	logger  hclog.Logger
	checked time.Time
}

func (c *memberConn) Read(p []byte) (int, error) {
	if now := time.Now(); now.Sub(c.checked) >= RaftPeerRecheck {
		c.checked = now
		if !c.allow(c.id) {
			c.logger.Warn("closing a Raft connection: its node is no longer a member of the configuration",
				"remote", c.RemoteAddr(), "peer", c.id)
			_ = c.Conn.Close()
			return 0, fmt.Errorf("transport: %s is not a member: %w", c.id, net.ErrClosed)
		}
	}
	return c.Conn.Read(p)
}
