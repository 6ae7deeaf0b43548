package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/forward"
	"github.com/rangealloc/rangealloc/node/internal/storage"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/durable"
	"github.com/rangealloc/rangealloc/transport"
)

// Node is one rangealloc server: a Raft member with its state machine, the
// leader's group commit, and the forwarding of calls made on a follower.
type Node struct {
	cfg    Config
	id     string
	addr   string // advertised Raft address
	logger hclog.Logger

	fsm   *fsm.FSM
	raft  *raft.Raft
	mux   *transport.Mux
	trans *raft.NetworkTransport
	// raftTrans is the transport Raft uses: trans, or what
	// Config.WrapTransport made of it.
	raftTrans raft.Transport
	store     *storage.Store
	logStore  string // LogStoreBolt or storage.LogStoreWAL, as the data directory records
	// fwd makes this node's calls to the leader, and its probes
	// (package node/internal/forward).
	fwd *forward.Client
	// probes asks other nodes what they are (probe.go).
	probes *prober

	// commit is the leader's group commit (commit.go).
	commit *groupCommit
	// levels decides the cluster's feature level (feature.go).
	levels *featureLevels
	notify chan bool

	// leader is what this node knows of its own leadership (leader.go).
	leader leadership
	// life is the node's start-up phase (phase.go).
	life lifecycle
	// founder founds or joins the cluster, and keeps its ID
	// (membership.go, foundfrom.go).
	founder *founder
	// lead is what this follower last learned of the leader's commit
	// index (readiness).
	lead leaderWord
	// memberMu serializes the leader's membership decisions: a join's
	// checks and a feature level raise (feature.go).
	memberMu sync.Mutex
	// members adds and removes members on the leader (members.go).
	members *memberChanges
	// watch runs member health, promotion and dead-member cleanup while
	// this node leads (health.go).
	watch *memberWatch
	// restores hands backups to Raft on the leader (write.go).
	restores *restorer
	// backups writes the scheduled backups; nil without Config.BackupDir.
	backups *backuper
	// disk is what this node last read of its disk (disk.go).
	disk diskWatch
	// stall times the log store's writes (stall.go).
	stall storage.StallWatch

	shutdown chan struct{}
	// raftDown is closed once Raft has stopped: a future it has not
	// answered by then it never will (see wait).
	raftDown  chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Open starts a node: it opens or creates the data directory, starts Raft
// on the configured address, and bootstraps or joins a cluster when the
// node has no state. It returns once the node runs; use WaitForLeader to
// wait until it can serve.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node config: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if err := privateDataDir(cfg.DataDir, logger); err != nil {
		return nil, err
	}
	if err := checkBackupDir(cfg.BackupDir); err != nil {
		return nil, err
	}
	id, err := nodeID(cfg)
	if err != nil {
		return nil, err
	}
	f := fsm.New(logger.Named("fsm"))
	if cfg.OnApply != nil {
		f.OnApply(cfg.OnApply)
	}
	n := &Node{cfg: cfg, id: id, logger: logger.Named("node"), fsm: f,
		notify: make(chan bool, 64), shutdown: make(chan struct{}), raftDown: make(chan struct{})}
	n.levels = newFeatureLevels(n)
	n.commit = newGroupCommit(cfg.MaxBatch, cfg.MaxInflight, cfg.BatchWait, n.shutdown, n.levels.checkKind,
		func(entry []byte) raft.ApplyFuture { return n.raft.Apply(entry, 0) }, n.wait, cfg.OnCommit)
	n.founder = &founder{cfg: cfg, id: id, logger: n.logger, life: &n.life, fsm: f, shutdown: n.shutdown,
		submit: n.submit, restore: n.restoreVia, raise: n.levels.raiseOnFounding, established: make(chan struct{})}
	f.OnClusterID(n.founder.learnClusterID)
	if err := n.start(ctx); err != nil {
		close(n.shutdown)
		if n.raft != nil {
			_ = n.raft.Shutdown().Error()
		}
		close(n.raftDown)
		n.closeResources()
		n.wg.Wait()
		return nil, err
	}
	return n, nil
}

// start opens the data directory, starts Raft, and founds, joins or
// rejoins the cluster: the three steps below, in order.
func (n *Node) start(ctx context.Context) error {
	disk, foundFrom, adv, err := n.openDataDir()
	if err != nil {
		return err
	}
	if err := n.startRaft(disk, adv); err != nil {
		return err
	}
	return n.takePlace(ctx, disk, foundFrom)
}

// openDataDir checks the data directory and reads what it holds: whether
// it has state, and the backup a lone founder founds from (or finishes
// restoring). It makes the phase's first move for a node with state.
func (n *Node) openDataDir() (disk storage.State, foundFrom *fsm.Backup, adv *net.TCPAddr, err error) {
	cfg := n.cfg
	n.addr = cfg.AdvertiseRaft
	if n.addr == "" {
		n.addr = cfg.RaftAddr
	}
	adv, err = net.ResolveTCPAddr("tcp", n.addr)
	if err != nil {
		return disk, nil, nil, fmt.Errorf("advertise address %q: %w", n.addr, err)
	}
	if n.logStore, err = storage.Resolve(cfg.DataDir, cfg.LogStore, true); err != nil {
		return disk, nil, nil, err
	}
	n.disk.init(n.id, cfg, n.logStore, n.logger)
	disk, err = storage.Check(cfg.DataDir, n.logStore, n.logger)
	if err != nil {
		return disk, nil, nil, err
	}
	if err := n.founder.loadClusterID(); err != nil {
		return disk, nil, nil, err
	}
	switch {
	case disk.HasState:
		foundFrom, err = n.founder.pendingRestore()
	case cfg.loneFounder():
		foundFrom, err = n.founder.prepareFounding()
	}
	if err != nil {
		return disk, nil, nil, err
	}
	n.founder.restoring.Store(foundFrom != nil)
	// The phase's first move: a node with state serves, or finishes the
	// founding restore it was stopped in.
	if disk.HasState && foundFrom != nil {
		n.life.advance(phaseRestoring)
	} else if disk.HasState {
		n.life.advance(phaseServing)
	}
	if disk.HasState {
		if err := n.founder.resumeFounding(); err != nil {
			return disk, nil, nil, err
		}
	}
	return disk, foundFrom, adv, nil
}

// startRaft starts the Raft transport, the stores and Raft itself, and
// the node's goroutines. Without state, Raft's port stays shut until
// takePlace decides.
func (n *Node) startRaft(disk storage.State, adv *net.TCPAddr) error {
	cfg := n.cfg
	// Raft's port opens once Raft runs (at once with state; without it,
	// when takePart decides), so raftPeerAllowed always has n.raft.
	var err error
	n.mux, err = transport.Listen(cfg.RaftAddr, adv, transport.Options{Logger: n.logger, ClusterID: n.ClusterID,
		DialRPC: cfg.DialRPC, RaftClosed: true, ServerTLS: cfg.ServerTLS, ClientTLS: cfg.ClientTLS,
		AllowRaftPeer: func(id string) bool { return raftPeerAllowed(n.raft, id) }})
	if err != nil {
		return fmt.Errorf("raft address: %w", err)
	}
	n.addr = n.mux.Raft().Addr().String()
	n.trans = transport.NewTCPTransport(n.mux.Raft(), n.logger.Named("transport"))
	var trans raft.Transport = n.trans
	if cfg.WrapTransport != nil {
		trans = cfg.WrapTransport(trans)
	}
	n.raftTrans = trans
	var (
		logs  raft.LogStore
		snaps raft.SnapshotStore
	)
	n.store, logs, snaps, err = openStores(n.cfg, n.logStore, disk.Marked, &n.stall, n.logger)
	if err != nil {
		return err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.id)
	rc.Logger = raftLogger{n.logger.Named("raft")}
	rc.HeartbeatTimeout, rc.ElectionTimeout = cfg.HeartbeatTimeout, cfg.ElectionTimeout
	rc.LeaderLeaseTimeout, rc.CommitTimeout = cfg.LeaderLeaseTimeout, cfg.CommitTimeout
	rc.SnapshotThreshold, rc.SnapshotInterval, rc.TrailingLogs = cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.NotifyCh = n.notify
	// Without state, Raft has no configuration: it neither campaigns nor,
	// with its port shut, hears from anyone until takePart decides.
	if n.raft, err = raft.NewRaft(rc, n.fsm, logs, n.store, snaps, trans); err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	n.fwd = forward.New(forward.Config{Dial: n.mux.DialRPC, DialProbe: n.mux.DialProbe, BatchWait: n.cfg.BatchWait,
		Leader: func() string { a, _ := n.raft.LeaderWithID(); return string(a) }, Shutdown: n.shutdown, Go: n.goFunc})
	n.probes = &prober{fwd: n.fwd, from: n.id}
	n.founder.attach(n.raft, n.addr, n.fwd, n.probes)
	// Before any goroutine: leaderLoop and the RPCs use them.
	n.members = newMemberChanges(n)
	n.restores = &restorer{raft: n.raft, fsm: n.fsm, disk: &n.disk, wait: n.wait, dir: n.cfg.DataDir, logger: n.logger}
	n.watch = newMemberWatch(n)
	n.goFunc(n.serveRPC)
	n.goFunc(n.commit.batchLoop)
	n.goFunc(n.commit.resolveLoop)
	n.goFunc(n.leaderLoop)
	n.goFunc(n.followLoop)
	guardDisk(n).start()
	return nil
}

// takePlace founds or joins a cluster when the node has no state, opens
// Raft's port, and finishes a founding restore.
func (n *Node) takePlace(ctx context.Context, disk storage.State, foundFrom *fsm.Backup) error {
	if disk.HasState {
		// A founding marker left by a crash between bootstrap and its
		// removal (takePart) would let this directory, once emptied, skip
		// the questions that refuse a lost voter.
		if err := durable.Remove(filepath.Join(n.cfg.DataDir, foundingFile)); err != nil {
			return err
		}
		n.mux.OpenRaft()
		n.founder.warnLoneFounder()
	} else {
		if err := n.founder.takePart(ctx); err != nil {
			return err
		}
		n.mux.OpenRaft()
		if foundFrom != nil {
			n.life.advance(phaseRestoring)
		} else {
			n.life.advance(phaseServing)
		}
	}
	if foundFrom != nil {
		if err := n.founder.restoreFounding(ctx, foundFrom); err != nil {
			return err
		}
	}
	startBackups(n)
	n.logger.Info("node started", "id", n.id, "raft", n.addr, "existing_state", disk.HasState, "cluster_id", n.ClusterID())
	return nil
}

// raftPeerAllowed tells the transport whether the node id (named by its
// TLS certificate) may speak Raft to this one: only a member of this
// node's latest configuration may, so a certificate of the cluster's CA
// that names no member cannot append entries or ask for votes. A node
// with no configuration yet is being joined: the leader adding it is the
// first to dial, and its entries bring the configuration.
func raftPeerAllowed(r *raft.Raft, id string) bool {
	member, empty := inConfiguration(r, id)
	return member || empty
}

// inConfiguration tells whether id is a server of r's latest
// configuration (committed or not), and whether that configuration is
// empty (a node that has not founded or joined a cluster yet).
func inConfiguration(r *raft.Raft, id string) (member, empty bool) {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false, false
	}
	servers := f.Configuration().Servers
	for _, s := range servers {
		member = member || (id != "" && string(s.ID) == id)
	}
	return member, len(servers) == 0
}

// openStores opens the Raft log and stable store (logStore: raft-boltdb
// with fsync on, no freelist sync, the hashmap freelist, or raft-wal; the
// state marker written before its first write) behind a log cache, and
// the snapshot store keeping two snapshots.
func openStores(cfg Config, logStore string, marked bool, stall *storage.StallWatch, logger hclog.Logger) (*storage.Store, raft.LogStore, raft.SnapshotStore, error) {
	s, err := storage.Open(cfg.DataDir, logStore, cfg.WALSegmentSize, logger)
	if err != nil {
		return nil, nil, nil, err
	}
	store := storage.NewStore(s, cfg.DataDir, marked, stall, cfg.BeforeStoreWrite)
	logs, err := raft.NewLogCache(1024, store)
	if err != nil {
		store.Close()
		return nil, nil, nil, err
	}
	snaps, err := storage.OpenSnapshots(cfg.DataDir, 2, logger.Named("snapshots"))
	if err != nil {
		store.Close()
		return nil, nil, nil, fmt.Errorf("snapshot store: %w", err)
	}
	return store, logs, snaps, nil
}

// nodeID returns cfg.ID, or the ID kept in the data directory, creating it
// on first use. A configured ID that differs from the kept one is refused:
// a data directory belongs to one node.
func nodeID(cfg Config) (string, error) {
	path := filepath.Join(cfg.DataDir, "node-id")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		kept := strings.TrimSpace(string(b))
		if cfg.ID != "" && cfg.ID != kept {
			return "", fmt.Errorf("node ID %q does not match %q kept in %s", cfg.ID, kept, path)
		}
		return kept, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("read node ID: %w", err)
	}
	id := cfg.ID
	if id == "" {
		id = uuid.NewString()
	}
	if err := durable.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep node ID: %w", err)
	}
	return id, nil
}

// privateDataDir creates the data dir (durably: a data dir whose entry a
// power cut took would start empty) readable by this user alone: its
// log and snapshots hold every owner and Service. One that exists keeps
// its mode (an operator chose it), with a warning when others may read it.
func privateDataDir(dir string, logger hclog.Logger) error {
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		logger.Warn("data dir is readable by other users: its log and snapshots hold every allocation's owner",
			"path", dir, "mode", fmt.Sprintf("%#o", perm), "fix", "chmod 700 "+dir)
	}
	return nil
}

// goFunc runs fn on a goroutine owned by the node: Close waits for it.
func (n *Node) goFunc(fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn()
	}()
}

// ID returns the node's Raft server ID.
func (n *Node) ID() string { return n.id }

// RaftAddr returns the advertised Raft address.
func (n *Node) RaftAddr() string { return n.addr }

// IsLeader reports whether this node is the leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// WaitForLeader blocks until the cluster has a leader this node knows of.
func (n *Node) WaitForLeader(ctx context.Context) error {
	for {
		if addr, _ := n.raft.LeaderWithID(); addr != "" {
			return nil
		}
		if err := sleepOr(ctx, n.shutdown, n.cfg.RetryInterval); err != nil {
			return fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
	}
}

// sleepOr waits d, or fails when ctx ends or stop closes (ErrClosed).
func sleepOr(ctx context.Context, stop <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return ErrClosed
	}
}

// leaderLoop follows leadership changes. On taking over, the leader
// applies an empty command entry before it serves linearizable reads, then
// writes its own member row and, if it bootstrapped the cluster, the
// configured pools.
//
// Why not raft.Barrier: Raft hands only command and configuration entries
// to the state machine, never its no-op and barrier entries, so after a
// barrier the state machine's applied index could stay below the commit
// index for good, and linearizable reads wait for exactly that. An empty
// command entry goes through the state machine; after it, every entry this
// leader appends does too.
func (n *Node) leaderLoop() {
	for {
		select {
		case <-n.shutdown:
			return
		case leader := <-n.notify:
			n.leader.ready.Store(false)
			gen := n.leader.gen.Add(1)
			n.watch.follow(leader, gen)
			if !leader {
				n.logger.Info("lost leadership")
				continue
			}
			n.logger.Info("became leader; applying an entry of this term before serving reads")
			if err := n.wait(n.raft.Apply(fsm.EncodeBatch(nil), 0)); err != nil {
				n.logger.Warn("first entry of the term failed", "error", err)
				continue
			}
			if n.leader.gen.Load() == gen && n.IsLeader() {
				n.leader.ready.Store(true)
				n.goFunc(func() { n.establish(gen) })
			}
		}
	}
}

// establish makes the replicated state hold what this node's configuration says.
func (n *Node) establish(gen uint64) {
	defer n.founder.markEstablished()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-n.shutdown:
			cancel()
		case <-ctx.Done():
		}
	}()
	n.founder.nameCluster(ctx)
	rows := []fsm.Member{{ID: n.id, RaftAddr: n.addr, APIAddr: n.cfg.APIAddr}}
	if n.founder.bootstrapped {
		for _, p := range n.cfg.Peers {
			if p.ID != n.id {
				rows = append(rows, fsm.Member{ID: p.ID, RaftAddr: p.RaftAddr, APIAddr: p.APIAddr})
			}
		}
	}
	for _, m := range rows {
		if cur, ok := n.fsm.Member(m.ID); ok && cur == m {
			continue
		}
		if _, err := n.submit(ctx, &fsm.Request{Kind: fsm.KindSetMember, Member: m}); err != nil {
			n.logger.Warn("could not write member row", "member", m.ID, "error", err)
		}
	}
	if !n.founder.bootstrapped {
		ensureServiceNetwork(ctx, n.cfg.ServiceNetwork, n.fsm, n.submit, n.logger)
		n.leader.settle(gen)
		return
	}
	answered := true // every pool's write got a definite answer
	for _, p := range n.cfg.Pools {
		// The ID makes this idempotent across leaders and restarts while the
		// request table remembers it.
		req := &fsm.Request{Kind: fsm.KindCreatePoolExclusive, ID: "bootstrap-pool/" + p.Name + "/" + p.Range, Pool: p.Name, Range: p.Range}
		res, err := n.submit(ctx, req)
		answered = answered && err == nil
		switch {
		case err != nil:
			n.logger.Warn("could not create configured pool", "pool", p.Name, "error", err)
		case res.Err != nil:
			n.logger.Warn("configured pool not created", "pool", p.Name, "range", p.Range, "error", res.Err)
		case res.Created:
			n.logger.Info("created pool", "pool", p.Name, "range", p.Range)
		}
	}
	ensureServiceNetwork(ctx, n.cfg.ServiceNetwork, n.fsm, n.submit, n.logger)
	n.leader.settle(gen)
	// Last: it waits for every founder to answer, and a founder that is
	// down must not hold up the pools, nor readiness.
	n.levels.raiseOnFounding(ctx)
	n.founder.finishFounding(answered)
}

// Close shuts the node down. A leader with other voters hands leadership
// over first, so the cluster does not wait out an election timeout.
func (n *Node) Close() error { return n.close(true) }

// Halt stops the node at once, without handing leadership over: what the
// rest of the cluster sees when the process dies. Everything acknowledged
// is on disk already. For tests and emergencies.
func (n *Node) Halt() error { return n.close(false) }

func (n *Node) close(handover bool) error {
	n.closeOnce.Do(func() {
		// A stalled leader's loop cannot run a transfer: it would wait
		// for the disk. Raft's shutdown below waits for it all the same.
		if handover && n.IsLeader() && countVoters(n.raft) > 1 && !n.DiskStalled() {
			if err := n.raft.LeadershipTransfer().Error(); err != nil {
				n.logger.Warn("leadership transfer before shutdown failed", "error", err)
			}
		}
		close(n.shutdown)
		if n.watch != nil {
			n.watch.stop()
		}
		if err := n.raft.Shutdown().Error(); err != nil {
			n.closeErr = err
		}
		close(n.raftDown)
		n.closeResources()
		n.wg.Wait()
		n.logger.Info("node stopped")
	})
	return n.closeErr
}

func (n *Node) closeResources() {
	if n.fwd != nil {
		n.fwd.Close()
	}
	if n.trans != nil {
		_ = n.trans.Close()
	}
	if n.mux != nil {
		_ = n.mux.Close()
	}
	if n.store != nil {
		_ = n.store.Close()
	}
}

func countVoters(r *raft.Raft) int {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}
