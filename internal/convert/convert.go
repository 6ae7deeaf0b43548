// Package convert turns the node's values into the public forms of
// api/types and back, and the node's errors into *types.Error. The HTTP
// server and the embedding package both use it, so a call answers the same
// values and the same errors whichever way it came.
package convert

import (
	"context"
	"errors"
	"fmt"

	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/service"
	"github.com/rangealloc/rangealloc/version"
)

// Pool is the public form of a pool's status.
func Pool(st node.PoolStatus) types.Pool {
	r := st.Range
	size, b := r.Size(), r.StaticSize()
	p := types.Pool{Name: st.Name, Kind: r.Kind().String(), Family: r.Family(), Range: r.String(),
		First: r.Value(0), Last: r.Value(size - 1), Size: size, Used: st.Used, Free: size - st.Used,
		Static:  types.Band{Size: b, Used: st.UsedStatic},
		Dynamic: types.Band{First: r.Value(b), Last: r.Value(size - 1), Size: size - b, Used: st.UsedDynamic}}
	if b > 0 {
		p.Static.First, p.Static.Last = r.Value(0), r.Value(b-1)
	}
	return p
}

// Allocation is the public form of an allocation.
func Allocation(a fsm.Allocation) types.Allocation {
	out := types.Allocation{Pool: a.Pool, Value: a.Value, Owner: a.Owner, Band: "dynamic", Mode: "dynamic", Revision: a.Revision}
	if a.InStatic {
		out.Band = "static"
	}
	if a.Static {
		out.Mode = "static"
	}
	return out
}

// Allocations converts a list of allocations.
func Allocations(as []fsm.Allocation) []types.Allocation {
	out := make([]types.Allocation, len(as))
	for i, a := range as {
		out[i] = Allocation(a)
	}
	return out
}

// Spec converts a Service body to the planner's spec. The singular
// clusterIP goes along as given: the node folds it into clusterIPs, on an
// update against the stored Service (node.PutService).
func Spec(s types.Service) service.Spec {
	spec := service.Spec{Namespace: s.Namespace, Name: s.Name, UID: s.UID, Type: s.Type, ClusterIPs: s.ClusterIPs, ClusterIP: s.ClusterIP,
		IPFamilyPolicy: s.IPFamilyPolicy, HasSelector: s.HasSelector, ExternalTrafficPolicy: s.ExternalTrafficPolicy,
		HealthCheckNodePort: s.HealthCheckNodePort, AllocateLoadBalancerNodePorts: s.AllocateLoadBalancerNodePorts}
	for _, f := range s.IPFamilies {
		spec.IPFamilies = append(spec.IPFamilies, service.Family(f))
	}
	for _, p := range s.Ports {
		spec.Ports = append(spec.Ports, service.Port{Name: p.Name, Protocol: p.Protocol, Port: p.Port, NodePort: p.NodePort})
	}
	return spec
}

// Specs converts the Services of a reconcile or an import.
func Specs(list []types.Service) []service.Spec {
	out := make([]service.Spec, 0, len(list))
	for _, s := range list {
		out = append(out, Spec(s))
	}
	return out
}

// Service converts a stored Service to its public form.
func Service(r node.ServiceRecord) types.Service {
	s := r.Spec
	out := types.Service{Namespace: s.Namespace, Name: s.Name, UID: s.UID, Type: s.Type, ClusterIPs: s.ClusterIPs,
		IPFamilyPolicy: s.IPFamilyPolicy, HasSelector: s.HasSelector, ExternalTrafficPolicy: s.ExternalTrafficPolicy,
		HealthCheckNodePort: s.HealthCheckNodePort, AllocateLoadBalancerNodePorts: s.AllocateLoadBalancerNodePorts, Revision: r.Revision}
	if len(s.ClusterIPs) > 0 {
		out.ClusterIP = s.ClusterIPs[0]
	}
	for _, f := range s.IPFamilies {
		out.IPFamilies = append(out.IPFamilies, string(f))
	}
	for _, p := range s.Ports {
		out.Ports = append(out.Ports, types.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, NodePort: p.NodePort})
	}
	return out
}

// Network is the public form of the service network.
func Network(sn fsm.ServiceNetwork) types.ServiceNetwork {
	out := types.ServiceNetwork{IPFamilies: []string{}, Pools: map[string]string{}, NodePortPool: sn.NodePortPool}
	for _, f := range sn.Families {
		out.IPFamilies = append(out.IPFamilies, string(f))
		out.Pools[string(f)] = sn.Pool(f)
	}
	return out
}

// FromNetwork converts a service network's public form; a pools key other
// than IPv4 or IPv6 is an InvalidArgument error.
func FromNetwork(body types.ServiceNetwork) (fsm.ServiceNetwork, error) {
	sn := fsm.ServiceNetwork{NodePortPool: body.NodePortPool}
	for _, f := range body.IPFamilies {
		sn.Families = append(sn.Families, service.Family(f))
	}
	for f, p := range body.Pools {
		switch service.Family(f) {
		case service.IPv4:
			sn.IPv4Pool = p
		case service.IPv6:
			sn.IPv6Pool = p
		default:
			return sn, types.NewError(types.CodeInvalidArgument, fmt.Sprintf("pools: key %q: want IPv4 or IPv6", f), nil, nil)
		}
	}
	return sn, nil
}

// TxnOps converts a transaction's operations; force makes its releases
// forced. An op other than "allocate" or "release" is an InvalidArgument
// error naming its index.
func TxnOps(in []types.TxnOp, force bool) ([]fsm.Op, error) {
	if len(in) == 0 || len(in) > fsm.MaxOps {
		return nil, types.NewError(types.CodeInvalidArgument, fmt.Sprintf(`"ops" must hold 1 to %d operations, got %d`, fsm.MaxOps, len(in)), nil, nil)
	}
	release := fsm.OpRelease
	if force {
		release = fsm.OpReleaseForce
	}
	ops := make([]fsm.Op, len(in))
	for i, op := range in {
		switch op.Op {
		case "allocate":
			ops[i] = fsm.Op{Kind: fsm.OpAllocate, Pool: op.Pool, Value: op.Value, Owner: op.Owner}
		case "release":
			ops[i] = fsm.Op{Kind: release, Pool: op.Pool, Value: op.Value, Owner: op.Owner}
		default:
			return nil, &fsm.Error{Code: fsm.CodeInvalidArgument, Op: i, Message: fmt.Sprintf(`ops[%d]: "op" must be "allocate" or "release", got %q`, i, op.Op)}
		}
	}
	return ops, nil
}

// TxnResults is the public form of a transaction's results: one
// allocation per operation.
func TxnResults(res [][]fsm.Allocation) []types.Allocation {
	out := make([]types.Allocation, 0, len(res))
	for _, as := range res {
		out = append(out, Allocation(as[0]))
	}
	return out
}

// Cluster is the public form of a node's view of the cluster.
func Cluster(st node.ClusterStatus) types.ClusterStatus {
	out := types.ClusterStatus{ID: st.ID, ClusterID: st.ClusterID, Leader: types.ClusterLeader{ID: st.LeaderID, APIAddr: st.LeaderAPI}, Term: st.Term,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, FeatureLevel: st.FeatureLevel, Version: version.String(),
		Members: []types.ClusterMember{}}
	for _, m := range st.Members {
		cm := types.ClusterMember{ID: m.ID, RaftAddr: m.RaftAddr, APIAddr: m.APIAddr, Voter: m.Voter, Leader: m.Leader,
			HealthKnown: m.Known, LastContactMs: -1}
		if m.Known {
			cm.Reachable, cm.Healthy, cm.MatchIndex, cm.Lag = m.Reachable, m.Healthy, m.MatchIndex, m.Lag
			cm.Version, cm.FeatureLevel, cm.DiskFreeBytes, cm.DiskLow = m.Version, m.FeatureLevel, m.DiskFree, m.DiskLow
			if m.LastContact >= 0 {
				cm.LastContactMs = m.LastContact.Milliseconds()
			}
		}
		out.Members = append(out.Members, cm)
	}
	return out
}

// Member converts a request to add a member; ID and RaftAddr are required.
func Member(req types.MemberRequest) (fsm.Member, error) {
	if req.ID == "" || req.RaftAddr == "" {
		return fsm.Member{}, types.NewError(types.CodeInvalidArgument, `"id" and "raftAddr" are required`, nil, nil)
	}
	return fsm.Member{ID: req.ID, RaftAddr: req.RaftAddr, APIAddr: req.APIAddr, Nonvoter: req.Voter != nil && !*req.Voter}, nil
}

// Consistency converts a read's consistency; empty means linearizable.
func Consistency(c types.Consistency) (node.Consistency, error) {
	out, err := node.ParseConsistency(string(c))
	if err != nil {
		return out, types.NewError(types.CodeInvalidArgument, err.Error(), nil, err)
	}
	return out, nil
}

// Error turns an error of the node into a *types.Error: the code, message
// and details the HTTP API answers. withOp adds details.op, the index of a
// transaction's failing operation. An error it does not know is Internal.
// A *types.Error is returned as it is.
func Error(err error, withOp bool) *types.Error {
	var (
		te *types.Error
		fe *fsm.Error
		ue *node.UnknownOutcomeError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		return te
	case errors.As(err, &ue):
		// Before the domain errors: an unknown outcome may wrap a
		// refusal that did not look the request up (a leader low on
		// disk), which must not read as "nothing was applied".
		return types.NewError(types.CodeUnavailable, "outcome unknown: the request may or may not have been applied; retry with the same Idempotency-Key",
			map[string]any{"idempotencyKey": ue.RequestID, "cause": ue.Err.Error()}, err)
	case errors.As(err, &fe):
		return types.NewError(string(fe.Code), fe.Message, fsmDetails(fe, withOp), err)
	case errors.Is(err, node.ErrNoLeader), errors.Is(err, node.ErrNotLeader):
		return types.NewError(types.CodeNoLeader, err.Error(), nil, err)
	case errors.Is(err, node.ErrInvalidBackup):
		return types.NewError(types.CodeInvalidArgument, err.Error(), nil, err)
	case errors.Is(err, node.ErrClosed), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return types.NewError(types.CodeUnavailable, err.Error(), nil, err)
	}
	return types.NewError(types.CodeInternal, err.Error(), nil, err)
}

// fsmDetails are the details of a state machine's error.
func fsmDetails(fe *fsm.Error, withOp bool) map[string]any {
	var d map[string]any
	set := func(k string, v any) {
		if d == nil {
			d = map[string]any{}
		}
		d[k] = v
	}
	switch {
	case fe.Node != nil:
		set("clusterId", fe.Node.ClusterID)
		set("lastIndex", fe.Node.LastIndex)
	case fe.Code == fsm.CodePoolOverlap:
		set("pool", fe.Owner)
	case fe.Owner != "":
		set("owner", fe.Owner)
	}
	if fe.Field != "" {
		set("field", fe.Field)
	}
	if withOp && fe.Op >= 0 {
		set("op", fe.Op)
	}
	return d
}
