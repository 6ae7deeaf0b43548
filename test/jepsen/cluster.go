package jepsen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/test/faultfs"
)

// The ports every node uses inside its own namespace.
const (
	httpPort = 7080
	raftPort = 7081
)

// Tuning is the Raft tuning the servers run with: short timeouts so that a
// 30 s run sees several elections, and a small snapshot threshold and
// trailing log so that a follower cut off for a few seconds must catch up
// by InstallSnapshot.
type Tuning struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	SnapshotThreshold  int
	SnapshotInterval   time.Duration
	TrailingLogs       int
	// LogStore is the servers' --log-store; empty leaves the default.
	// With wal, WALSegmentSize is their --wal-segment-size: raft-wal
	// drops compacted entries a whole segment at a time and still serves
	// the rest, so with its default 16 MiB no follower would ever need a
	// snapshot in a run.
	LogStore       string
	WALSegmentSize string
}

// DefaultTuning is the tuning of every run.
func DefaultTuning() Tuning {
	return Tuning{HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond, SnapshotThreshold: 32, SnapshotInterval: 300 * time.Millisecond,
		TrailingLogs: 16}
}

// args are the flags of the Raft tuning.
func (t Tuning) args() []string {
	args := []string{"--heartbeat-timeout", t.HeartbeatTimeout.String(), "--election-timeout", t.ElectionTimeout.String(),
		"--leader-lease-timeout", t.LeaderLeaseTimeout.String(),
		"--snapshot-threshold", fmt.Sprint(t.SnapshotThreshold), "--snapshot-interval", t.SnapshotInterval.String(),
		"--trailing-logs", fmt.Sprint(t.TrailingLogs), "--log-level", "info", "--disk-stall-timeout", stallTimeout.String()}
	if t.LogStore != "" {
		args = append(args, "--log-store", t.LogStore)
	}
	if t.LogStore == "wal" && t.WALSegmentSize != "" {
		args = append(args, "--wal-segment-size", t.WALSegmentSize)
	}
	return args
}

// Cluster is three servers in a Lab.
type Cluster struct {
	Lab     *Lab
	Servers []*Server
	Tuning  Tuning
	Sec     *Security
	ctl     []*client.Client // per node, short timeouts, for the harness's own calls
	admin   []*client.Client // per node, for membership changes, which wait for a commit

	// Disks are the servers' fault file systems, one each, when the run
	// has power cuts or disk stalls (power.go); else nil.
	Disks []*faultfs.FS

	bin, dataDir, logDir string
	spare                *Server // the fourth node of mistaken-join, once Spare made it
}

// NewCluster prepares one server per namespace of lab, secured as sec
// says (issuing each node's certificate); Start starts them. With disks,
// each server's data dir lies on a fault file system of its own (power.go),
// which CloseDisks unmounts.
func NewCluster(lab *Lab, bin, dataDir, logDir string, tuning Tuning, pools PoolSet, sec *Security, disks bool) (*Cluster, error) {
	c := &Cluster{Lab: lab, Tuning: tuning, Sec: sec, bin: bin, dataDir: dataDir, logDir: logDir}
	var peers []string
	for i, ip := range lab.IPs {
		peers = append(peers, fmt.Sprintf("n%d=%s:%d=%s", i+1, ip, raftPort, sec.URL(fmt.Sprintf("%s:%d", ip, httpPort))))
	}
	if disks {
		if err := c.mountDisks(len(lab.IPs)); err != nil {
			return nil, err
		}
	}
	for i := range lab.IPs {
		s, err := c.newServer(i)
		if err != nil {
			return nil, errors.Join(err, c.CloseDisks())
		}
		if disks {
			s.DataDir = diskDataDir(c.Disks[i])
		}
		s.args = slices.Concat([]string{"server", "--id", s.ID, "--data-dir", s.DataDir,
			"--http-addr", s.HTTP, "--raft-addr", s.Raft, "--peers", strings.Join(peers, ","),
			"--service-cidr", pools.IPRange, "--node-port-range", pools.PortRange}, tuning.args(), s.args)
		c.Servers = append(c.Servers, s)
		c.ctl = append(c.ctl, sec.Client(s.API, time.Second, sec.Admin))
		c.admin = append(c.admin, sec.Client(s.API, 10*time.Second, sec.Admin))
	}
	return c, nil
}

// newServer returns node i of the lab with its security flags only,
// issuing its certificate.
func (c *Cluster) newServer(i int) (*Server, error) {
	id, ip := fmt.Sprintf("n%d", i+1), c.Lab.IPs[i]
	args, err := c.Sec.ServerArgs(id, ip)
	if err != nil {
		return nil, fmt.Errorf("%s's certificate: %w", id, err)
	}
	hostport := fmt.Sprintf("%s:%d", ip, httpPort)
	return &Server{ID: id, NS: c.Lab.NS[i], bin: c.bin, DataDir: filepath.Join(c.dataDir, id),
		HTTP: hostport, API: c.Sec.URL(hostport), Raft: fmt.Sprintf("%s:%d", ip, raftPort),
		LogPath: filepath.Join(c.logDir, id+".log"), args: args, joinEnv: c.Sec.JoinEnv()}, nil
}

// Spare returns the fourth node of mistaken-join, making its namespace the
// first time: a bare server (no --peers, no --join, the default pools)
// that bootstraps a one-node cluster of its own. It is not one of Servers,
// so no check looks at it, and Gather does not read its log.
func (c *Cluster) Spare() (*Server, error) {
	if c.spare != nil {
		return c.spare, nil
	}
	i, err := c.Lab.AddNode()
	if err != nil {
		return nil, fmt.Errorf("the fourth node's namespace: %w", err)
	}
	s, err := c.newServer(i)
	if err != nil {
		return nil, err
	}
	s.args = slices.Concat([]string{"server", "--id", s.ID, "--data-dir", s.DataDir, "--http-addr", s.HTTP, "--raft-addr", s.Raft},
		c.Tuning.args(), s.args)
	c.spare = s
	return s, nil
}

// Start starts every server that is not running.
func (c *Cluster) Start() error {
	for _, s := range c.Servers {
		if up, _ := s.Running(); !up {
			if err := s.Start(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close kills every server.
func (c *Cluster) Close() error {
	var errs []error
	for _, s := range c.Servers {
		errs = append(errs, s.Kill())
	}
	return errors.Join(errs...)
}

// index returns the index of the node with this ID, or -1.
func (c *Cluster) index(id string) int {
	for i, s := range c.Servers {
		if s.ID == id {
			return i
		}
	}
	return -1
}

// Leader asks every running, unpaused node who leads and returns the
// leader of the highest term that a node reports, or -1.
func (c *Cluster) Leader(ctx context.Context) (leader int, term uint64) {
	leader = -1
	for i, s := range c.Servers {
		if up, paused := s.Running(); !up || paused {
			continue
		}
		st, err := c.ctl[i].Cluster(ctx)
		if err != nil || st.Leader.ID == "" {
			continue
		}
		if j := c.index(st.Leader.ID); j >= 0 && st.Term >= term {
			leader, term = j, st.Term
		}
	}
	return leader, term
}

// poll calls done every interval until it reports true, or ctx ends; the
// error then says what was waited for and done's last reason.
func poll(ctx context.Context, interval time.Duration, what string, done func() (bool, string)) error {
	for {
		ok, why := done()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			if why != "" {
				what += " (" + why + ")"
			}
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// WaitLeader polls Leader until one is known or ctx ends.
func (c *Cluster) WaitLeader(ctx context.Context) (leader int, term uint64, err error) {
	err = poll(ctx, 100*time.Millisecond, "no leader", func() (bool, string) {
		leader, term = c.Leader(ctx)
		return leader >= 0, ""
	})
	return leader, term, err
}

// WaitPools waits until the leader serves every pool of ps.
func (c *Cluster) WaitPools(ctx context.Context, ps PoolSet) error {
	return poll(ctx, 200*time.Millisecond, "pools not served", func() (bool, string) {
		l, _ := c.Leader(ctx)
		if l < 0 {
			return false, "no leader"
		}
		for _, p := range ps.Names() {
			if _, err := c.ctl[l].Pool(ctx, p, client.Options{}); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
}

// Members returns the configuration node i reports, sorted by ID, with
// Leader cleared: what a membership change may change.
func (c *Cluster) Members(ctx context.Context, i int) ([]api.ClusterMember, error) {
	st, err := c.ctl[i].Cluster(ctx)
	if err != nil {
		return nil, err
	}
	ms := st.Members
	for j := range ms {
		ms[j].Leader = false
	}
	slices.SortFunc(ms, func(a, b api.ClusterMember) int { return strings.Compare(a.ID, b.ID) })
	return ms, nil
}

// AppliedIndex returns node i's applied index.
func (c *Cluster) AppliedIndex(ctx context.Context, i int) (uint64, error) {
	st, err := c.ctl[i].Cluster(ctx)
	return st.AppliedIndex, err
}

// Converge waits until every node knows the same leader, and has applied
// the leader's commit index, with the same applied index everywhere.
func (c *Cluster) Converge(ctx context.Context) error {
	return poll(ctx, 200*time.Millisecond, "replicas did not converge", func() (bool, string) {
		idx := map[uint64]bool{}
		leaders := map[string]bool{}
		var commit uint64
		for i := range c.Servers {
			st, err := c.ctl[i].Cluster(ctx)
			if err != nil {
				return false, fmt.Sprintf("n%d: %v", i+1, err)
			}
			idx[st.AppliedIndex] = true
			leaders[st.Leader.ID] = true
			if st.Leader.ID == st.ID {
				commit = st.CommitIndex
			}
		}
		return len(idx) == 1 && len(leaders) == 1 && !leaders[""] && idx[commit],
			fmt.Sprintf("applied indexes %v, leaders %v, leader's commit index %d",
				slices.Collect(maps.Keys(idx)), slices.Collect(maps.Keys(leaders)), commit)
	})
}

// Final reads every pool's allocations with a linearizable list through
// node via (pool -> value -> owner).
func (c *Cluster) Final(ctx context.Context, via int, ps PoolSet) (map[string]map[string]string, error) {
	final := map[string]map[string]string{}
	for _, p := range ps.Names() {
		as, err := c.ctl[via].ListAll(ctx, p, "", client.Options{})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", p, err)
		}
		final[p] = map[string]string{}
		for _, a := range as {
			final[p][a.Value] = a.Owner
		}
	}
	return final, nil
}

// CompareReplicas reads every pool from every node with consistency=stale
// and reports each difference: the RangeAllocation (range and bitmap
// bytes) and the owners of the allocations.
func (c *Cluster) CompareReplicas(ctx context.Context, ps PoolSet) []string {
	var problems []string
	for _, p := range ps.Names() {
		var ref *replica
		for i := range c.Servers {
			r, err := c.readReplica(ctx, i, p)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if ref == nil {
				ref = &r
				continue
			}
			if r.rng != ref.rng || !bytes.Equal(r.data, ref.data) {
				problems = append(problems, fmt.Sprintf("pool %s: %s has RangeAllocation %s %x, %s has %s %x",
					p, ref.id, ref.rng, ref.data, r.id, r.rng, r.data))
			}
			if r.owners != ref.owners {
				problems = append(problems, fmt.Sprintf("pool %s: %s has owners %s, %s has %s", p, ref.id, ref.owners, r.id, r.owners))
			}
		}
	}
	return problems
}

// replica is one node's copy of one pool.
type replica struct {
	id, rng, owners string // owners: "value=owner,..." sorted
	data            []byte
}

func (c *Cluster) readReplica(ctx context.Context, i int, pool string) (replica, error) {
	stale := client.Options{Consistency: "stale"}
	r := replica{id: c.Servers[i].ID}
	ra, err := c.ctl[i].RangeAllocation(ctx, pool, stale)
	if err != nil {
		return r, fmt.Errorf("%s: RangeAllocation %s: %w", r.id, pool, err)
	}
	as, err := c.ctl[i].ListAll(ctx, pool, "", stale)
	if err != nil {
		return r, fmt.Errorf("%s: list %s: %w", r.id, pool, err)
	}
	var owners []string
	for _, a := range as {
		owners = append(owners, a.Value+"="+a.Owner)
	}
	sort.Strings(owners)
	r.rng, r.data, r.owners = ra.Range, ra.Data, strings.Join(owners, ",")
	return r, nil
}
