package node

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/storage"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/human"
	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// A node watches the file system holding its data directory. Below
// Config.MinFreeDisk it is "disk low":
//
//   - it refuses client writes (allocations, releases, transactions,
//     pools, Services, the service network, reconcile repairs, imports,
//     restores) with fsm.CodeInsufficientStorage, whether it would propose
//     them as the leader or forward them as a follower: either way its
//     disk would receive the entry. A leader that is low refuses the
//     writes followers forward to it too;
//   - /readyz says disk_full;
//   - as the leader, it hands leadership to the most up-to-date voter
//     that is not low, at most once per diskHandoffEvery, so that the
//     cluster keeps taking writes; with no such voter it keeps leading and
//     refusing.
//
// Raft's own entries (the leader's no-op, barriers, configuration
// changes) and the entries that keep the cluster running (member rows,
// the cluster's name) still go through: refusing them would stall
// elections, member removal and the hand-off itself, and they are small.
// Everything recovers by itself once space returns.

// diskHandoffEvery bounds how often a low leader tries to hand leadership
// away, so that a cluster whose disks are all nearly full does not pass
// leadership around.
const diskHandoffEvery = 10 * time.Second

// diskWatch is what the node last read of its disk. checkDisk writes it;
// anyone reads it.
type diskWatch struct {
	// The node's: its ID, data directory, log store, floor
	// (Config.MinFreeDisk), free-space call and logger. Set by Open.
	id, dir, logStore string
	floor             uint64
	readFree          func(dir string) (uint64, error)
	logger            hclog.Logger

	free      atomic.Uint64 // free bytes on the file system of DataDir
	known     atomic.Bool   // free was read at least once
	low       atomic.Bool   // known, and free is below MinFreeDisk
	failing   atomic.Bool   // the last read of free failed (logged once)
	logBytes  atomic.Uint64 // size of the log store (raft.db or wal/)
	snapBytes atomic.Uint64 // bytes of the files under snapshots/

	// handedOff is when this node last tried to hand leadership away for
	// want of space. Only diskLoop touches it.
	handedOff time.Time
}

// DiskStats is what a node knows of its disk, for metrics.
type DiskStats struct {
	// Free is the free space, in bytes, of the file system holding the
	// data directory (0 until first read).
	Free uint64
	// Floor is Config.MinFreeDisk; Low is true while Free is below it.
	Floor uint64
	Low   bool
	// RaftLogBytes is the size of the log store (raft.db or wal/), SnapshotBytes the bytes under
	// snapshots/.
	RaftLogBytes  uint64
	SnapshotBytes uint64
	// Stalled is true while a write to the Raft log or stable store has
	// gone unanswered for longer than Config.DiskStallTimeout; Stalls
	// counts such stalls since the node started (stall.go).
	Stalled bool
	Stalls  uint64
}

// DiskStats returns what the node last read of its disk (every
// Config.DiskCheckInterval).
func (n *Node) DiskStats() DiskStats {
	d := &n.disk
	return DiskStats{Free: d.free.Load(), Floor: d.floor, Low: d.low.Load(),
		RaftLogBytes: d.logBytes.Load(), SnapshotBytes: d.snapBytes.Load(),
		Stalled: n.stall.Stalled(), Stalls: n.stall.Stalls()}
}

// init gives the watch what it reads: the node's ID, its data directory
// and log store, the floor and free-space call of cfg.
func (d *diskWatch) init(id string, cfg Config, logStore string, logger hclog.Logger) {
	d.id, d.dir, d.logStore, d.floor, d.readFree, d.logger = id, cfg.DataDir, logStore, cfg.MinFreeDisk, cfg.DiskFree, logger
	if d.readFree == nil {
		d.readFree = storage.FreeBytes
	}
}

// diskGuard acts on what this node reads of its disk: it reads the
// free space every DiskCheckInterval, and hands leadership away from a
// low leader; it times the log store's writes, and holds this node's Raft
// messages while one is stalled (stall.go). Two goroutines run it until
// shutdown, diskLoop and stallLoop; the Node's disk and stall fields are
// what they read and write, and what the rest of the node reads.
type diskGuard struct {
	disk         *diskWatch
	stall        *storage.StallWatch
	every        time.Duration // Config.DiskCheckInterval
	stallTimeout time.Duration // Config.DiskStallTimeout; 0: no stallLoop
	dir          string        // the data directory, for the log
	logger       hclog.Logger
	shutdown     <-chan struct{}
	goFunc       func(func())

	// What it acts through: whether this node leads, the other voters and
	// a probe of one (for its disk and log), Raft's leadership transfer,
	// a raw TimeoutNow to a voter, and the Mux's hold on Raft messages.
	leading    func() bool
	voters     func() ([]raft.Server, error)
	probe      func(ctx context.Context, addr string) (*wire.ProbeReply, error)
	transfer   func(to raft.Server) error
	timeoutNow func(to raft.Server) error
	holdRaft   func(hold bool)
}

// start reads the disk once, so that a node started on a full disk
// refuses writes from its first request, then keeps reading it, and
// timing the store's writes unless the stall timeout is 0.
func (g *diskGuard) start() {
	g.disk.check()
	g.goFunc(g.diskLoop)
	if g.stallTimeout > 0 {
		g.goFunc(g.stallLoop)
	}
}

func (g *diskGuard) diskLoop() {
	t := time.NewTicker(g.every)
	defer t.Stop()
	for {
		select {
		case <-g.shutdown:
			return
		case <-t.C:
		}
		g.disk.check()
		if g.disk.low.Load() && g.leading() {
			g.handOffForDisk()
		}
	}
}

// check reads the free space and the sizes of raft.db and the
// snapshots. A failed read of the free space keeps the last value: a
// node whose file system cannot say (or an OS without statfs) is not
// called low for it.
func (d *diskWatch) check() {
	free, err := d.readFree(d.dir)
	switch {
	case err != nil:
		if !d.failing.Swap(true) {
			d.logger.Warn("cannot read the free space of the data dir; keeping the last reading", "dir", d.dir, "error", err)
		}
	default:
		d.failing.Store(false)
		low := d.floor > 0 && free < d.floor
		d.free.Store(free)
		d.known.Store(true)
		switch was := d.low.Swap(low); {
		case low && !was:
			d.logger.Warn("disk low: refusing client writes until space returns", "dir", d.dir,
				"free", human.Bytes(free), "min_free_disk", human.Bytes(d.floor))
		case !low && was:
			d.logger.Info("disk has space again: taking client writes", "free", human.Bytes(free))
		}
	}
	if d.logStore == storage.LogStoreWAL {
		d.logBytes.Store(storage.WALSize(d.dir))
	} else {
		d.logBytes.Store(storage.FileSize(filepath.Join(d.dir, storage.BoltFile)))
	}
	d.snapBytes.Store(storage.TreeSize(filepath.Join(d.dir, storage.SnapDir)))
}

// fillProbe adds this node's disk to its probe reply: a low leader picks
// whom to hand leadership to by it.
func (d *diskWatch) fillProbe(r *wire.ProbeReply) {
	r.DiskFree, r.DiskLow = d.free.Load(), d.low.Load()
}

// clientWrite tells whether a request of kind k is a client's write,
// refused while the disk is low. The others (member rows, the cluster's
// name, and any kind that keeps the cluster running) are not: refusing
// them would stall joins, removals and upgrades, and they are small.
func clientWrite(k fsm.Kind) bool {
	switch k {
	case fsm.KindTxn, fsm.KindCreatePool, fsm.KindCreatePoolExclusive, fsm.KindDeletePool,
		fsm.KindSetServiceNetwork, fsm.KindPutService, fsm.KindPutServiceV2, fsm.KindDeleteService, fsm.KindReconcile, fsm.KindImport:
		return true
	}
	return false
}

// lowError is the refusal of a client write while this node's disk is
// low; nil while it is not.
func (d *diskWatch) lowError() *fsm.Error {
	if !d.low.Load() {
		return nil
	}
	return &fsm.Error{Code: fsm.CodeInsufficientStorage, Op: -1, Message: fmt.Sprintf(
		"node %s has %s (%d bytes) free on the file system of its data dir %s, below its floor of %s (--min-free-disk): it refuses client writes until space returns; nothing was applied",
		d.id, human.Bytes(d.free.Load()), d.free.Load(), d.dir, human.Bytes(d.floor))}
}

// refuse returns the refusal of req, a client write, while this node's
// disk is low; nil otherwise.
func (d *diskWatch) refuse(req *fsm.Request) *fsm.Error {
	if !clientWrite(req.Kind) {
		return nil
	}
	return d.lowError()
}

// handOffForDisk, on a low leader, hands leadership to the most
// up-to-date voter that is not low, at most once per diskHandoffEvery.
func (g *diskGuard) handOffForDisk() {
	d := g.disk
	if !d.handedOff.IsZero() && time.Since(d.handedOff) < diskHandoffEvery {
		return
	}
	d.handedOff = time.Now()
	to, ok := g.voterWithSpace()
	if !ok {
		g.logger.Warn("disk low and no other voter with space answers: keeping leadership, refusing client writes",
			"free", human.Bytes(d.free.Load()), "min_free_disk", human.Bytes(d.floor))
		return
	}
	g.logger.Warn("disk low: handing leadership to a voter with space", "to", to.ID, "free", human.Bytes(d.free.Load()))
	if err := g.transfer(to); err != nil {
		g.logger.Warn("leadership hand-off for disk space failed", "to", to.ID, "error", err)
	}
}

// voterWithSpace probes the other voters at once and returns the one not
// low whose log is longest. A node of a release that does not report its
// disk counts as having space.
func (g *diskGuard) voterWithSpace() (raft.Server, bool) {
	voters, err := g.voters()
	if err != nil {
		return raft.Server{}, false
	}
	replies := make([]*wire.ProbeReply, len(voters))
	var wg sync.WaitGroup
	for i, s := range voters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := g.probe(context.Background(), string(s.Address))
			if err == nil && r.ID == string(s.ID) {
				replies[i] = r
			}
		}()
	}
	wg.Wait()
	best := -1
	for i, r := range replies {
		if r != nil && !r.DiskLow && (best < 0 || r.LastIndex > replies[best].LastIndex) {
			best = i
		}
	}
	if best < 0 {
		return raft.Server{}, false
	}
	return voters[best], true
}

// refusedForDisk tells whether res is a refusal for want of space (of
// this node or the leader's).
func refusedForDisk(res *fsm.Result) bool {
	return res != nil && res.Err != nil && res.Err.Code == fsm.CodeInsufficientStorage
}

// guardDisk builds n's disk guard: what it reads (n.disk, n.stall) and
// what it acts through.
func guardDisk(n *Node) *diskGuard {
	return &diskGuard{disk: &n.disk, stall: &n.stall, every: n.cfg.DiskCheckInterval, stallTimeout: n.cfg.DiskStallTimeout,
		dir: n.cfg.DataDir, logger: n.logger, shutdown: n.shutdown, goFunc: n.goFunc,
		leading: n.IsLeader,
		voters: func() ([]raft.Server, error) {
			f := n.raft.GetConfiguration()
			if err := f.Error(); err != nil {
				return nil, err
			}
			var voters []raft.Server
			for _, s := range f.Configuration().Servers {
				if s.Suffrage == raft.Voter && s.ID != raft.ServerID(n.id) {
					voters = append(voters, s)
				}
			}
			return voters, nil
		},
		probe:    n.probes.probe,
		transfer: func(to raft.Server) error { return n.wait(n.raft.LeadershipTransferToServer(to.ID, to.Address)) },
		timeoutNow: func(to raft.Server) error {
			hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(n.id),
				Addr: n.trans.EncodePeer(raft.ServerID(n.id), raft.ServerAddress(n.addr))}
			return n.raftTrans.TimeoutNow(to.ID, to.Address, &raft.TimeoutNowRequest{RPCHeader: hdr}, &raft.TimeoutNowResponse{})
		},
		holdRaft: n.mux.HoldRaft,
	}
}
