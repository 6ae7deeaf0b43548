package rangealloc

import (
	"crypto/tls"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Config configures a node. DataDir and RaftAddr are required; the zero
// value of every other field is a sane default. Start from DefaultConfig,
// which fills Advanced with the defaults.
type Config struct {
	// DataDir holds the node's Raft log, snapshots and identity. It is
	// created if missing. Give each node a directory of its own.
	DataDir string
	// ID names the node in its cluster. Empty: a UUID drawn when the data
	// directory is new, and kept in it.
	ID string
	// RaftAddr is the TCP address the node listens on for its peers: Raft
	// and the calls followers forward to the leader share one port.
	RaftAddr string
	// AdvertiseAddr is the address peers dial. Empty: RaftAddr, which must
	// then not be an unspecified address such as 0.0.0.0.
	AdvertiseAddr string
	// APIAddr is the node's HTTP API address, if it serves one. It is kept
	// in the member table, so that other nodes can name the leader's API.
	APIAddr string

	// Peers founds a cluster of fixed voters, this node included, when the
	// data directory is new. Give every node the same list.
	Peers []Peer
	// Join lists the Raft addresses of existing members to ask, in turn,
	// to add this node, when its data directory is new.
	Join []string
	// With neither Peers nor Join, a node with a new data directory founds
	// a cluster of one.

	// Pools are created by the first leader of a cluster this node founds.
	// A node that joins ignores them.
	Pools []PoolSpec
	// ServiceNetwork, when set, is the cluster's service network: the
	// pools Services take their ClusterIPs and NodePorts from. A leader
	// that finds none sets it once the pools it names exist.
	ServiceNetwork *ServiceNetwork

	// Logger receives the node's and Raft's logs. Nil: stderr, at info.
	// hclog.NewNullLogger() silences them.
	Logger hclog.Logger
	// ServerTLS and ClientTLS, given together, make the Raft port speak
	// only TLS. Each node's certificate must name its ID as its CN. The
	// package certs writes such certificates. Nil: plain TCP, which
	// anyone who reaches the port can use; keep it to loopback.
	ServerTLS, ClientTLS *tls.Config

	// Advanced holds tuning that most programs leave at its defaults.
	Advanced Advanced
}

// Advanced is the tuning of a node. DefaultConfig fills it in; a zero
// field left in it takes the default too.
type Advanced struct {
	// LogStore is the Raft log store of a new data directory: "bolt" (a
	// bbolt file, the default) or "wal" (an append-only log, one fsync
	// per write). Empty: the one the directory records, or bolt. A data
	// directory keeps the store it was created with; naming another is
	// refused.
	LogStore string
	// HeartbeatTimeout and ElectionTimeout bound how long followers wait
	// for a leader before they elect another. Default 1s each.
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	// LeaderLeaseTimeout is how long a leader keeps leading without
	// hearing from a quorum. Default 500ms.
	LeaderLeaseTimeout time.Duration
	// SnapshotThreshold is how many log entries trigger a snapshot.
	// Default 8192.
	SnapshotThreshold uint64
	// TrailingLogs is how many entries stay in the log after a snapshot.
	// Default 10240.
	TrailingLogs uint64
	// MinFreeDisk is the free space, in bytes, below which the node
	// refuses writes with ErrInsufficientStorage. Default 256 MiB; 0
	// takes the default. NoMinFreeDisk turns the floor off.
	MinFreeDisk   uint64
	NoMinFreeDisk bool
	// DiskStallTimeout is how long a write to the Raft log may take before
	// the node calls its disk stalled and stops speaking for it, so that
	// the others elect a leader with a working disk. Default 2s; a
	// negative value turns the watch off.
	DiskStallTimeout time.Duration
	// CleanupDeadAfter, when positive, makes the leader remove a member it
	// has not reached for that long, once enough voters remain (at least
	// three). Default 0: dead members stay until removed.
	CleanupDeadAfter time.Duration
	// FoundEmpty lets a node without state found an empty cluster although
	// BackupDir holds backups, which otherwise refuses to found: it would
	// drop what those backups hold.
	FoundEmpty bool
	// Nonvoter, with Join, keeps this node a non-voter: a read replica.
	// Without Join it is refused.
	Nonvoter bool
	// BackupDir, when set, receives a verified backup every
	// BackupInterval (default 1h); the newest BackupRetain (default 24)
	// are kept.
	BackupDir      string
	BackupInterval time.Duration
	BackupRetain   int
	// RestoreFrom is a backup file that a lone node with a new data
	// directory founds its cluster from, before Open returns.
	RestoreFrom string
}

// Peer is one voter of a cluster founded with fixed peers.
type Peer struct {
	ID       string // the node's ID
	RaftAddr string // the address its peers dial
	APIAddr  string // its HTTP API address, if it serves one
}

// PoolSpec is a pool to create: a name and a range, a CIDR such as
// "10.96.0.0/12" for ClusterIPs or "30000-32767" for NodePorts.
type PoolSpec struct {
	Name  string
	Range string
}

// DefaultConfig returns a Config with the server's default pools and the
// default tuning. The pools are Kubernetes' defaults: "clusterip-ipv4"
// over 10.96.0.0/12 and "nodeport" over 30000-32767, with the service
// network set over them.
func DefaultConfig() Config {
	return Config{
		Pools: []PoolSpec{
			{Name: "clusterip-ipv4", Range: "10.96.0.0/12"},
			{Name: "nodeport", Range: "30000-32767"},
		},
		ServiceNetwork: &ServiceNetwork{
			IPFamilies:   []string{"IPv4"},
			Pools:        map[string]string{"IPv4": "clusterip-ipv4"},
			NodePortPool: "nodeport",
		},
		Advanced: Advanced{
			HeartbeatTimeout:   time.Second,
			ElectionTimeout:    time.Second,
			LeaderLeaseTimeout: 500 * time.Millisecond,
			SnapshotThreshold:  8192,
			TrailingLogs:       10240,
			MinFreeDisk:        256 << 20,
			DiskStallTimeout:   2 * time.Second,
			BackupInterval:     time.Hour,
			BackupRetain:       24,
		},
	}
}
