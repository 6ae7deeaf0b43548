package fsm

import (
	"encoding/binary"
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
	// none was recorded, which is level 1. rules are its rules (rules.go),
	// resolved whenever it is set (setLevel).
	featureLevel uint64
	rules        rules
	// scratch is the fingerprints' encoding space, kept between requests.
	scratch []byte
}

func newState() *state {
	return &state{pools: make(map[string]*pool), requests: newRequestTable(), members: make(map[string]Member),
		services: make(map[string]*ServiceRecord), rules: rulesFor(1)}
}

// apply applies one request carried by the entry at index and returns its result.
func (s *state) apply(index uint64, r *Request) *Result {
	if len(r.ID) > MaxRequestID {
		return &Result{Index: index, Err: errorf(CodeInvalidArgument, "request ID is %d bytes long; at most %d", len(r.ID), MaxRequestID)}
	}
	var fp uint64
	if r.ID != "" {
		fp = r.fingerprint(&s.scratch)
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
		if len(enc) > MaxRememberedResult && r.Kind == KindTxn && res.Err == nil && s.rules.boundedResults {
			// A snapshot keeps results of up to 1 MiB, and a retry must get
			// the whole first answer: a transaction whose answer is larger
			// (4,096 values with long owners) is undone and refused. Below
			// level 4 proposers refuse what could reach the bound instead
			// (node.checkResultSize).
			revertOps(res.done)
			res = &Result{Index: index, Err: errorf(CodeInvalidArgument,
				"the answer to this request is %d bytes, more than the %d a cluster remembers for a retry: allocate fewer values per request, or use shorter owners",
				len(enc), MaxRememberedResult)}
			enc = EncodeResult(res)
		}
		if len(enc) > MaxRememberedResult {
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
		// A member kept a non-voter needs snapshot format 4 (level 2), or
		// no snapshot could be written. Leaders propose the kind only at
		// level 2 and levels never fall, so no log holds one below it:
		// this refusal changes no replica's state, it keeps the state
		// machine from ever holding what it cannot snapshot.
		if r.Kind == KindSetMemberNonvoter && !s.rules.nonvoterMembers {
			return &Result{Err: errorf(CodeInvalidArgument, "a member kept a non-voter needs feature level %d; the cluster is at %d",
				KindLevel(KindSetMemberNonvoter), s.level())}
		}
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
	case KindPutServiceV2:
		// Leaders propose it only from its level, and levels never fall,
		// so no log holds one below it; this refusal keeps a replica from
		// applying what a node of the previous release could not.
		if !s.rules.putServiceV2 {
			return &Result{Err: errorf(CodeInvalidArgument, "%s needs feature level %d; the cluster is at %d",
				KindPutServiceV2, KindLevel(KindPutServiceV2), s.level())}
		}
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
	if used := p.p.Used(); used > 0 {
		return &Result{Err: errorf(CodePoolNotEmpty, "pool %q holds %d allocations", name, used)}
	}
	if what := s.network.names(name); what != "" && s.rules.networkPoolsKept {
		return &Result{Err: errorf(CodePoolNotEmpty, "pool %q is the service network's %s pool: point the network at another pool first (PUT /v1/service-network)", name, what)}
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
// operations already applied, so the transaction leaves no trace.
func (s *state) txn(index uint64, r *Request) *Result {
	if len(r.Ops) == 0 || len(r.Ops) > MaxOps {
		return &Result{Err: errorf(CodeInvalidArgument, "a transaction takes 1 to %d operations, got %d", MaxOps, len(r.Ops))}
	}
	done := make([]opDone, len(r.Ops))
	rnd := r.Seed
	for i := range r.Ops {
		if err := s.op(index, &r.Ops[i], &rnd, &done[i]); err != nil {
			revertOps(done[:i])
			err.Op = i
			return &Result{Err: err}
		}
	}
	return &Result{done: done}
}

// opDone is one operation of a transaction as the state machine applied
// it, in compact form: enough to revert it, to encode its result
// (EncodeResult), and to build its allocations for a caller
// (Result.Allocations). Every replica applies every transaction, and only
// the leader answers callers: structs per value are made only for an
// answer.
//
// Only the pool's name, range and value formatter are read after the
// apply, from other goroutines; none of them changes once the pool
// exists (op makes the formatter before the result leaves the state
// machine).
type opDone struct {
	p *pool
	// rec is the record the operation made (allocations) or freed
	// (releases).
	rec record
	rel bool // a release
	// off is the offset of a release or of a named value, value the
	// value as the operation named it.
	off   int
	value string
	// offs are the offsets of a dynamic allocation, in allocation order;
	// nil for any other operation.
	offs []int
}

// revertOps undoes applied operations, newest first.
func revertOps(done []opDone) {
	for i := len(done) - 1; i >= 0; i-- {
		d := &done[i]
		switch {
		case d.rel:
			d.p.putBack(d.off, d.rec)
		case d.offs != nil:
			for j := len(d.offs) - 1; j >= 0; j-- {
				d.p.free(d.offs[j])
			}
		default:
			d.p.free(d.off)
		}
	}
}

// op applies one operation of a transaction and records it in *done. On
// an error it has changed nothing.
func (s *state) op(index uint64, op *Op, rnd *uint64, done *opDone) *Error {
	if err := checkOp(op); err != nil {
		return err
	}
	p, ok := s.pools[op.Pool]
	if !ok {
		return errorf(CodePoolNotFound, "pool %q not found", op.Pool)
	}
	p.formatter() // made here, on the state machine's goroutine, for the readers of the result
	if op.Kind == OpRelease || op.Kind == OpReleaseForce {
		off, err := p.offset(op.Value)
		if err != nil {
			return err
		}
		if !p.p.HasOffset(off) {
			return errorf(CodeNotAllocated, "%s is not allocated in pool %q", op.Value, op.Pool)
		}
		rec := p.recs.get(off)
		if op.Owner != "" && rec.owner != op.Owner {
			return &Error{Code: CodeOwnerMismatch, Op: -1, Owner: rec.owner,
				Message: "value " + op.Value + " is held by another owner"}
		}
		if key := s.ownedByService(rec.owner); key != "" {
			if op.Kind != OpReleaseForce {
				return &Error{Code: CodeOwnedByService, Op: -1, Owner: rec.owner,
					Message: fmt.Sprintf("%s is held by Service %s: delete or change the Service, or release with force", op.Value, key)}
			}
			s.freed = index // not undone with a failed transaction: it only makes repairs more careful
		}
		p.free(off)
		*done = opDone{p: p, rec: rec, rel: true, off: off, value: op.Value}
		return nil
	}
	if op.Value != "" {
		off, err := p.offset(op.Value)
		if err != nil {
			return err
		}
		if err := p.allocate(off); err != nil {
			return err
		}
		*done = opDone{p: p, rec: p.take(off, op.Owner, true, index), off: off, value: op.Value}
		return nil
	}
	offs, err := p.p.AllocateNextN(max(op.Count, 1), func() uint64 { return splitmix64(rnd) })
	if err != nil {
		return allocError(err)
	}
	var rec record
	for _, off := range offs {
		rec = p.take(off, op.Owner, false, index)
	}
	*done = opDone{p: p, rec: rec, offs: offs}
	return nil
}

// size estimates the length of the operation's encoded result, to size
// the encoder's buffer once.
func (d *opDone) size() int {
	n := max(len(d.offs), 1)
	return binary.MaxVarintLen64 + n*(len(d.p.name)+len(d.rec.owner)+d.p.vf.maxLen()+2*binary.MaxVarintLen64)
}

// encode writes the operation's result as encodeResult writes a list of
// allocations.
func (d *opDone) encode(e *encoder) {
	f, name, statics := d.p.vf, d.p.name, d.p.p.Range().StaticSize()
	if d.offs == nil {
		e.uvarint(1)
		d.encodeOne(e, f, name, d.off, statics)
		return
	}
	e.uvarint(uint64(len(d.offs)))
	for _, off := range d.offs {
		d.encodeOne(e, f, name, off, statics)
	}
}

// encodeOne writes the allocation at off. A release or named value's
// value is written as the formatter writes it: the value Allocations
// gives is that one too (valueFormatter.value).
func (d *opDone) encodeOne(e *encoder, f *valueFormatter, name string, off, statics int) {
	e.str(name)
	e.value(f, off)
	e.str(d.rec.owner)
	e.bool(d.rec.static())
	e.bool(off < statics)
	e.uvarint(d.rec.revision())
}

// single builds the allocation of a release or of a named value.
func (d *opDone) single() Allocation {
	return d.p.allocationRecord(d.off, d.rec, d.p.vf.value(d.off, d.value))
}

// dynamic builds the allocations of a dynamic allocation. The values are
// formatted into one buffer, then one string that every allocation's
// value is a part of.
func (d *opDone) dynamic() []Allocation {
	p := d.p
	out := make([]Allocation, len(d.offs))
	buf := make([]byte, 0, len(d.offs)*p.vf.maxLen())
	ends := make([]int, len(d.offs))
	for i, off := range d.offs {
		buf = p.vf.appendValue(buf, off)
		ends[i] = len(buf)
	}
	values, start := string(buf), 0
	for i, off := range d.offs {
		out[i] = p.allocationRecord(off, d.rec, values[start:ends[i]])
		start = ends[i]
	}
	return out
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
