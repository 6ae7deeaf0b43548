package fsm

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/rangealloc/rangealloc/internal/limits"
	"github.com/rangealloc/rangealloc/service"
)

// EntryType is the first byte of every log entry rangealloc writes. Types
// are append-only: a number, once used, keeps its meaning forever.
type EntryType byte

// Entry types.
const (
	// EntryBatch is a batch of independent requests packed into one entry by
	// the leader's group commit; each request succeeds or fails on its own.
	EntryBatch EntryType = 1
)

// Kind names what a Request does. Kinds are append-only like EntryType.
type Kind byte

// Request kinds.
const (
	KindTxn          Kind = 1 // allocate/release operations, all or nothing
	KindCreatePool   Kind = 2
	KindDeletePool   Kind = 3
	KindSetMember    Kind = 4
	KindRemoveMember Kind = 5
	// KindSetClusterID records the cluster's ID; only the first one
	// applied counts (see state.setClusterID).
	KindSetClusterID Kind = 6
	// KindCreatePoolExclusive creates a pool unless its range overlaps a
	// pool of the same kind (PoolOverlap). Proposers use it;
	// KindCreatePool keeps applying as it always did, without that check,
	// so a log written before the rule existed replays the same.
	KindCreatePoolExclusive Kind = 7
	// KindSetServiceNetwork sets the service network (IfUnset: only when
	// none is set).
	KindSetServiceNetwork Kind = 8
	// KindPutService creates or updates a Service and its values in one
	// step (DryRun: answers and changes nothing).
	KindPutService Kind = 9
	// KindDeleteService deletes a Service and releases its values.
	KindDeleteService Kind = 10
	// KindReconcile compares listed Services with the pools and repairs
	// what the fence allows (see reconcile.go).
	KindReconcile Kind = 11
	// KindImport creates Service records with their named values, and
	// holds values no Service names for the owner "import", all or
	// nothing.
	KindImport Kind = 12
	// KindSetFeatureLevel raises the cluster's feature level (feature.go).
	KindSetFeatureLevel Kind = 13
	// KindSetMemberNonvoter writes a member row like KindSetMember, and
	// with it whether the member stays a non-voter (Member.Nonvoter).
	KindSetMemberNonvoter Kind = 14
	// KindPutServiceV2 is KindPutService whose Service also carries the
	// singular clusterIP its caller gave (service.Spec.ClusterIP), which
	// the state machine folds into clusterIPs against the stored Service,
	// as kube-apiserver does. Proposers fold it themselves, into a
	// KindPutService, below its feature level.
	KindPutServiceV2 Kind = 15
)

func (k Kind) String() string {
	switch k {
	case KindTxn:
		return "txn"
	case KindCreatePool:
		return "create-pool"
	case KindDeletePool:
		return "delete-pool"
	case KindSetMember:
		return "set-member"
	case KindRemoveMember:
		return "remove-member"
	case KindSetClusterID:
		return "set-cluster-id"
	case KindCreatePoolExclusive:
		return "create-pool-exclusive"
	case KindSetServiceNetwork:
		return "set-service-network"
	case KindPutService:
		return "put-service"
	case KindDeleteService:
		return "delete-service"
	case KindReconcile:
		return "reconcile"
	case KindImport:
		return "import"
	case KindSetFeatureLevel:
		return "set-feature-level"
	case KindSetMemberNonvoter:
		return "set-member-nonvoter"
	case KindPutServiceV2:
		return "put-service-v2"
	}
	return fmt.Sprintf("Kind(%d)", byte(k))
}

// OpKind is an operation inside a transaction.
type OpKind byte

// Operation kinds.
const (
	OpAllocate OpKind = 1
	OpRelease  OpKind = 2
	// OpReleaseForce is a release that frees a value even when a Service
	// holds it (OwnedByService otherwise).
	OpReleaseForce OpKind = 3
)

// Limits every request is checked against, by the proposer and again in
// Apply. Package limits defines each, once; these are its names for fsm's
// callers.
const (
	MaxOps        = limits.MaxOps   // operations in one transaction
	MaxCount      = limits.MaxCount // values in one count allocation
	MaxOwnerLen   = limits.MaxOwnerLen
	MaxRequestID  = limits.MaxRequestID
	MaxPoolName   = limits.MaxPoolName
	MaxValueLen   = limits.MaxValueLen
	MaxRangeLen   = limits.MaxRangeLen
	MaxMemberID   = limits.MaxMemberID
	MaxAddressLen = limits.MaxAddressLen
	MaxClusterID  = limits.MaxClusterID
	maxRequests   = 1 << 16 // requests in one batch entry
	// maxField bounds any string the decoder reads. It only keeps a corrupt
	// length from allocating; the limits above are checked by Apply, which
	// answers InvalidArgument, so that a request that slipped past a
	// proposer's checks fails alone instead of stopping every replica.
	maxField = 1 << 16
)

// Op is one allocate or release inside a transaction.
type Op struct {
	Kind OpKind
	Pool string
	// Value names the value; "" on an allocate asks for dynamic values.
	Value string
	// Owner is the owner recorded by an allocate, or the precondition of a
	// release ("" frees whoever holds the value).
	Owner string
	// Count is the number of dynamic values an allocate takes (0 means 1).
	Count int
}

// Request is one client write. ID makes retries safe: a request whose ID
// the state machine remembers returns the remembered Result instead of
// applying again. Seed is the random start of dynamic allocations, drawn by
// the proposer so that Apply stays a pure function of state and entry.
type Request struct {
	Kind Kind
	ID   string
	Seed uint64

	Ops []Op // KindTxn

	Pool  string // KindCreatePool(Exclusive), KindDeletePool
	Range string // KindCreatePool(Exclusive)

	Member Member // KindSetMember; KindRemoveMember uses Member.ID

	ClusterID string // KindSetClusterID: drawn by the proposer

	// Service is the Service of KindPutService; KindDeleteService uses its
	// Namespace and Name.
	Service *service.Spec
	// DryRun makes KindPutService and KindDeleteService answer what they
	// would do and change nothing.
	DryRun bool
	// Network is the service network of KindSetServiceNetwork; IfUnset
	// sets it only when none is set.
	Network ServiceNetwork
	IfUnset bool

	// Services are the listed Services of KindReconcile (Fence, Repair
	// as in ReconcileRequest) and the Services of KindImport.
	Services []service.Spec
	Fence    uint64
	Repair   bool
	// Held are the values KindImport holds for the owner "import".
	Held []PoolValues
	// FeatureLevel is the level of KindSetFeatureLevel.
	FeatureLevel uint64
}

// PoolValues names values of one pool.
type PoolValues struct {
	Pool   string
	Values []string
}

// Member is a row of the replicated member table.
type Member struct {
	ID       string
	RaftAddr string
	APIAddr  string
	// Nonvoter keeps the member a non-voter: the leader does not promote
	// it. Only KindSetMemberNonvoter sets it; KindSetMember clears it.
	Nonvoter bool
}

// EncodeBatch returns the log entry carrying reqs.
func EncodeBatch(reqs []*Request) []byte {
	size := 1 + binary.MaxVarintLen64
	for _, r := range reqs {
		size += 1 + binary.MaxVarintLen64 + len(r.ID) + 8 + bodySize(r)
	}
	e := encoder{b: make([]byte, 0, size)}
	e.u8(byte(EntryBatch))
	e.uvarint(uint64(len(reqs)))
	for _, r := range reqs {
		e.u8(byte(r.Kind))
		e.str(r.ID)
		e.u64(r.Seed)
		encodeBody(&e, r)
	}
	return e.b
}

// bodySize is at least the length of encodeBody's output for r, so that
// encoders allocate once (a 4,096-operation transaction grew its buffer a
// dozen times).
func bodySize(r *Request) int {
	const v = binary.MaxVarintLen64
	n := v + 4*v + len(r.Pool) + len(r.Range) + len(r.Member.ID) + len(r.Member.RaftAddr) + len(r.Member.APIAddr) + len(r.ClusterID)
	for _, op := range r.Ops {
		n += 1 + 4*v + len(op.Pool) + len(op.Value) + len(op.Owner)
	}
	if r.Service != nil {
		n += specSize(r.Service)
	}
	for i := range r.Services {
		n += specSize(&r.Services[i])
	}
	n += 4*v + len(r.Network.IPv4Pool) + len(r.Network.IPv6Pool) + len(r.Network.NodePortPool) + 8*len(r.Network.Families)
	for _, h := range r.Held {
		n += v + len(h.Pool)
		for _, x := range h.Values {
			n += v + len(x)
		}
	}
	return n
}

// encodeBody writes the part of a request that its fingerprint covers:
// everything but the ID and the seed.
func encodeBody(e *encoder, r *Request) {
	switch r.Kind {
	case KindTxn:
		e.uvarint(uint64(len(r.Ops)))
		for _, op := range r.Ops {
			e.u8(byte(op.Kind))
			e.str(op.Pool)
			e.str(op.Value)
			e.str(op.Owner)
			e.uvarint(uint64(op.Count))
		}
	case KindCreatePool, KindCreatePoolExclusive:
		e.str(r.Pool)
		e.str(r.Range)
	case KindDeletePool:
		e.str(r.Pool)
	case KindSetMember:
		e.str(r.Member.ID)
		e.str(r.Member.RaftAddr)
		e.str(r.Member.APIAddr)
	case KindRemoveMember:
		e.str(r.Member.ID)
	case KindSetClusterID:
		e.str(r.ClusterID)
	case KindSetServiceNetwork:
		encodeNetwork(e, r.Network)
		e.bool(r.IfUnset)
	case KindPutService, KindDeleteService:
		spec := r.Service
		if spec == nil {
			spec = &service.Spec{}
		}
		encodeSpec(e, spec)
		e.bool(r.DryRun)
	case KindPutServiceV2:
		spec := r.Service
		if spec == nil {
			spec = &service.Spec{}
		}
		encodeSpec(e, spec)
		e.bool(r.DryRun)
		e.str(spec.ClusterIP)
	case KindReconcile:
		e.uvarint(r.Fence)
		e.bool(r.Repair)
		encodeSpecs(e, r.Services)
	case KindImport:
		encodeSpecs(e, r.Services)
		e.uvarint(uint64(len(r.Held)))
		for _, h := range r.Held {
			e.str(h.Pool)
			e.uvarint(uint64(len(h.Values)))
			for _, v := range h.Values {
				e.str(v)
			}
		}
	case KindSetFeatureLevel:
		e.uvarint(r.FeatureLevel)
	case KindSetMemberNonvoter:
		e.str(r.Member.ID)
		e.str(r.Member.RaftAddr)
		e.str(r.Member.APIAddr)
		e.bool(r.Member.Nonvoter)
	}
}

// Fingerprint identifies what a request asks for, without its ID and seed:
// a retry of the same request has the same fingerprint.
func (r *Request) Fingerprint() uint64 {
	var scratch []byte
	return r.fingerprint(&scratch)
}

// fingerprint is Fingerprint, encoding in *scratch's space, which it keeps
// for the next call up to 1 MiB (a transaction of 4,096 releases encodes to
// about 150 KB).
func (r *Request) fingerprint(scratch *[]byte) uint64 {
	if r.Kind == KindPutServiceV2 && r.Service != nil && len(r.Service.ClusterIPs) == 0 {
		// The same client request is a put-service-v2 from a proposer at
		// level 5 and a put-service, the singular folded into clusterIPs,
		// below it: a retry under one ID across the raise (or through a
		// node that has not applied it yet) must find the first attempt,
		// either way round. So this kind is identified by that folded form.
		// (Proposers send it only without clusterIPs; one with both is
		// fingerprinted as itself.)
		folded := *r.Service
		if folded.ClusterIP != "" {
			folded.ClusterIPs = []string{folded.ClusterIP}
		}
		folded.ClusterIP = ""
		as := *r
		as.Kind, as.Service = KindPutService, &folded
		return as.fingerprint(scratch)
	}
	e := encoder{b: (*scratch)[:0]}
	if n := 1 + bodySize(r); cap(e.b) < n {
		e.b = make([]byte, 0, n)
	}
	e.u8(byte(r.Kind))
	encodeBody(&e, r)
	h := fnv.New64a()
	h.Write(e.b)
	if cap(e.b) <= 1<<20 {
		*scratch = e.b
	}
	return h.Sum64()
}

// DecodeEntry decodes a log entry. An error means the entry is not one this
// version of rangealloc understands; the caller must stop rather than skip it.
func DecodeEntry(data []byte) ([]*Request, error) {
	d := decoder{b: data}
	t := EntryType(d.u8())
	if d.err != nil {
		return nil, fmt.Errorf("empty log entry")
	}
	if t != EntryBatch {
		return nil, fmt.Errorf("unknown log entry type %d", t)
	}
	n := d.count(maxRequests, 10)
	reqs := make([]*Request, 0, n)
	var shared string // data as a string, once a transaction needs it
	for i := 0; i < n && d.err == nil; i++ {
		r := &Request{Kind: Kind(d.u8()), ID: d.str(maxField), Seed: d.u64()}
		switch r.Kind {
		case KindTxn:
			nops := d.count(MaxOps, 5)
			r.Ops = make([]Op, nops)
			// The operations of a large transaction name one pool and
			// owner, which they share with the operation before, and
			// values, which are parts of one copy of the entry (no
			// operation's value outlives the apply).
			var prev Op
			for j := range r.Ops {
				op := Op{Kind: OpKind(d.u8()), Pool: d.strLike(maxField, prev.Pool)}
				if nops >= sharedValuesFrom {
					op.Value = d.strShared(maxField, data, &shared)
				} else {
					op.Value = d.str(maxField)
				}
				op.Owner, op.Count = d.strLike(maxField, prev.Owner), int(d.uvarint())
				r.Ops[j], prev = op, op
			}
		case KindCreatePool, KindCreatePoolExclusive:
			r.Pool, r.Range = d.str(maxField), d.str(maxField)
		case KindDeletePool:
			r.Pool = d.str(maxField)
		case KindSetMember:
			r.Member = Member{ID: d.str(maxField), RaftAddr: d.str(maxField), APIAddr: d.str(maxField)}
		case KindRemoveMember:
			r.Member.ID = d.str(maxField)
		case KindSetClusterID:
			r.ClusterID = d.str(maxField)
		case KindSetServiceNetwork:
			r.Network = decodeNetwork(&d)
			r.IfUnset = d.bool()
		case KindPutService, KindDeleteService:
			spec := decodeSpec(&d)
			r.Service = &spec
			r.DryRun = d.bool()
		case KindPutServiceV2:
			spec := decodeSpec(&d)
			r.Service = &spec
			r.DryRun = d.bool()
			spec.ClusterIP = d.str(maxField)
		case KindReconcile:
			r.Fence = d.uvarint()
			r.Repair = d.bool()
			r.Services = decodeSpecs(&d)
		case KindImport:
			r.Services = decodeSpecs(&d)
			r.Held = make([]PoolValues, d.count(maxField, 2))
			for j := range r.Held {
				r.Held[j].Pool = d.str(maxField)
				r.Held[j].Values = make([]string, d.count(1<<21, 1))
				for k := range r.Held[j].Values {
					r.Held[j].Values[k] = d.str(maxField)
				}
			}
		case KindSetMemberNonvoter:
			r.Member = Member{ID: d.str(maxField), RaftAddr: d.str(maxField), APIAddr: d.str(maxField), Nonvoter: d.bool()}
		case KindSetFeatureLevel:
			r.FeatureLevel = d.uvarint()
			if d.err == nil && r.FeatureLevel > MaxFeatureLevel {
				d.fail("request %d: %v", i, errLevelTooHigh(r.FeatureLevel))
			}
		default:
			d.fail("request %d: unknown kind %d", i, r.Kind)
		}
		reqs = append(reqs, r)
	}
	if err := d.done(); err != nil {
		return nil, fmt.Errorf("undecodable log entry: %w", err)
	}
	return reqs, nil
}
