package node

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// Consistency is how fresh a read must be (SPEC §5.4).
type Consistency int

// Consistency levels.
const (
	// Linearizable reads are served by the leader after an empty command
	// entry, appended once the read began, has committed and been applied
	// (with every entry before it): they see every write acknowledged
	// before the read began.
	Linearizable Consistency = iota
	// Leader reads are served from the leader's state without a quorum
	// check: fresh unless the leader was deposed a moment ago.
	Leader
	// Stale reads are served from this node's state, however far behind.
	Stale
)

// ParseConsistency parses "linearizable" (or ""), "leader" or "stale".
func ParseConsistency(s string) (Consistency, error) {
	switch s {
	case "", "linearizable":
		return Linearizable, nil
	case "leader":
		return Leader, nil
	case "stale":
		return Stale, nil
	}
	return 0, &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1,
		Message: fmt.Sprintf("consistency %q: want linearizable, leader or stale", s)}
}

func (c Consistency) String() string {
	return [...]string{"linearizable", "leader", "stale"}[c]
}

// PoolStatus describes a pool and its use.
type PoolStatus = fsm.PoolStatus

type (
	readArgs  = wire.ReadArgs
	readReply = wire.ReadReply
	poolWire  = wire.Pool
)

// read serves a read at the requested consistency, here or on the leader.
func (n *Node) read(ctx context.Context, args *readArgs) (*readReply, error) {
	if Consistency(args.Consistency) == Stale {
		served(ctx, n.id)
		return readState(n.fsm, args), nil
	}
	return route(ctx, n, call[*readReply]{
		local: func(ctx context.Context) (*readReply, bool, error) {
			r, err := n.readOnLeader(ctx, args)
			return r, false, err
		},
		remote: func(ctx context.Context, addr string) (*readReply, bool, error) {
			r, err := n.fwd.Read(ctx, addr, args)
			return r, false, refusedForwarding(err)
		},
	})
}

// readOnLeader serves a forwarded or local read on this node, which must be
// the leader.
func (n *Node) readOnLeader(ctx context.Context, args *readArgs) (*readReply, error) {
	if !n.IsLeader() {
		return nil, ErrNotLeader
	}
	if Consistency(args.Consistency) == Linearizable {
		if err := n.linearize(ctx); err != nil {
			return nil, err
		}
	}
	return readState(n.fsm, args), nil
}

// linearize makes a following local read linearizable: an empty command
// entry, appended after the read began, must commit and be applied, and
// the state machine applies entries in order. A leader that has not yet
// applied an entry of its own term refuses, as its commit index may lag
// the cluster's.
//
// Why not raft.VerifyLeader: it counts any successful AppendEntries
// response as a vote, including one to a request sent before the read
// began. A leader paused (or cut off) right after sending a batch finds
// the followers' old acknowledgements waiting in its sockets when it
// resumes, though they have elected another leader meanwhile, and they
// confirmed its leadership: it served a stale read (the Jepsen-style
// suite's pause-leader fault, seed 3). An entry appended after the read
// began can only commit on acknowledgements of that entry, which a
// deposed leader never gets. Concurrent reads share Raft's batched
// appends, so a burst of reads costs about one replication round.
//
// Why not raft.Barrier, which would do the same: Raft keeps barrier
// entries from the state machine, so a barrier that ends the log leaves
// every state machine's applied index below the commit index until the
// next write, and followers report catching_up meanwhile (see leaderLoop).
func (n *Node) linearize(ctx context.Context) error {
	if !n.leader.ready.Load() {
		return fmt.Errorf("%w: leader has not applied an entry of its term yet", ErrNotLeader)
	}
	// The future has no deadline of its own: a leader cut off from the
	// majority answers it only when it steps down. The caller's deadline
	// comes first. (A request still queued when Raft shuts down is never
	// answered: its goroutine then stays until the process ends.)
	committed := make(chan error, 1)
	go func() { committed <- n.raft.Apply(fsm.EncodeBatch(nil), 0).Error() }()
	select {
	case err := <-committed:
		if err != nil {
			return fmt.Errorf("%w: leadership not confirmed: %v", ErrNotLeader, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: leadership not confirmed: %v", ErrNotLeader, ctx.Err())
	}
}

// readState serves a read from a state machine: this node's.
func readState(f *fsm.FSM, args *readArgs) *readReply {
	r := &readReply{}
	var err error
	switch args.Op {
	case wire.ReadGet:
		r.Alloc, err = f.Get(args.Pool, args.Value)
	case wire.ReadList:
		r.Allocs, r.Next, err = f.List(args.Pool, args.Owner, args.After, args.Limit)
	case wire.ReadPool:
		var st fsm.PoolStatus
		if st, err = f.Pool(args.Pool); err == nil {
			r.Pools = []poolWire{toWire(st)}
		}
	case wire.ReadPools:
		for _, st := range f.Pools() {
			r.Pools = append(r.Pools, toWire(st))
		}
	case wire.ReadRangeAllocation:
		r.Range, r.Data, err = f.RangeAllocation(args.Pool)
	case wire.ReadBackup:
		var buf bytesBuffer
		if werr := f.WriteBackup(&buf); werr != nil {
			err = &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: werr.Error()}
		}
		r.Data = buf.b
	case wire.ReadService:
		var rec fsm.ServiceRecord
		if rec, err = f.Service(args.Namespace, args.Name); err == nil {
			r.Services = []fsm.ServiceRecord{rec}
		}
	case wire.ReadServices:
		r.Services, r.Index = f.Services(args.Namespace)
	case wire.ReadServiceNetwork:
		r.Network = f.ServiceNetwork()
	case wire.ReadReconcile:
		r.Findings, r.Index, err = f.Reconcile(args.Fence, args.Services)
	default:
		err = &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: "unknown read " + string(args.Op)}
	}
	if err != nil {
		var fe *fsm.Error
		if !errors.As(err, &fe) {
			fe = &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: err.Error()}
		}
		r.Err = fe
	}
	return r
}

type bytesBuffer struct{ b []byte }

func (w *bytesBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

func toWire(st fsm.PoolStatus) poolWire {
	return poolWire{Name: st.Name, Range: st.Range.String(), Used: st.Used, UsedStatic: st.UsedStatic, UsedDynamic: st.UsedDynamic}
}

func fromWire(w poolWire) (fsm.PoolStatus, error) {
	r, err := allocator.ParseRange(w.Range)
	if err != nil {
		return fsm.PoolStatus{}, err
	}
	return fsm.PoolStatus{Name: w.Name, Range: r, Used: w.Used, UsedStatic: w.UsedStatic, UsedDynamic: w.UsedDynamic}, nil
}

func replyErr(r *readReply) error {
	if r.Err != nil {
		return r.Err
	}
	return nil
}

// Get returns the allocation holding value in a pool.
func (n *Node) Get(ctx context.Context, c Consistency, pool, value string) (fsm.Allocation, error) {
	r, err := n.read(ctx, &readArgs{Op: wire.ReadGet, Pool: pool, Value: value, Consistency: int(c)})
	if err != nil {
		return fsm.Allocation{}, err
	}
	return r.Alloc, replyErr(r)
}

// List returns up to limit allocations of a pool in ascending order after
// the value after, held by owner ("" for any); next is "" on the last page.
func (n *Node) List(ctx context.Context, c Consistency, pool, owner, after string, limit int) (allocs []fsm.Allocation, next string, err error) {
	r, err := n.read(ctx, &readArgs{Op: wire.ReadList, Pool: pool, Owner: owner, After: after, Limit: limit, Consistency: int(c)})
	if err != nil {
		return nil, "", err
	}
	return r.Allocs, r.Next, replyErr(r)
}

// Pool returns the status of a pool.
func (n *Node) Pool(ctx context.Context, c Consistency, name string) (PoolStatus, error) {
	r, err := n.read(ctx, &readArgs{Op: wire.ReadPool, Pool: name, Consistency: int(c)})
	if err != nil {
		return PoolStatus{}, err
	}
	if err := replyErr(r); err != nil {
		return PoolStatus{}, err
	}
	return fromWire(r.Pools[0])
}

// Pools returns the status of every pool, sorted by name.
func (n *Node) Pools(ctx context.Context, c Consistency) ([]PoolStatus, error) {
	r, err := n.read(ctx, &readArgs{Op: wire.ReadPools, Consistency: int(c)})
	if err != nil {
		return nil, err
	}
	out := make([]PoolStatus, 0, len(r.Pools))
	for _, w := range r.Pools {
		st, err := fromWire(w)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// RangeAllocation returns a pool's Kubernetes RangeAllocation record.
func (n *Node) RangeAllocation(ctx context.Context, c Consistency, pool string) (rng string, data []byte, err error) {
	r, err := n.read(ctx, &readArgs{Op: wire.ReadRangeAllocation, Pool: pool, Consistency: int(c)})
	if err != nil {
		return "", nil, err
	}
	return r.Range, r.Data, replyErr(r)
}

// BackupAt writes a copy of the whole state to w, in the snapshot format
// (package snapshot), at consistency c. A Stale one is this node's own
// applied state and needs no leader: the way to save what a survivor holds
// when the cluster has lost its quorum.
func (n *Node) BackupAt(ctx context.Context, c Consistency, w io.Writer) error {
	r, err := n.read(ctx, &readArgs{Op: wire.ReadBackup, Consistency: int(c)})
	if err != nil {
		return err
	}
	if err := replyErr(r); err != nil {
		return err
	}
	_, err = w.Write(r.Data)
	return err
}

// LocalState gives direct, read-only access to this node's state machine,
// for tests and diagnostics: what it returns may be stale.
func (n *Node) LocalState() *fsm.FSM { return n.fsm }

// AppliedIndex returns the index of the last log entry this node's state
// machine applied: what a stale read reflects.
func (n *Node) AppliedIndex() uint64 { return n.fsm.AppliedIndex() }
