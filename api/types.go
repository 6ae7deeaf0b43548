package api

import (
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
)

// The JSON forms live in the leaf package api/types, which clients import
// without linking the node; the names here keep the server's code short.
type (
	Pool              = types.Pool
	Band              = types.Band
	Allocation        = types.Allocation
	RangeAllocation   = types.RangeAllocation
	ObjectMetadata    = types.ObjectMetadata
	PoolList          = types.PoolList
	AllocationList    = types.AllocationList
	TxnResults        = types.TxnResults
	CreatePoolRequest = types.CreatePoolRequest
	AllocateRequest   = types.AllocateRequest
	TxnOp             = types.TxnOp
	TxnRequest        = types.TxnRequest
	ClusterLeader     = types.ClusterLeader
	ClusterMember     = types.ClusterMember
	ClusterStatus     = types.ClusterStatus
	MemberRequest     = types.MemberRequest
	TransferRequest   = types.TransferRequest
	ErrorBody         = types.ErrorBody
	ErrorDetail       = types.ErrorDetail
)

func toPool(st node.PoolStatus) Pool {
	r := st.Range
	size, b := r.Size(), r.StaticSize()
	p := Pool{Name: st.Name, Kind: r.Kind().String(), Family: r.Family(), Range: r.String(),
		First: r.Value(0), Last: r.Value(size - 1), Size: size, Used: st.Used, Free: size - st.Used,
		Static:  Band{Size: b, Used: st.UsedStatic},
		Dynamic: Band{First: r.Value(b), Last: r.Value(size - 1), Size: size - b, Used: st.UsedDynamic}}
	if b > 0 {
		p.Static.First, p.Static.Last = r.Value(0), r.Value(b-1)
	}
	return p
}

func toAllocation(a fsm.Allocation) Allocation {
	out := Allocation{Pool: a.Pool, Value: a.Value, Owner: a.Owner, Band: "dynamic", Mode: "dynamic", Revision: a.Revision}
	if a.InStatic {
		out.Band = "static"
	}
	if a.Static {
		out.Mode = "static"
	}
	return out
}

func toAllocations(as []fsm.Allocation) []Allocation {
	out := make([]Allocation, len(as))
	for i, a := range as {
		out[i] = toAllocation(a)
	}
	return out
}
