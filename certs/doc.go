// Package certs is rangealloc's TLS material: the certificate, key and CA
// files a node serves and dials with, kept current while the node runs, and
// a small CA that issues node certificates for installs without a PKI.
//
// Files loads Paths and hands out tls.Configs: ServerConfig for the Raft
// port and the HTTPS API, ClientConfig (with ForHost) for dialing them,
// and StaticClientConfig for a short-lived client that needs no rotation.
// The first two never hold a certificate or a CA pool themselves: every
// handshake takes the material current at its start, so Reload and Watch
// rotate a certificate, or the CA set, without rebuilding any listener or
// dialer. PeerID reads the node ID, the Common Name that CA.Issue gives a
// certificate, from a connection a server verified.
//
// Invariants:
//   - A handshake uses the material of one successful read: a certificate
//     with its own key, and the CA pool read alongside. A file that is
//     missing, cut short, garbage or mismatched (key not the certificate's)
//     never replaces good material: Reload returns an error naming the file
//     and the material in use stays.
//   - Only TLS 1.3 is spoken, both ways.
//   - Every peer is verified against the CA pool of its handshake: a server
//     from ServerConfig(true) requires a client certificate chaining to it,
//     with ExtKeyUsageClientAuth; a client from ClientConfig requires the
//     server's to chain to it, with ExtKeyUsageServerAuth, and to name the
//     host dialed. A client handshake with no name to check fails. Servers
//     issue no session tickets, so no connection resumes a session verified
//     under material since replaced.
//   - Changes are found by the files' contents (SHA-256 of their bytes),
//     not their times, so a file rewritten in place within the same second
//     is still seen. Rotation applies to new handshakes; a connection
//     already established keeps the peer it verified.
//   - No input, from a file or from the network, makes this package panic.
package certs
