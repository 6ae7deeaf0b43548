// Package rangealloc hands out Kubernetes Service ClusterIPs and NodePorts
// from a Raft-replicated state on one to three machines, so that no value
// ever has two owners, even while the network splits.
//
// A control plane embeds a node with Open, waits for Ready, and calls the
// Allocator methods:
//
//	cfg := rangealloc.DefaultConfig()
//	cfg.DataDir, cfg.RaftAddr = "/var/lib/rangealloc", "127.0.0.1:7000"
//	n, err := rangealloc.Open(ctx, cfg)
//	if err != nil { ... }
//	defer n.Close()
//	if err := n.Ready(ctx); err != nil { ... }
//	a, err := n.Allocate(ctx, "nodeport", "", "default/web")
//
// The same calls reach a remote cluster through the HTTP client,
// client.NewRemote in github.com/rangealloc/rangealloc/api/client: both
// implement Allocator, with the same values and the same errors.
//
// # Pools and bands
//
// A pool is a range of values: an IPv4 or IPv6 CIDR for ClusterIPs, or a
// port range for NodePorts. Each pool is split in two bands, as Kubernetes
// does (KEP-3070, KEP-3668). A caller that names its value should take it
// from the static band; a caller that names none gets one from the dynamic
// band first, so that the two rarely collide:
//
//	range:  | static band     | dynamic band                          |
//	        first             first+static                        last
//	static = min(max(16, size/16), 256) for ClusterIPs (size: of the CIDR),
//	         min(max(16, size/32), 128) for NodePorts; 0 for 16 values or fewer
//
// # Writes, reads and errors
//
// Every write is one Raft log entry, acknowledged once a quorum has it on
// disk. A write whose outcome is unknown (the leader changed mid-call)
// fails with ErrOutcomeUnknown; retrying it with the same idempotency key
// (WithIdempotencyKey) answers the first attempt's result, or applies it.
// Reads are Linearizable unless asked otherwise (WithConsistency).
//
// Every failure is an *Error with a code; match it with errors.Is and a
// sentinel such as ErrRangeFull.
//
// A call retries while the cluster has no leader, until its context ends.
// Give every call a context with a deadline; the HTTP server gives each
// request 5 seconds.
//
// # Clusters
//
// A node whose data directory is new founds a cluster of one, founds one
// with fixed Peers, or joins one through Join. A node with state rejoins
// its cluster and ignores all three. A follower forwards every call to the
// leader.
package rangealloc
