package transport

import (
	"crypto/tls"
	"net"
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
	cs := tc.ConnectionState()
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", true
	}
	return cs.VerifiedChains[0][0].Subject.CommonName, true
}
