package fsm

import (
	"fmt"
	"sort"

	"github.com/rangealloc/rangealloc/allocator"
)

// state is the replicated state. Every change goes through apply, a pure
// function of (state, index, request): no clock, no random source, and no
// map iteration.
type state struct {
	pools    map[string]*pool
	requests *requestTable
	members  map[string]Member
	index    uint64 // the last applied log index
	term     uint64 // the term of that entry
	// clusterID is the cluster's ID: "" until the first leader's
	// set-cluster-id request is applied, then never changed.
	clusterID string
	// network is the service network; services the Service records by
	// "namespace/name".
	network  ServiceNetwork
	services map[string]*ServiceRecord
	// freed is the index of the last entry that freed a value a Service
	// held (a delete, an update giving values up, a forced release): a
	// repair whose fence is older does not allocate missing values, which
	// may be the freed ones of a Service deleted after the caller listed.
	freed uint64
	// featureLevel is the cluster's feature level (feature.go); 0 means
	// none was recorded, which is level 1.
	featureLevel uint64
	// valueBuf and valueEnds are scratch space of count allocations,
	// kept between entries.
	valueBuf  []byte
	valueEnds []int
}

func newState() *state {
	return &state{pools: make(map[string]*pool), requests: newRequestTable(), members: make(map[string]Member),
		services: make(map[string]*ServiceRecord)}
}

// apply applies one request carried by the entry at index and returns its result.
func (s *state) apply(index uint64, r *Request) *Result {
	if len(r.ID) > MaxRequestID {
		return &Result{Index: index, Err: errorf(CodeInvalidArgument, "request ID is %d bytes long; at most %d", len(r.ID), MaxRequestID)}
	}
	var fp uint64
	if r.ID != "" {
		fp = r.Fingerprint()
		if prev := s.requests.get(r.ID); prev != nil {
			if prev.fp == fp {
				res, err := DecodeResult(prev.result)
				if err != nil { // only a bug can get here: the bytes are ours
					return &Result{Index: index, Err: errorf(CodeInvalidArgument, "remembered result of %q: %v", r.ID, err)}
				}
				return res
			}
			return &Result{Index: index, Err: errorf(CodeIdempotencyKeyReused,
				"request ID %q was used before for a different request", r.ID)}
		}
	}
	res := s.execute(index, r)
	res.Index = index
	if r.ID != "" && !r.DryRun {
		enc := EncodeResult(res)
		if len(enc) > maxRememberedResult {
			// A reconcile's findings can outgrow what a snapshot keeps of
			// one result; a retry then gets the result without them.
			trimmed := *res
			trimmed.Findings = nil
			enc = EncodeResult(&trimmed)
		}
		s.requests.put(&requestEntry{id: r.ID, fp: fp, index: index, result: enc})
	}
	return res
}

func (s *state) execute(index uint64, r *Request) *Result {
	switch r.Kind {
	case KindTxn:
		return s.txn(index, r)
	case KindCreatePool:
		return s.createPool(r.Pool, r.Range, false)
	case KindCreatePoolExclusive:
		return s.createPool(r.Pool, r.Range, true)
	case KindDeletePool:
		return s.deletePool(r.Pool)
	case KindSetMember, KindSetMemberNonvoter:
		if err := ValidateMember(r.Member); err != nil {
			return &Result{Err: err}
		}
		m := r.Member
		m.Nonvoter = r.Kind == KindSetMemberNonvoter && m.Nonvoter
		s.members[m.ID] = m
		return &Result{}
	case KindRemoveMember:
		if _, ok := s.members[r.Member.ID]; !ok {
			return &Result{Err: errorf(CodeMemberNotFound, "member %q not found", r.Member.ID)}
		}
		delete(s.members, r.Member.ID)
		return &Result{}
	case KindSetClusterID:
		return s.setClusterID(r.ClusterID)
	case KindSetServiceNetwork:
		return s.setNetwork(r.Network, r.IfUnset)
	case KindPutService:
		return s.putService(index, r)
	case KindDeleteService:
		return s.deleteService(index, r)
	case KindReconcile:
		return s.reconcile(index, r)
	case KindImport:
		return s.importServices(index, r)
	case KindSetFeatureLevel:
		return s.setFeatureLevel(r.FeatureLevel)
	}
	return &Result{Err: errorf(CodeInvalidArgument, "unknown request kind %d", r.Kind)}
}

// createPool creates a pool; exclusive refuses a range that overlaps a
// pool of the same kind.
func (s *state) createPool(name, rng string, exclusive bool) *Result {
	if err := ValidatePoolName(name); err != nil {
		return &Result{Err: err.(*Error)}
	}
	r, err := allocator.ParseRange(rng)
	if err != nil {
		return &Result{Err: errorf(CodeInvalidArgument, "%v", err)}
	}
	if p, ok := s.pools[name]; ok {
		if p.p.Range().String() == r.String() {
			return &Result{}
		}
		return &Result{Err: errorf(CodePoolExists, "pool %q exists with range %s", name, p.p.Range())}
	}
	for _, other := range s.poolNames() { // in name order: the answer names the same pool on every replica
		if o := s.pools[other].p.Range(); exclusive && allocator.Overlaps(r, o) {
			return &Result{Err: &Error{Code: CodePoolOverlap, Op: -1, Owner: other,
				Message: fmt.Sprintf("range %s overlaps pool %q (%s): a value in both would have two owners", r, other, o)}}
		}
	}
	s.pools[name] = &pool{name: name, p: allocator.NewPool(r)}
	return &Result{Created: true}
}

// setClusterID records the cluster's ID unless it has one: every leader
// that finds none proposes one, and the first applied wins. Created tells
// whether this request set it.
func (s *state) setClusterID(id string) *Result {
	if err := ValidateClusterID(id); err != nil {
		return &Result{Err: err}
	}
	if s.clusterID != "" {
		return &Result{}
	}
	s.clusterID = id
	return &Result{Created: true}
}

// ValidateClusterID checks a cluster ID: 1 to 64 bytes of printable ASCII.
func ValidateClusterID(id string) *Error {
	if id == "" || len(id) > MaxClusterID {
		return errorf(CodeInvalidArgument, "cluster ID must be 1 to %d bytes, got %d", MaxClusterID, len(id))
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return errorf(CodeInvalidArgument, "cluster ID %q: want printable ASCII", id)
		}
	}
	return nil
}

// poolNames returns the pool names, sorted.
func (s *state) poolNames() []string {
	names := make([]string, 0, len(s.pools))
	for name := range s.pools {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func (s *state) deletePool(name string) *Result {
	p, ok := s.pools[name]
	if !ok {
		return &Result{Err: errorf(CodePoolNotFound, "pool %q not found", name)}
	}
	if used := p.p.Bitmap().Used(); used > 0 {
		return &Result{Err: errorf(CodePoolNotEmpty, "pool %q holds %d allocations", name, used)}
	}
	delete(s.pools, name)
	return &Result{}
}

// undo reverts one applied operation step.
type undo struct {
	p   *pool
	off int
	rec record // for a release: the record to put back
	rel bool   // true: the step was a release
}

// txn applies the operations in order; at the first failure it reverts the
// steps already taken, so the transaction leaves no trace.
func (s *state) txn(index uint64, r *Request) *Result {
	if len(r.Ops) == 0 || len(r.Ops) > MaxOps {
		return &Result{Err: errorf(CodeInvalidArgument, "a transaction takes 1 to %d operations, got %d", MaxOps, len(r.Ops))}
	}
	steps, singles := 0, 0
	for i := range r.Ops {
		steps += max(r.Ops[i].Count, 1)
		if r.Ops[i].Kind != OpAllocate || r.Ops[i].Value != "" {
			singles++
		}
	}
	undos := make([]undo, 0, min(steps, MaxOps+MaxCount))
	out := make([][]Allocation, len(r.Ops))
	// ones backs the results of the operations that make one allocation
	// each (releases, static allocations): one slice for all of them.
	var ones []Allocation
	if singles > 0 {
		ones = make([]Allocation, 0, singles)
	}
	rnd := r.Seed
	for i := range r.Ops {
		allocs, err := s.op(index, &r.Ops[i], &rnd, &undos, &ones)
		if err != nil {
			revert(undos)
			err.Op = i
			return &Result{Err: err}
		}
		out[i] = allocs
	}
	return &Result{Ops: out}
}

// one appends a to *ones, whose capacity the caller made enough (append
// would only copy it, never changing the results), and returns it as a
// slice of its own.
func one(ones *[]Allocation, a Allocation) []Allocation {
	*ones = append(*ones, a)
	n := len(*ones)
	return (*ones)[n-1 : n : n]
}

func (s *state) op(index uint64, op *Op, rnd *uint64, undos *[]undo, ones *[]Allocation) ([]Allocation, *Error) {
	if err := checkOp(op); err != nil {
		return nil, err
	}
	p, ok := s.pools[op.Pool]
	if !ok {
		return nil, errorf(CodePoolNotFound, "pool %q not found", op.Pool)
	}
	if op.Kind == OpRelease || op.Kind == OpReleaseForce {
		off, err := p.offset(op.Value)
		if err != nil {
			return nil, err
		}
		if !p.p.Bitmap().Has(off) {
			return nil, errorf(CodeNotAllocated, "%s is not allocated in pool %q", op.Value, op.Pool)
		}
		rec := p.recs.get(off)
		if op.Owner != "" && rec.owner != op.Owner {
			return nil, &Error{Code: CodeOwnerMismatch, Op: -1, Owner: rec.owner,
				Message: "value " + op.Value + " is held by another owner"}
		}
		if key := s.ownedByService(rec.owner); key != "" {
			if op.Kind != OpReleaseForce {
				return nil, &Error{Code: CodeOwnedByService, Op: -1, Owner: rec.owner,
					Message: fmt.Sprintf("%s is held by Service %s: delete or change the Service, or release with force", op.Value, key)}
			}
			s.freed = index // not undone with a failed transaction: it only makes repairs more careful
		}
		freed := p.allocationRecord(off, rec, p.formatter().value(off, op.Value))
		p.p.Bitmap().Release(off)
		p.recs.set(off, record{})
		*undos = append(*undos, undo{p: p, off: off, rec: rec, rel: true})
		return one(ones, freed), nil
	}
	if op.Value != "" {
		off, err := p.offset(op.Value)
		if err != nil {
			return nil, err
		}
		if !p.p.Bitmap().Allocate(off) {
			return nil, &Error{Code: CodeAlreadyAllocated, Message: allocator.AllocatedError(p.p.Range().Kind()).Error(),
				Op: -1, Owner: p.recs.get(off).owner}
		}
		p.take(off, op.Owner, true, index)
		*undos = append(*undos, undo{p: p, off: off})
		return one(ones, p.allocationValue(off, p.formatter().value(off, op.Value))), nil
	}
	n := max(op.Count, 1)
	if p.p.Bitmap().Free() < n {
		return nil, errorf(CodeRangeFull, "%s", allocator.ErrFull.Error())
	}
	// The values are formatted into one buffer, then one string that
	// every allocation's value is a part of.
	out := make([]Allocation, n)
	f := p.formatter()
	buf := s.valueBuf[:0]
	ends := s.valueEnds[:0]
	for i := range out {
		off, _ := p.p.Bitmap().AllocateNext(splitmix64(rnd))
		rec := p.take(off, op.Owner, false, index)
		*undos = append(*undos, undo{p: p, off: off})
		out[i] = p.allocationRecord(off, rec, "")
		buf = f.appendValue(buf, off)
		ends = append(ends, len(buf))
	}
	values, start := string(buf), 0
	for i, end := range ends {
		out[i].Value = values[start:end]
		start = end
	}
	s.valueBuf, s.valueEnds = buf, ends
	return out, nil
}

// ValidateMember checks a member-table row.
func ValidateMember(m Member) *Error {
	switch {
	case m.ID == "" || len(m.ID) > MaxMemberID:
		return errorf(CodeInvalidArgument, "member ID must be 1 to %d bytes, got %d", MaxMemberID, len(m.ID))
	case len(m.RaftAddr) > MaxAddressLen || len(m.APIAddr) > MaxAddressLen:
		return errorf(CodeInvalidArgument, "member addresses are at most %d bytes", MaxAddressLen)
	}
	return nil
}

// checkOp validates an operation's fields, independent of state.
func checkOp(op *Op) *Error {
	switch {
	case op.Kind != OpAllocate && op.Kind != OpRelease && op.Kind != OpReleaseForce:
		return errorf(CodeInvalidArgument, "unknown operation kind %d", op.Kind)
	case len(op.Owner) > MaxOwnerLen:
		return errorf(CodeInvalidArgument, "owner is %d bytes long; at most %d", len(op.Owner), MaxOwnerLen)
	case op.Kind != OpAllocate && op.Value == "":
		return errorf(CodeInvalidArgument, "a release names a value")
	case op.Count < 0 || op.Count > MaxCount:
		return errorf(CodeInvalidArgument, "count %d: want 1 to %d", op.Count, MaxCount)
	case op.Count > 1 && (op.Value != "" || op.Kind != OpAllocate):
		return errorf(CodeInvalidArgument, "count is for dynamic allocations only")
	}
	return nil
}

// splitmix64 advances x and returns the next number of the sequence: the
// deterministic source of random starts, seeded from the log entry.
func splitmix64(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
