package fsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/snapshot"
)

// ErrStaleSnapshot refuses a snapshot older than the applied state (see
// Restore).
var ErrStaleSnapshot = errors.New("stale snapshot: older than the applied state")

// FSM is rangealloc's Raft state machine.
type FSM struct {
	logger hclog.Logger
	// onApply, when set, is called with each batch's size and its results
	// after the batch is applied, outside the lock (for metrics).
	onApply func(entries int, results []*Result)
	// onCluster, when set, is called with the cluster ID when the state
	// learns it (from an entry or a snapshot), outside the lock.
	onCluster func(id string)

	mu sync.RWMutex
	// mu guards the following
	s *state
	// applied is closed and replaced whenever the applied index moves.
	applied chan struct{}
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// New returns an empty state machine.
func New(logger hclog.Logger) *FSM {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &FSM{logger: logger, s: newState(), applied: make(chan struct{})}
}

// OnApply registers fn to be called after every applied batch, outside the
// state lock. Call it before the FSM is handed to Raft.
func (f *FSM) OnApply(fn func(entries int, results []*Result)) { f.onApply = fn }

// OnClusterID registers fn to be called, outside the state lock, when the
// state learns the cluster's ID: from the entry that set it, or from a
// snapshot that holds another one than the state had. Call it before the
// FSM is handed to Raft.
func (f *FSM) OnClusterID(fn func(id string)) { f.onCluster = fn }

// ClusterID returns the cluster's ID, "" until one is applied.
func (f *FSM) ClusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.clusterID
}

// Response is what Apply returns for a log entry: one Result per request,
// in the order of the entry.
type Response struct {
	Results []*Result
}

// Apply applies one log entry.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in order, taking the state lock once.
// An entry this version cannot decode stops the node: skipping it would
// let this replica diverge from the others.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	decoded := make([][]*Request, len(logs))
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		reqs, err := DecodeEntry(l.Data)
		if err != nil {
			f.logger.Error("stopping: cannot apply committed log entry", "index", l.Index, "error", err)
			panic(fmt.Sprintf("rangealloc: log entry %d: %v; refusing to diverge from the cluster (upgrade this node)", l.Index, err))
		}
		decoded[i] = reqs
	}
	var all []*Result
	f.mu.Lock()
	cluster := f.s.clusterID
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			resp := &Response{Results: make([]*Result, len(decoded[i]))}
			for j, r := range decoded[i] {
				resp.Results[j] = f.s.apply(l.Index, r)
			}
			out[i] = resp
			if f.onApply != nil {
				all = append(all, resp.Results...)
			}
		}
		f.s.index, f.s.term = l.Index, l.Term
	}
	f.advance()
	learned := f.s.clusterID != cluster
	cluster = f.s.clusterID
	f.mu.Unlock()
	if learned && f.onCluster != nil {
		f.onCluster(cluster)
	}
	if f.onApply != nil {
		f.onApply(len(logs), all)
	}
	return out
}

// advance wakes WaitApplied callers. The caller holds mu.
func (f *FSM) advance() {
	close(f.applied)
	f.applied = make(chan struct{})
}

// WaitApplied blocks until the state machine has applied index, or ctx ends.
func (f *FSM) WaitApplied(ctx context.Context, index uint64) error {
	for {
		f.mu.RLock()
		done, ch := f.s.index >= index, f.applied
		f.mu.RUnlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting to apply index %d: %w", index, ctx.Err())
		}
	}
}

// AppliedIndex returns the index of the last log entry the state machine
// was given: a command or a configuration entry. Raft keeps its no-op and
// barrier entries from state machines, so this can trail Raft's own
// applied index until the next command.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.index
}

// Get returns the allocation holding value in the named pool.
func (f *FSM) Get(poolName, value string) (Allocation, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.s.pools[poolName]
	if !ok {
		return Allocation{}, errorf(CodePoolNotFound, "pool %q not found", poolName)
	}
	off, err := p.offset(value)
	if err != nil {
		return Allocation{}, err
	}
	if !p.p.HasOffset(off) {
		return Allocation{}, errorf(CodeNotAllocated, "%s is not allocated in pool %q", value, poolName)
	}
	return p.allocation(off), nil
}

// List returns up to limit allocations of the named pool in ascending
// order, starting after the value after ("" from the start), held by owner
// ("" for any owner). next is the last value returned when more may follow,
// else "". A limit below 1 is refused (CodeInvalidArgument).
func (f *FSM) List(poolName, owner, after string, limit int) (allocs []Allocation, next string, err error) {
	if limit < 1 {
		return nil, "", errorf(CodeInvalidArgument, "limit is %d; want 1 or more", limit)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.s.pools[poolName]
	if !ok {
		return nil, "", errorf(CodePoolNotFound, "pool %q not found", poolName)
	}
	from := 0
	if after != "" {
		off, err := p.offset(after)
		if err != nil {
			err.Code = CodeInvalidArgument
			err.Message = "after: " + err.Message
			return nil, "", err
		}
		from = off + 1
	}
	allocs = []Allocation{}
	for off := p.p.NextUsed(from); off >= 0; off = p.p.NextUsed(off + 1) {
		if owner != "" && p.recs.get(off).owner != owner {
			continue
		}
		if len(allocs) == limit {
			return allocs, allocs[len(allocs)-1].Value, nil
		}
		allocs = append(allocs, p.allocation(off))
	}
	return allocs, "", nil
}

// Pool returns the status of one pool.
func (f *FSM) Pool(name string) (PoolStatus, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.s.pools[name]
	if !ok {
		return PoolStatus{}, errorf(CodePoolNotFound, "pool %q not found", name)
	}
	return p.status(), nil
}

// Pools returns the status of every pool, sorted by name.
func (f *FSM) Pools() []PoolStatus {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]PoolStatus, 0, len(f.s.pools))
	for _, p := range f.s.pools {
		out = append(out, p.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// RangeAllocation returns a pool's Kubernetes RangeAllocation record: the
// canonical range string and the bitmap bytes.
func (f *FSM) RangeAllocation(name string) (rng string, data []byte, err error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.s.pools[name]
	if !ok {
		return "", nil, errorf(CodePoolNotFound, "pool %q not found", name)
	}
	rng, data = p.p.Snapshot()
	return rng, data, nil
}

// Members returns the member table, sorted by ID.
func (f *FSM) Members() []Member {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Member, 0, len(f.s.members))
	for _, m := range f.s.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Member returns one row of the member table.
func (f *FSM) Member(id string) (Member, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.s.members[id]
	return m, ok
}

// RequestResult returns the remembered result of a request ID, if any.
func (f *FSM) RequestResult(id string) (*Result, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e := f.s.requests.get(id)
	if e == nil {
		return nil, false
	}
	res, err := DecodeResult(e.result)
	return res, err == nil
}

// RequestFingerprint returns the fingerprint remembered for a request ID,
// if any.
func (f *FSM) RequestFingerprint(id string) (uint64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if e := f.s.requests.get(id); e != nil {
		return e.fp, true
	}
	return 0, false
}

// Snapshot captures the state for Raft: a copy made under the lock (the
// bitmaps, the allocation records, the request list); Persist encodes it.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.clone(), nil
}

// Restore replaces the state with a snapshot. The snapshot is decoded and
// validated completely before it is swapped in; on error the running state
// is untouched.
//
// A snapshot older than what the state machine has applied is refused,
// unless it holds a state restored from a backup: a leader sends a
// follower a snapshot only when the follower's log stops before the
// leader's, so an older one is stale. hashicorp/raft sends one when the
// replication to a removed member outlives it, and a node that rejoined at
// the same address would roll back to it and then find the entries after
// it compacted away ("log not found").
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	ss, err := snapshot.Read(rc)
	var s *state
	if err == nil {
		s, err = importState(ss)
	}
	if err != nil {
		f.logger.Error("refusing snapshot", "error", err)
		return err
	}
	f.mu.Lock()
	if applied := f.s.index; !ss.FromBackup && s.index < applied {
		f.mu.Unlock()
		f.logger.Error("refusing a stale snapshot", "snapshot_index", s.index, "applied_index", applied)
		return fmt.Errorf("%w: snapshot at index %d, state machine at %d", ErrStaleSnapshot, s.index, applied)
	}
	learned := s.clusterID != "" && s.clusterID != f.s.clusterID
	f.s = s
	f.advance()
	f.mu.Unlock()
	if learned && f.onCluster != nil {
		f.onCluster(s.clusterID)
	}
	return nil
}
