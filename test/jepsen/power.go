package jepsen

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/rangealloc/rangealloc/test/checker"
	"github.com/rangealloc/rangealloc/test/faultfs"
)

// Power cuts and stalled disks. When the run's faults include
// power-cut-one, power-cut-all or disk-stall, each node's data dir lies on
// a disk of its own: a fault file system (test/faultfs) mounted at
// <run dir>/nI.disk over <run dir>/nI.backing, with the data dir one level
// down (nI.disk/data), so that the server creates it and a wipe can
// remove it.
//
//   - power-cut-one kills a node with SIGKILL and cuts its disk's power:
//     every byte and every directory entry not fsynced is lost. It then
//     goes as the storage faults go (storage.go): the node must start and
//     serve, or refuse naming the file, and never start empty.
//   - power-cut-all does that to all three at once, then starts them.
//   - disk-stall freezes a node's disk for the hold: every operation on
//     it blocks, as on an SD card that stops answering. With the leader's,
//     writes through the others must resume within stallTimeout plus 3 s
//     (CheckStalls).

// stallTimeout is the servers' --disk-stall-timeout in a run.
const stallTimeout = time.Second

// stallResumeBound is how soon after a leader's disk froze a write
// through another node must be acknowledged.
const stallResumeBound = stallTimeout + 3*time.Second

// Stall is one disk-stall fault: which node's disk froze, when, and how
// soon writes resumed.
type Stall struct {
	Node  string
	Role  string // leader or follower, when the disk froze
	Start int64  // the freeze, on the run's clock
	End   int64  // the thaw
	// Resumed is how long after Start the first write sent after it
	// through another node was acknowledged; -1 if none was before End.
	Resumed time.Duration
}

func (s Stall) String() string {
	resumed := "no write through the others acknowledged while it lasted"
	if s.Resumed >= 0 {
		resumed = fmt.Sprintf("writes through the others resumed after %s", s.Resumed.Round(time.Millisecond))
	}
	return fmt.Sprintf("disk-stall of %s %s at %.3fs for %s: %s", s.Role, s.Node, float64(s.Start)/1e9,
		time.Duration(s.End-s.Start).Round(time.Millisecond), resumed)
}

// mountDisks gives each of the n servers a disk of its own under dataDir.
// Without FUSE the error wraps ErrNoNetns: the suite cannot run here.
func (c *Cluster) mountDisks(n int) error {
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("n%d", i+1)
		d, err := faultfs.Mount(filepath.Join(c.dataDir, id+".backing"), filepath.Join(c.dataDir, id+".disk"))
		if errors.Is(err, faultfs.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", ErrNoNetns, err)
		}
		if err != nil {
			return errors.Join(fmt.Errorf("%s's disk: %w", id, err), c.CloseDisks())
		}
		c.Disks = append(c.Disks, d)
	}
	return nil
}

// CloseDisks unmounts the disks; the servers must be down.
func (c *Cluster) CloseDisks() error {
	var errs []error
	for _, d := range c.Disks {
		errs = append(errs, d.Close())
	}
	c.Disks = nil
	return errors.Join(errs...)
}

// diskDataDir is the data dir of a server on disk d.
func diskDataDir(d *faultfs.FS) string { return d.Path("data") }

// cutPower cuts the power of node i's disk; the node must be down.
func (c *Cluster) cutPower(i int) (string, error) {
	if i >= len(c.Disks) {
		return "", fmt.Errorf("%s has no fault file system (a power cut needs one)", c.Servers[i].ID)
	}
	if err := c.Disks[i].Crash(); err != nil {
		return "", err
	}
	return "cut its disk's power: what was not fsynced is lost", nil
}

// powerCutAll kills the three nodes, cuts the power of their disks, holds
// them down, and starts them again; each must serve or refuse (and is then
// brought back by the runbook, once the others serve).
func (n *Nemesis) powerCutAll(ctx context.Context, s Step, leader int, term uint64) error {
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	target, err := n.C.AppliedIndex(actx, leader)
	cancel()
	if err != nil {
		n.Logf("skip %s: leader's applied index: %v", s.Fault, err)
		return nil
	}
	w := Window{Fault: s.Fault, Start: n.Now(), MinorityOut: false,
		Detail: fmt.Sprintf("kill -9 n1, n2, n3 and cut their disks' power (leader %s, term %d, applied %d)", n.C.Servers[leader].ID, term, target)}
	n.mark("fault %s: %s", s.Fault, w.Detail)
	if err := n.C.Close(); err != nil {
		return err
	}
	ds := make([]Damage, len(n.C.Servers))
	offs := make([]int64, len(n.C.Servers))
	for i, srv := range n.C.Servers {
		role := "follower"
		if i == leader {
			role = "leader"
		}
		ds[i] = Damage{Fault: s.Fault, Node: srv.ID, Role: role, At: w.Start}
		if ds[i].What, err = n.C.cutPower(i); err != nil {
			return fmt.Errorf("%s of %s: %w", s.Fault, srv.ID, err)
		}
	}
	sleep(ctx, s.Hold)
	for i, srv := range n.C.Servers {
		offs[i] = srv.LogSize()
		if err := srv.StartDamaged(); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	for i := range n.C.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds[i].Verdict, ds[i].Why = n.await(ctx, i, offs[i], target)
		}()
	}
	wg.Wait()
	for i, srv := range n.C.Servers {
		n.mark("%s %s: %s", srv.ID, ds[i].Verdict, ds[i].Why)
		if err := n.bringBack(ctx, i, &ds[i]); err != nil {
			return err
		}
	}
	w.End = n.Now()
	n.mu.Lock()
	n.windows = append(n.windows, w)
	n.damages = append(n.damages, ds...)
	n.mu.Unlock()
	n.mark("heal %s", s.Fault)
	return nil
}

// diskStall freezes the disk of the leader (or of the follower s.Pick
// picks) for the hold, then thaws it.
func (n *Nemesis) diskStall(ctx context.Context, s Step, leader int, term uint64) error {
	victim, role := leader, "leader"
	if !s.OnLeader {
		victim, role = n.others(leader)[s.Pick%2], "follower"
	}
	if victim >= len(n.C.Disks) {
		return fmt.Errorf("%s has no fault file system (a disk stall needs one)", n.C.Servers[victim].ID)
	}
	srv, d := n.C.Servers[victim], n.C.Disks[victim]
	w := Window{Fault: s.Fault, Start: n.Now(), MinorityOut: true,
		Detail: fmt.Sprintf("freeze the disk of %s %s (leader %s, term %d)", role, srv.ID, n.C.Servers[leader].ID, term)}
	n.mark("fault %s: %s", s.Fault, w.Detail)
	d.Freeze()
	sleep(ctx, s.Hold)
	d.Thaw()
	w.End = n.Now()
	n.mu.Lock()
	n.windows = append(n.windows, w)
	n.stalls = append(n.stalls, Stall{Node: srv.ID, Role: role, Start: w.Start, End: w.End, Resumed: -1})
	n.mu.Unlock()
	n.mark("heal %s: thawed the disk of %s", s.Fault, srv.ID)
	return nil
}

// Stalls returns the disk stalls carried out so far.
func (n *Nemesis) Stalls() []Stall {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Stall(nil), n.stalls...)
}

// CheckStalls fills in each stall's Resumed from the history: the first
// write (allocate or release) acknowledged through another node that was
// sent after the freeze and answered before the thaw. A stall of the
// leader's disk must have one within stallResumeBound of the freeze.
func CheckStalls(h checker.History, stalls []Stall) checker.Report {
	rep := checker.Report{Name: "writes resume within the stall timeout + 3 s of a leader's disk stall"}
	for i := range stalls {
		st := &stalls[i]
		for _, op := range h {
			if op.Outcome != checker.OK || op.Node == st.Node || op.Call < st.Start || op.Return > st.End ||
				(op.Kind != checker.KindAllocate && op.Kind != checker.KindRelease) {
				continue
			}
			if d := time.Duration(op.Return - st.Start); st.Resumed < 0 || d < st.Resumed {
				st.Resumed = d
			}
		}
		if st.Role != "leader" {
			continue
		}
		rep.Checked++
		if st.Resumed < 0 || st.Resumed > stallResumeBound {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s; want within %s", st, stallResumeBound))
		}
	}
	rep.OK = len(rep.Problems) == 0
	return rep
}
