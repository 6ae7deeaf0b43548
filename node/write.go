package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/fsm"
)

// Allocate takes count dynamic values (value "") or the named value from a
// pool for owner. requestID makes the call safe to retry ("" for one drawn
// by the node). Domain failures are *fsm.Error.
func (n *Node) Allocate(ctx context.Context, pool, value, owner string, count int, requestID string) ([]fsm.Allocation, error) {
	res, err := n.Txn(ctx, []fsm.Op{{Kind: fsm.OpAllocate, Pool: pool, Value: value, Owner: owner, Count: count}}, requestID)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// Release frees a value; with owner set, only if that owner holds it. It
// returns the allocation it freed.
func (n *Node) Release(ctx context.Context, pool, value, owner, requestID string) (fsm.Allocation, error) {
	res, err := n.Txn(ctx, []fsm.Op{{Kind: fsm.OpRelease, Pool: pool, Value: value, Owner: owner}}, requestID)
	if err != nil {
		return fsm.Allocation{}, err
	}
	return res[0][0], nil
}

// Txn applies allocate and release operations all or nothing, and returns
// one list of allocations per operation. On failure the *fsm.Error names
// the failing operation in Op.
func (n *Node) Txn(ctx context.Context, ops []fsm.Op, requestID string) ([][]fsm.Allocation, error) {
	if err := checkRequestID(requestID); err != nil {
		return nil, err
	}
	for i, op := range ops {
		if op.Kind == fsm.OpAllocate && strings.HasPrefix(op.Owner, fsm.ServiceOwnerPrefix) {
			return nil, &fsm.Error{Code: fsm.CodeInvalidArgument, Op: i,
				Message: fmt.Sprintf("owner %q: owners under %q are the Services' own; write the Service instead", op.Owner, fsm.ServiceOwnerPrefix)}
		}
	}
	if err := checkResultSize(n.fsm.FeatureLevel(), ops); err != nil {
		return nil, err
	}
	res, err := n.submit(ctx, &fsm.Request{Kind: fsm.KindTxn, ID: requestID, Ops: ops})
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return res.Allocations(), nil
}

// checkResultSize refuses, at a level below 4, a transaction whose
// answer could encode to more than the 1 MiB a snapshot keeps of a
// remembered result: applied, it would stop every snapshot until its
// result left the request table. From level 4 the state machine refuses
// exactly those whose answer is too large. The bound counts, per value,
// its pool's name, the longest value (an IPv6 address), the owner (any
// owner, for a release) and the record's flags and revision.
func checkResultSize(level int, ops []fsm.Op) error {
	if level >= fsm.LevelBoundedResults {
		return nil
	}
	const longestValue, perValue, limit = 39, 16, fsm.MaxRememberedResult
	size := 32
	for _, op := range ops {
		owner := len(op.Owner)
		if op.Kind != fsm.OpAllocate {
			owner = fsm.MaxOwnerLen
		}
		size += 4 + max(op.Count, 1)*(len(op.Pool)+longestValue+owner+perValue)
	}
	if size > limit {
		return &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: fmt.Sprintf(
			"the answer to this request could be %d bytes, more than the %d a cluster below feature level 4 remembers for a retry: "+
				"allocate fewer values per request, or use shorter owners (or finish the upgrade: rangealloc cluster finalize-upgrade)", size, limit)}
	}
	return nil
}

// CreatePool creates a pool; created is false when an identical pool
// existed. The range's kind (IP or port) follows from its form.
func (n *Node) CreatePool(ctx context.Context, name, rng, requestID string) (st PoolStatus, created bool, err error) {
	res, err := n.submit(ctx, &fsm.Request{Kind: fsm.KindCreatePoolExclusive, ID: requestID, Pool: name, Range: rng})
	if err != nil {
		return PoolStatus{}, false, err
	}
	if res.Err != nil {
		return PoolStatus{}, false, res.Err
	}
	if res.Created {
		// A pool is created empty: the answer follows from the request, so
		// a retry under the same ID answers the same whatever happened to
		// the pool since, and no read can fail after the write applied.
		r, err := allocator.ParseRange(rng)
		if err != nil { // the state machine parsed it: only a bug gets here
			return PoolStatus{}, true, err
		}
		return PoolStatus{Name: name, Range: r}, true, nil
	}
	st, err = n.Pool(ctx, Leader, name)
	return st, false, err
}

// DeletePool deletes an empty pool.
func (n *Node) DeletePool(ctx context.Context, name, requestID string) error {
	res, err := n.submit(ctx, &fsm.Request{Kind: fsm.KindDeletePool, ID: requestID, Pool: name})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	return nil
}

// Backup writes a linearizable copy of the whole state to w, in the
// snapshot format (package snapshot).
func (n *Node) Backup(ctx context.Context, w io.Writer) error {
	return n.BackupAt(ctx, Linearizable, w)
}

// Restore replaces the whole cluster's state with a backup read from r:
// its pools, allocations, owners and request IDs. The cluster's member
// table stays as it is (the backup's belongs to the cluster it was taken
// from). The backup is decoded and checked as it streams, its magic and
// format version first, so that a stream of something else fails after
// its first read; an invalid or unreadable one (ErrInvalidBackup) changes
// nothing. The leader holds the decoded state, not the stream's bytes,
// and writes it to a temp file for Raft (restorer.onLeader); a follower
// forwards a valid backup whole. While this node's disk or the leader's
// is low the restore is refused (fsm.CodeInsufficientStorage).
//
// requestID makes the restore safe to retry, as it does a write ("" for
// one drawn by the node): a restore under an ID the cluster remembers,
// with the same backup bytes, answers success and restores nothing again,
// so the writes acknowledged since the first restore stay. With other
// bytes it fails with fsm.CodeIdempotencyKeyReused. The node's own
// retries carry the same ID. A restore whose outcome is unknown when ctx
// ends returns an *UnknownOutcomeError naming the ID.
func (n *Node) Restore(ctx context.Context, r io.Reader, requestID string) error {
	if err := checkRequestID(requestID); err != nil {
		return err
	}
	if requestID == "" {
		requestID = drawRequestID()
	}
	if e := n.disk.lowError(); e != nil {
		return e
	}
	b, err := fsm.ReadBackup(ctxReader{ctx, r})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBackup, err)
	}
	return n.restoreVia(ctx, b, requestID, b.Fingerprint())
}

// restoreVia restores on this node when it leads, or else forwards the
// backup to the leader, and retries under the same request ID until ctx
// ends, as submit does for a write: once an attempt may have been
// applied, a later refusal or the node closing does not say the restore
// did not happen (UnknownOutcomeError).
func (n *Node) restoreVia(ctx context.Context, b *fsm.Backup, id string, fp uint64) error {
	var args *restoreArgs // the backup as forwarded, written once
	_, err := route(ctx, n, call[struct{}]{
		name: "restore",
		id:   id,
		local: func(context.Context) (struct{}, bool, error) {
			maybe, err := n.restores.onLeader(b, id, fp)
			if err != nil && !maybe && !lostLead(err) && !errors.Is(err, ErrClosed) && !errors.Is(err, raft.ErrRaftShutdown) {
				// This leader failed before raft.Restore (a temp file it
				// cannot write) for a reason other than a lost lead, which
				// a retry through the next leader would mend.
				err = &finalError{err}
			}
			return struct{}{}, maybe, err
		},
		remote: func(ctx context.Context, addr string) (struct{}, bool, error) {
			if args == nil {
				// net/rpc carries arguments whole, so the backup travels
				// to the leader as one []byte: a follower holds a valid
				// backup's bytes in memory while it forwards it. The
				// leader puts its member table in; this node's goes
				// along for a leader that does not.
				var data bytes.Buffer
				if err := b.Write(&data, n.fsm.Members(), n.fsm.ClusterID(), n.fsm.FeatureLevel()); err != nil {
					return struct{}{}, false, &finalError{err}
				}
				args = &restoreArgs{Data: data.Bytes(), ID: id, Fingerprint: fp}
			}
			maybe, err := n.fwd.Restore(ctx, addr, args)
			return struct{}{}, maybe, err
		},
		// A reused key says the ID holds another restore: none of ours was
		// applied. Any other refusal may come from a leader that cannot
		// look the ID up.
		trust: func(_ struct{}, err error) error {
			var fe *fsm.Error
			if err == nil || (errors.As(err, &fe) && fe.Code == fsm.CodeIdempotencyKeyReused) {
				return nil
			}
			return err
		},
	})
	return err
}

// lostLead reports an error of a leader that is losing or handing over
// the lead: a retry through the next leader mends it.
func lostLead(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, ErrNotLeader)
}

// restorer hands a checked backup to Raft on the leader, one restore at
// a time (mu): two under one request ID must not both find it unknown.
type restorer struct {
	mu     sync.Mutex
	raft   *raft.Raft
	fsm    *fsm.FSM
	disk   *diskWatch
	wait   func(raft.Future) error
	dir    string // the data directory, for the restore's temp file
	logger hclog.Logger
}

// onLeader hands a checked backup to Raft, which installs it on
// every node, with the cluster's member table in place of the backup's
// and request id (of fingerprint fp) remembered in it. An id the cluster
// remembers answers as the first restore under it did, restoring nothing;
// otherwise a leader low on disk refuses (fsm.CodeInsufficientStorage).
// The backup goes through a temp file, restore-*.tmp in the data dir,
// removed whatever happens. The log index moves past the backup's own
// index, so revisions stay increasing across the restore. maybe reports
// that the restore may have been applied although err is set: it reached
// raft.Restore.
func (r *restorer) onLeader(b *fsm.Backup, id string, fp uint64) (maybe bool, err error) {
	// One restore at a time, so that two under one ID cannot both find it
	// unknown.
	r.mu.Lock()
	defer r.mu.Unlock()
	// The member table and the request IDs must be the cluster's latest:
	// an empty entry, applied, makes the state machine apply everything
	// committed before it is read. (Not raft.Barrier: a barrier that ends
	// the log leaves every replica's applied index below the commit index,
	// and followers not ready, until the next write; see linearize.) The
	// term read before it names the leadership the lookup holds for: had
	// the term moved by raft.Restore, another leader could have restored
	// under the ID meanwhile.
	term := r.raft.CurrentTerm()
	if err := r.wait(r.raft.Apply(fsm.EncodeBatch(nil), 0)); err != nil {
		return false, fmt.Errorf("restore: %w", err)
	}
	if prev, ok := r.fsm.RequestFingerprint(id); ok {
		if prev != fp {
			return false, &fsm.Error{Code: fsm.CodeIdempotencyKeyReused, Op: -1,
				Message: fmt.Sprintf("request ID %q was used before for a different request", id)}
		}
		r.logger.Info("restore already applied under this request ID; not restoring again", "request_id", id)
		return false, nil
	}
	if e := r.disk.lowError(); e != nil {
		return false, e
	}
	f, err := os.CreateTemp(r.dir, "restore-*.tmp")
	if err != nil {
		return false, fmt.Errorf("restore: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := b.Remember(id, fp).Write(f, r.fsm.Members(), r.fsm.ClusterID(), r.fsm.FeatureLevel()); err != nil {
		return false, fmt.Errorf("restore: %w", err)
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return false, fmt.Errorf("restore: %w", err)
	}
	if now := r.raft.CurrentTerm(); now != term {
		return false, fmt.Errorf("restore: %w: the term moved from %d to %d", raft.ErrLeadershipLost, term, now)
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: b.Index(), Size: size}
	if err := r.raft.Restore(meta, io.NewSectionReader(f, 0, size), time.Minute); err != nil {
		return true, fmt.Errorf("restore: %w", err)
	}
	// The backup's header carries the index of the cluster it came from.
	// An empty entry makes the state machine's applied index this log's
	// again, which linearizable reads wait on.
	if err := r.wait(r.raft.Apply(fsm.EncodeBatch(nil), 0)); err != nil {
		return true, fmt.Errorf("restore: %w", err)
	}
	return false, nil
}

// ctxReader reads from r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
