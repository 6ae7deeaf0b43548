package api

import (
	"github.com/rangealloc/rangealloc/api/types"
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
