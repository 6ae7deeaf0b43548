// Package api is rangealloc's HTTP API v1 (SPEC §5): a thin layer over
// package node that decodes requests strictly, calls the node, encodes the
// answer, and maps every error to a status and code in one place
// (writeError). It holds no state of its own beyond metrics.
//
// Writes, linearizable reads and cluster changes received by a follower
// are carried to the leader by the node itself (over its internal RPC), so
// every node serves every endpoint. X-Rangealloc-Served-By names the node
// whose state answered (node.WithServedBy): the leader for a call carried
// to it, else the node that received the request.
//
// Guard wraps a node's whole HTTP service, this package's Server and
// whatever else the binary serves: requests authenticate with bearer
// tokens listed, as hashes, in a token file (Tokens), each with a role
// (read, write, admin) that RequiredRole compares with what the method
// and path need. Without a token file the API is unauthenticated, and
// Guard serves only requests addressed to an IP, localhost or an allowed
// host name, against DNS rebinding.
package api
