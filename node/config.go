package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/storage"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/fsm"
)

// Peer is a voter of a fixed bootstrap set.
type Peer struct {
	ID       string
	RaftAddr string
	APIAddr  string
}

// PoolSpec is a pool created when a node bootstraps a new cluster.
type PoolSpec struct {
	Name  string
	Range string
}

// MinCleanupDeadAfter is the shortest CleanupDeadAfter the server
// (--cleanup-dead-after) and the embedding package accept: well beyond a
// restart, or a member restarting or cut off for a moment is removed.
// Tests of package node may set less.
const MinCleanupDeadAfter = 10 * time.Second

// Config configures a node. Open validates it with Validate.
type Config struct {
	// ID is the node's Raft server ID. Empty: read from DataDir/node-id, or
	// generated once (a UUID) and kept there.
	ID string
	// DataDir holds the Raft log store (raft.db or wal/), the snapshots
	// and node-id.
	DataDir string
	// LogStore picks the Raft log and stable store: LogStoreBolt ("bolt",
	// raft.db, a bbolt B+tree: two fsyncs per append) or storage.LogStoreWAL
	// ("wal", wal/, an append-only segmented log: one fsync per append).
	// It is chosen when the data directory is first used and recorded in
	// DataDir/log-store; empty means the recorded one, or bolt for a new
	// directory. A choice that differs from the recorded one is refused:
	// a data directory never changes store (replace the node instead).
	LogStore string
	// WALSegmentSize is the size of the wal store's segment files, in
	// bytes; 0 means 16 MiB. Entries compacted away are deleted a whole
	// segment at a time, and until then a leader still sends them to a
	// follower that lags instead of a snapshot: tests make it small to
	// exercise snapshot installs on the wal.
	WALSegmentSize uint64
	// RaftAddr is the TCP address to listen on for Raft and for the
	// internal forwarding RPC (one port for both).
	RaftAddr string
	// AdvertiseRaft is the address other nodes dial; empty means RaftAddr,
	// which must then not be an unspecified address such as 0.0.0.0.
	AdvertiseRaft string
	// APIAddr is this node's HTTP API address as clients reach it, kept in
	// the member table so that others can name the leader's API. Optional.
	APIAddr string
	// Peers bootstraps a fixed voter set (this node included) when the node
	// has no state. Give every node the same list; repeating it is safe.
	Peers []Peer
	// Join lists Raft addresses of existing members to ask, in turn, to add
	// this node as a voter, when the node has no state.
	Join []string
	// JoinVia, when set and Join is empty, gives the Raft addresses to ask
	// when the node must join (it has no state): the server reads them
	// from a member's API. A node with state never calls it, so it starts
	// while the member it names is down.
	JoinVia func(ctx context.Context) ([]string, error)
	// Nonvoter asks, with Join, to stay a non-voter: the leader then never
	// promotes this node (a read replica, or a witness of the log).
	Nonvoter bool
	// CleanupDeadAfter, when positive, makes the leader remove a member it
	// has not reached for this long, never taking the voters below three
	// (health.go). 0: dead members stay until removed by hand. The server
	// and the embedding package refuse less than MinCleanupDeadAfter.
	CleanupDeadAfter time.Duration
	// Pools are created when this node bootstraps a new cluster (no state,
	// and no Join): the first leader creates them.
	Pools []PoolSpec
	// ServiceNetwork is set as the cluster's service network by a leader
	// that finds none, once the pools it names exist. Nil: none.
	ServiceNetwork *fsm.ServiceNetwork
	// Logger receives the node's and Raft's logs. Nil: discard.
	Logger hclog.Logger
	// ServerTLS and ClientTLS, given together, make the Raft and
	// forwarding port speak only TLS, from each connection's first byte
	// (see certs.Files: ServerConfig(true) and ClientConfig). Peers are
	// then known by the CN of their certificate, which must be their node
	// ID: only members of the configuration may forward calls, and a node
	// joins only as itself. Nil: plain TCP, which anyone who reaches the
	// port can use to commit state; keep it to loopback.
	ServerTLS, ClientTLS *tls.Config

	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout tune Raft
	// (see raft.Config); CommitTimeout too.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// SnapshotThreshold is how many new log entries trigger a snapshot, and
	// TrailingLogs how many entries stay in the log after one.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// MaxBatch bounds how many requests the leader packs into one entry.
	MaxBatch int
	// MaxInflight bounds the entries the leader has handed to Raft and not
	// yet seen applied. While they are out, new requests wait and are packed
	// together: this is what makes group commit pack anything at all. The
	// default, 1, packs the most requests per fsync; see docs/PERFORMANCE.md.
	MaxInflight int
	// BatchWait bounds how long the leader holds an entry open for the
	// callers of the entry resolved last to come back (see fill), and how
	// long a follower holds a forwarded batch open for the callers of its
	// call answered last (see gather). Neither wait exceeds the last
	// entry's round or call either. 0 sends whatever is waiting at once.
	BatchWait time.Duration
	// RetryInterval is how long a call waits between attempts while there
	// is no leader or the leader is unreachable.
	RetryInterval time.Duration

	// MinFreeDisk is the floor, in bytes, of free space on the file system
	// holding DataDir. Below it the node refuses client writes
	// (fsm.CodeInsufficientStorage), says disk_full on /readyz, and a
	// leader hands leadership to a voter with space (disk.go). 0: no floor.
	MinFreeDisk uint64
	// DiskCheckInterval is how often the node reads its free space and the
	// sizes of raft.db and the snapshots.
	DiskCheckInterval time.Duration
	// DiskStallTimeout is how long a write to the Raft log or stable store
	// may go unanswered before the node calls its disk stalled: it then
	// sends no Raft message until the write returns, so that a leader's
	// followers elect another, and /readyz says disk_stalled (stall.go).
	// 0 disables.
	DiskStallTimeout time.Duration
	// DiskFree, when set, replaces the file system's free-space call
	// (statfs) on DataDir: tests fill a disk with it.
	DiskFree func(dir string) (uint64, error)
	// BeforeStoreWrite, when set, is called before each write to the Raft
	// log or stable store, on the writing goroutine: tests stall a disk by
	// blocking in it.
	BeforeStoreWrite func()

	// OnApply, when set, is called after each state-machine batch with the
	// number of log entries and the requests' results (for metrics).
	OnApply func(entries int, results []*fsm.Result)
	// OnCommit, when set, is called on the leader for each entry it
	// proposed, with the requests it carried and the time from proposal to
	// applied result (for metrics).
	OnCommit func(requests int, d time.Duration)

	// MaxFeatureLevel, when positive and below fsm.MaxFeatureLevel, makes
	// the node tell others its binary supports only that level, as a node
	// of an older release would: tests of upgrades use it.
	MaxFeatureLevel int

	// BackupDir, when set, makes the node write a verified backup of its
	// own applied state there every BackupInterval, and keep the newest
	// BackupRetain of its backups (see backup.go). Empty: no scheduled
	// backups.
	BackupDir      string
	BackupInterval time.Duration
	BackupRetain   int

	// RestoreFrom is a backup file a lone node (no Peers, no Join) without
	// state founds its cluster from: Open restores it before it returns, so
	// nothing is served from the empty state in between. A node with state
	// ignores it, as it ignores Peers and Join.
	RestoreFrom string
	// FoundEmpty lets a node without state found an empty cluster, alone
	// or with Peers that all answer without state, although BackupDir holds
	// backups. Without it (or, alone, RestoreFrom) such a node refuses to
	// found: backups that outlived an empty data directory say this node's
	// data was lost (see foundfrom.go).
	FoundEmpty bool
	// OnBackup, when set, is called after each scheduled backup with its
	// result (for metrics).
	OnBackup func(BackupResult)

	// WrapTransport, when set, wraps the Raft transport: tests inject
	// faults with it (see transport.Wrap).
	WrapTransport func(raft.Transport) raft.Transport
	// DialRPC, when set, opens the TCP connections of the forwarding RPC
	// (the node writes the protocol byte and the handshake on them): tests
	// cut forwarded calls with it.
	DialRPC func(addr string, timeout time.Duration) (net.Conn, error)
}

// DefaultConfig returns a Config with the defaults for everything but the
// addresses and the data directory.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   1000 * time.Millisecond,
		ElectionTimeout:    1000 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		SnapshotThreshold:  8192,
		SnapshotInterval:   30 * time.Second,
		TrailingLogs:       10240,
		MaxBatch:           1024,
		MaxInflight:        1,
		BatchWait:          5 * time.Millisecond,
		RetryInterval:      20 * time.Millisecond,
		BackupInterval:     time.Hour,
		BackupRetain:       24,
		MinFreeDisk:        256 << 20,
		DiskCheckInterval:  time.Second,
		DiskStallTimeout:   2 * time.Second,
	}
}

// Validate checks the configuration without changing it.
func (c *Config) Validate() error {
	var errs []error
	errs = append(errs, c.checkPlace()...)
	errs = append(errs, c.checkFounding()...)
	errs = append(errs, c.checkPools()...)
	errs = append(errs, c.checkTuning()...)
	return errors.Join(errs...)
}

// checkPlace checks where the node keeps its state and how it is reached.
func (c *Config) checkPlace() []error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("DataDir is empty"))
	}
	if c.RaftAddr == "" {
		errs = append(errs, errors.New("RaftAddr is empty"))
	}
	// The node's own row of the member table, checked before it founds or
	// joins: the state machine would refuse it there.
	if len(c.ID) > fsm.MaxMemberID {
		errs = append(errs, fmt.Errorf("ID is %d bytes long; at most %d", len(c.ID), fsm.MaxMemberID))
	}
	for _, a := range []struct{ name, addr string }{{"RaftAddr", c.RaftAddr}, {"AdvertiseRaft", c.AdvertiseRaft}, {"APIAddr", c.APIAddr}} {
		if len(a.addr) > fsm.MaxAddressLen {
			errs = append(errs, fmt.Errorf("%s is %d bytes long; at most %d", a.name, len(a.addr), fsm.MaxAddressLen))
		}
	}
	if err := storage.Valid(c.LogStore); err != nil {
		errs = append(errs, err)
	}
	if c.WALSegmentSize > 1<<30 {
		errs = append(errs, fmt.Errorf("WALSegmentSize %d: at most 1 GiB", c.WALSegmentSize))
	}
	if (c.ServerTLS == nil) != (c.ClientTLS == nil) {
		errs = append(errs, errors.New("ServerTLS and ClientTLS go together: a node that accepts TLS must dial TLS"))
	}
	return errs
}

// checkFounding checks how a node without state founds or joins a cluster.
func (c *Config) checkFounding() []error {
	var errs []error
	if len(c.Peers) > 0 && (len(c.Join) > 0 || c.JoinVia != nil) {
		errs = append(errs, errors.New("Peers and Join exclude each other: bootstrap a fixed voter set, or join a cluster"))
	}
	if c.RestoreFrom != "" && !c.loneFounder() {
		errs = append(errs, errors.New("RestoreFrom is for a node that founds a cluster alone, without Peers or Join "+
			"(a cluster of several is founded from a backup by one node alone, the others joining it)"))
	}
	if c.FoundEmpty && (len(c.Join) > 0 || c.JoinVia != nil) {
		errs = append(errs, errors.New("FoundEmpty is for a node that founds a cluster, alone or with Peers: a node that joins founds nothing"))
	}
	if c.RestoreFrom != "" && c.FoundEmpty {
		errs = append(errs, errors.New("RestoreFrom and FoundEmpty exclude each other: found from a backup, or empty"))
	}
	seen := map[string]bool{}
	self := false
	for _, p := range c.Peers {
		self = self || p.ID == c.ID
		switch {
		case p.ID == "" || p.RaftAddr == "":
			errs = append(errs, fmt.Errorf("peer %+v: ID and RaftAddr are required", p))
		case seen[p.ID]:
			errs = append(errs, fmt.Errorf("peer ID %q appears twice", p.ID))
		}
		seen[p.ID] = true
	}
	switch {
	case len(c.Peers) > 0 && c.ID == "":
		errs = append(errs, errors.New("Peers needs ID: the node's own entry of the list"))
	case len(c.Peers) > 0 && !self:
		errs = append(errs, fmt.Errorf("ID %q is not one of Peers: every node of the list is given the list and its own ID", c.ID))
	}
	return errs
}

// checkPools checks the pools a founder creates: valid names, ranges that
// parse and do not overlap.
func (c *Config) checkPools() []error {
	var errs []error
	var ranges []allocator.Range
	for _, p := range c.Pools {
		if err := fsm.ValidatePoolName(p.Name); err != nil {
			errs = append(errs, err)
		}
		r, err := allocator.ParseRange(p.Range)
		if err != nil {
			errs = append(errs, fmt.Errorf("pool %q: %w", p.Name, err))
			continue
		}
		for i, o := range ranges {
			if allocator.Overlaps(r, o) {
				errs = append(errs, fmt.Errorf("pools %q (%s) and %q (%s) overlap", c.Pools[i].Name, o, p.Name, r))
			}
		}
		ranges = append(ranges, r)
	}
	return errs
}

// checkTuning checks the timeouts, batching, backups and disk watch.
func (c *Config) checkTuning() []error {
	var errs []error
	if c.HeartbeatTimeout <= 0 || c.ElectionTimeout <= 0 || c.LeaderLeaseTimeout <= 0 || c.CommitTimeout <= 0 {
		errs = append(errs, errors.New("Raft timeouts must be positive (start from DefaultConfig)"))
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		errs = append(errs, errors.New("LeaderLeaseTimeout must not exceed HeartbeatTimeout"))
	}
	if c.BatchWait < 0 {
		errs = append(errs, fmt.Errorf("BatchWait is %v; want 0 or more", c.BatchWait))
	}
	if c.MaxBatch < 1 || c.MaxInflight < 1 || c.RetryInterval <= 0 || c.SnapshotThreshold == 0 {
		errs = append(errs, errors.New("MaxBatch, MaxInflight, RetryInterval and SnapshotThreshold must be positive (start from DefaultConfig)"))
	}
	if c.BackupDir != "" && c.BackupInterval < time.Second {
		errs = append(errs, fmt.Errorf("BackupInterval is %v; want 1s or more", c.BackupInterval))
	}
	if c.BackupDir != "" && c.BackupRetain < 1 {
		errs = append(errs, fmt.Errorf("BackupRetain is %d; want 1 or more", c.BackupRetain))
	}
	if c.DiskStallTimeout < 0 {
		errs = append(errs, fmt.Errorf("DiskStallTimeout is %v; want 0 (off) or a positive duration", c.DiskStallTimeout))
	}
	if c.DiskCheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("DiskCheckInterval is %v; want a positive duration (start from DefaultConfig)", c.DiskCheckInterval))
	}
	return errs
}
