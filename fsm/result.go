package fsm

import "fmt"

// Code names a domain failure; the HTTP layer maps each to a status (SPEC §5.6).
type Code string

// Failure codes a Result can carry.
const (
	CodeInvalidArgument      Code = "InvalidArgument"
	CodePoolNotFound         Code = "PoolNotFound"
	CodePoolExists           Code = "PoolExists"
	CodePoolNotEmpty         Code = "PoolNotEmpty"
	CodeNotAllocated         Code = "NotAllocated"
	CodeAlreadyAllocated     Code = "AlreadyAllocated"
	CodeRangeFull            Code = "RangeFull"
	CodeNotInRange           Code = "NotInRange"
	CodeOwnerMismatch        Code = "OwnerMismatch"
	CodeIdempotencyKeyReused Code = "IdempotencyKeyReused"
	CodeMemberNotFound       Code = "MemberNotFound"
	// CodePoolOverlap: a new pool shares values with a pool of the same
	// kind (IPv4, IPv6, port).
	CodePoolOverlap Code = "PoolOverlap"
	// CodeNodeNotEmpty: a node asked to join holds state of another cluster.
	CodeNodeNotEmpty Code = "NodeNotEmpty"
	// CodeLastVoter: the change would leave the cluster without a voter,
	// or there is no other voter to hand leadership to.
	CodeLastVoter Code = "LastVoter"
	// CodeMemberDataLost: a node asked to join has no state, but its ID is
	// a voter of the cluster, which may have counted on its votes and log.
	CodeMemberDataLost Code = "MemberDataLost"
	// CodePermissionDenied: the caller may not do this. On the forwarding
	// RPC: a node whose certificate names no member of the configuration
	// asked for more than a probe or a join of itself.
	CodePermissionDenied Code = "PermissionDenied"
	// CodeInvalid: a Service write Kubernetes would reject (422), with the
	// field in Error.Field and Kubernetes' message.
	CodeInvalid Code = "Invalid"
	// CodeServiceNotFound: no Service has that namespace and name.
	CodeServiceNotFound Code = "ServiceNotFound"
	// CodeOwnedByService: a plain release of a value a Service holds.
	CodeOwnedByService Code = "OwnedByService"
	// CodeVersionMismatch: a member's release cannot take part in what was
	// asked: it does not support the feature level (a raise, a join), or
	// it speaks a newer protocol than the leader.
	CodeVersionMismatch Code = "VersionMismatch"
	// CodeInsufficientStorage: the node that received a client write, or
	// the leader, has less free disk than its floor (--min-free-disk), so
	// the write was refused before it reached the log. Nothing was
	// applied; decided by a node, never by the state machine.
	CodeInsufficientStorage Code = "InsufficientStorage"
)

// Error is a domain failure decided by the state machine: a definite
// answer, the same on every replica. Op is the index of the failing
// operation of a transaction (-1 when not about one operation); Owner is the
// current holder of what was asked for: the value's owner for
// AlreadyAllocated and OwnerMismatch, the overlapping pool for PoolOverlap.
type Error struct {
	Code    Code
	Message string
	Op      int
	Owner   string
	// Field is the field path of a CodeInvalid (or RangeFull) error of a
	// Service write: "spec.ports[1].nodePort".
	Field string
	// Node describes the node a join refused (NodeNotEmpty); nil
	// otherwise. Never part of a remembered result.
	Node *NodeDetails
}

// NodeDetails are what a join refusal says of the newcomer.
type NodeDetails struct {
	ClusterID string
	LastIndex uint64
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Is matches an *Error with the same Code, so callers can write
// errors.Is(err, &fsm.Error{Code: fsm.CodeRangeFull}).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Op: -1}
}

// Allocation is a value held in a pool.
type Allocation struct {
	Pool     string
	Value    string
	Owner    string
	Static   bool   // mode: the caller named the value
	InStatic bool   // band: the value lies in the static band
	Revision uint64 // the log index that made the allocation
}

// Result is the answer to one Request, remembered under its ID.
type Result struct {
	Err *Error // nil on success
	// A transaction's operations, as the state machine applied them
	// (done), or as a remembered or forwarded result decoded them (ops):
	// Allocations gives them.
	done []opDone
	ops  [][]Allocation
	// Created is true when a create-pool request made a new pool (false
	// when an identical pool existed).
	Created bool
	// Index is the log index of the entry that carried the request.
	Index uint64
	// Service is the Service a put or delete wrote, removed, or (dry run)
	// would have.
	Service *ServiceRecord
	// Findings are what a reconcile found.
	Findings []Finding
	// Imported and Count are the Services and values an import created.
	Imported int
	Count    int
}

// Allocations returns, for a transaction, one list per operation: the
// values allocated, or the allocation a release freed. A result the state
// machine just made builds the lists on each call: call it once per
// answer.
func (r *Result) Allocations() [][]Allocation {
	if r.done == nil {
		return r.ops
	}
	out := make([][]Allocation, len(r.done))
	// The operations that make one allocation each (releases, named
	// values) share one array.
	var ones []Allocation
	for i := range r.done {
		d := &r.done[i]
		if d.offs != nil {
			out[i] = d.dynamic()
			continue
		}
		if ones == nil {
			ones = make([]Allocation, 0, len(r.done)-i)
		}
		ones = append(ones, d.single())
		out[i] = ones[len(ones)-1 : len(ones) : len(ones)]
	}
	return out
}

func encodeResult(e *encoder, r *Result) {
	e.uvarint(r.Index)
	e.bool(r.Created)
	if r.Err != nil {
		e.u8(1)
		e.str(string(r.Err.Code))
		e.str(r.Err.Message)
		e.uvarint(uint64(r.Err.Op + 1))
		e.str(r.Err.Owner)
	} else {
		e.u8(0)
	}
	if r.done != nil {
		e.uvarint(uint64(len(r.done)))
		for i := range r.done {
			r.done[i].encode(e)
		}
	} else {
		e.uvarint(uint64(len(r.ops)))
		for _, op := range r.ops {
			e.uvarint(uint64(len(op)))
			for _, a := range op {
				e.str(a.Pool)
				e.str(a.Value)
				e.str(a.Owner)
				e.bool(a.Static)
				e.bool(a.InStatic)
				e.uvarint(a.Revision)
			}
		}
	}
	// The extension: results written before Services existed end here.
	if (r.Err == nil || r.Err.Field == "") && r.Service == nil && len(r.Findings) == 0 && r.Imported == 0 && r.Count == 0 {
		return
	}
	e.u8(extensionServices)
	if r.Err != nil {
		e.str(r.Err.Field)
	} else {
		e.str("")
	}
	if r.Service != nil {
		e.u8(1)
		encodeSpec(e, &r.Service.Spec)
		e.uvarint(r.Service.Revision)
	} else {
		e.u8(0)
	}
	e.uvarint(uint64(len(r.Findings)))
	for _, f := range r.Findings {
		e.str(f.Type)
		e.str(f.Pool)
		e.str(f.Value)
		e.str(f.Service)
		e.str(f.Owner)
		e.str(f.Reason)
		e.str(f.Message)
		e.bool(f.Repaired)
	}
	e.uvarint(uint64(r.Imported))
	e.uvarint(uint64(r.Count))
}

// extensionServices marks the part of an encoded result that Services
// added.
const extensionServices = 'S'

// EncodeResult returns the binary form of r, as stored in snapshots.
func EncodeResult(r *Result) []byte {
	size := 32
	for i := range r.done {
		size += r.done[i].size()
	}
	for _, op := range r.ops {
		for _, a := range op {
			size += len(a.Pool) + len(a.Value) + len(a.Owner) + 8
		}
	}
	e := encoder{b: make([]byte, 0, size)}
	encodeResult(&e, r)
	return e.b
}

// DecodeResult reverses EncodeResult.
func DecodeResult(b []byte) (*Result, error) { return decodeResult(b, false) }

// validResult reports whether b decodes, without building the strings.
func validResult(b []byte) error {
	_, err := decodeResult(b, true)
	return err
}

func decodeResult(b []byte, check bool) (*Result, error) {
	d := decoder{b: b, check: check}
	r := &Result{Index: d.uvarint(), Created: d.bool()}
	if d.u8() == 1 {
		r.Err = &Error{Code: Code(d.str(maxField)), Message: d.str(maxField), Op: int(d.uvarint()) - 1, Owner: d.str(maxField)}
	}
	nops := d.count(MaxOps, 1)
	r.ops = make([][]Allocation, nops)
	for i := range r.ops {
		n := d.count(MaxCount, 6)
		r.ops[i] = make([]Allocation, n)
		for j := range r.ops[i] {
			r.ops[i][j] = Allocation{Pool: d.str(maxField), Value: d.str(maxField), Owner: d.str(maxField),
				Static: d.bool(), InStatic: d.bool(), Revision: d.uvarint()}
		}
	}
	if d.err == nil && len(d.b) > 0 {
		if d.u8() != extensionServices {
			d.fail("unknown result extension")
		}
		if field := d.str(maxField); r.Err != nil {
			r.Err.Field = field
		}
		if d.bool() {
			r.Service = &ServiceRecord{Spec: decodeSpec(&d), Revision: d.uvarint()}
		}
		if n := d.count(maxEntryServices*4, 8); n > 0 {
			r.Findings = make([]Finding, n)
			for i := range r.Findings {
				r.Findings[i] = Finding{Type: d.str(maxField), Pool: d.str(maxField), Value: d.str(maxField), Service: d.str(maxField),
					Owner: d.str(maxField), Reason: d.str(maxField), Message: d.str(maxField), Repaired: d.bool()}
			}
		}
		r.Imported, r.Count = int(d.uvarint()), int(d.uvarint())
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	if nops == 0 {
		r.ops = nil
	}
	return r, nil
}
