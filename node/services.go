package node

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/wire"
	"github.com/rangealloc/rangealloc/service"
)

// ServiceRecord is a stored Service: its spec completed by its last write,
// and that write's log index.
type ServiceRecord = fsm.ServiceRecord

// ServiceWrite is the outcome of PutService.
type ServiceWrite struct {
	ServiceRecord
	// Created: the write created the Service, or replaced one of another
	// uid.
	Created bool
}

func (n *Node) submitChecked(ctx context.Context, req *fsm.Request) (*fsm.Result, error) {
	if err := checkRequestID(req.ID); err != nil {
		return nil, err
	}
	res, err := n.submit(ctx, req)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return res, nil
}

// PutService creates or updates a Service, with kube-apiserver's
// allocation semantics, in one log entry: every requested value is
// reserved before any dynamic pick, and the values the write gives up are
// released in the same entry that stores the Service. With dryRun it
// answers what the write would do and changes nothing. A write that
// changes nothing answers the stored Service and keeps its revision.
// Rejected writes are *fsm.Error: CodeInvalid with the Field,
// CodeRangeFull, or CodeInvalidArgument.
//
// spec.ClusterIP, the singular field, stands for clusterIPs[0] as in
// Kubernetes. An update that gives it alone, naming the stored primary,
// keeps every stored clusterIP (a dual-stack Service keeps its
// secondary). That needs feature level 5, where the log entry carries the
// singular to the state machine, which folds it against the stored
// Service; below it, this node folds it as a create's, and such an
// update is refused for dropping the secondary. A singular that comes
// with clusterIPs only has to match clusterIPs[0], and is checked here.
func (n *Node) PutService(ctx context.Context, spec service.Spec, dryRun bool, requestID string) (ServiceWrite, error) {
	kind := fsm.KindPutServiceV2
	if spec.ClusterIP == "" || len(spec.ClusterIPs) > 0 || !n.levels.atLeast(ctx, fsm.KindLevel(fsm.KindPutServiceV2)) {
		kind = fsm.KindPutService
		if err := service.FoldClusterIP(&spec); err != nil {
			return ServiceWrite{}, fsm.InvalidService(spec.Name, err)
		}
	}
	res, err := n.submitChecked(ctx, &fsm.Request{Kind: kind, ID: requestID, Service: &spec, DryRun: dryRun})
	if err != nil {
		return ServiceWrite{}, err
	}
	return ServiceWrite{ServiceRecord: *res.Service, Created: res.Created}, nil
}

// DeleteService deletes a Service and releases exactly its values, in one
// log entry, and returns it; a missing one is CodeServiceNotFound.
func (n *Node) DeleteService(ctx context.Context, namespace, name string, dryRun bool, requestID string) (ServiceRecord, error) {
	res, err := n.submitChecked(ctx, &fsm.Request{Kind: fsm.KindDeleteService, ID: requestID,
		Service: &service.Spec{Namespace: namespace, Name: name}, DryRun: dryRun})
	if err != nil {
		return ServiceRecord{}, err
	}
	return *res.Service, nil
}

// Service returns one Service.
func (n *Node) Service(ctx context.Context, c Consistency, namespace, name string) (ServiceRecord, error) {
	r, err := n.read(ctx, &readArgs{Op: wire.ReadService, Namespace: namespace, Name: name, Consistency: int(c)})
	if err != nil {
		return ServiceRecord{}, err
	}
	if err := replyErr(r); err != nil {
		return ServiceRecord{}, err
	}
	return r.Services[0], nil
}

// Services returns the Services of namespace ("" for all), sorted by
// namespace and name, and the applied index they were read at: a fence
// for Reconcile.
func (n *Node) Services(ctx context.Context, c Consistency, namespace string) ([]ServiceRecord, uint64, error) {
	r, err := n.read(ctx, &readArgs{Op: wire.ReadServices, Namespace: namespace, Consistency: int(c)})
	if err != nil {
		return nil, 0, err
	}
	if r.Services == nil {
		r.Services = []ServiceRecord{}
	}
	return r.Services, r.Index, replyErr(r)
}

// ServiceNetwork returns the service network (no families: none set).
func (n *Node) ServiceNetwork(ctx context.Context, c Consistency) (fsm.ServiceNetwork, error) {
	r, err := n.read(ctx, &readArgs{Op: wire.ReadServiceNetwork, Consistency: int(c)})
	if err != nil {
		return fsm.ServiceNetwork{}, err
	}
	return r.Network, replyErr(r)
}

// SetServiceNetwork replaces the service network. A family's pool, or the
// node-port pool, cannot change while Services hold values in it.
func (n *Node) SetServiceNetwork(ctx context.Context, sn fsm.ServiceNetwork, requestID string) error {
	_, err := n.submitChecked(ctx, &fsm.Request{Kind: fsm.KindSetServiceNetwork, ID: requestID, Network: sn})
	return err
}

// Reconcile compares the caller's Services with the pools (see
// fsm.Finding for the types). fence is a revision the caller read before
// it listed its Services: nothing allocated or written after it is a leak
// or replaced. A report is a linearizable read; a repair is one log entry,
// and its index is returned.
func (n *Node) Reconcile(ctx context.Context, fence uint64, listed []service.Spec, repair bool, requestID string) ([]fsm.Finding, uint64, error) {
	listed, err := foldClusterIPs(listed)
	if err != nil {
		return nil, 0, err
	}
	if !repair {
		r, err := n.read(ctx, &readArgs{Op: wire.ReadReconcile, Fence: fence, Services: listed, Consistency: int(Linearizable)})
		if err != nil {
			return nil, 0, err
		}
		return r.Findings, r.Index, replyErr(r)
	}
	res, err := n.submitChecked(ctx, &fsm.Request{Kind: fsm.KindReconcile, ID: requestID, Fence: fence, Services: listed, Repair: true})
	if err != nil {
		return nil, 0, err
	}
	return res.Findings, res.Index, nil
}

// RangeAllocation is a Kubernetes RangeAllocation's range and bitmap.
type RangeAllocation struct {
	Range string
	Data  []byte
}

// ImportResult is what Import created.
type ImportResult struct {
	Services, Values int
	Index            uint64
}

// Import creates Service records with the values they name (every value
// must be named: an import picks none), and holds for the owner "import"
// every value set in a RangeAllocation that no imported Service names, so
// that the pools' RangeAllocations equal the imported ones. Each
// RangeAllocation's range must be the range of one of the service
// network's pools. All or nothing, in one log entry.
func (n *Node) Import(ctx context.Context, specs []service.Spec, ras []RangeAllocation, requestID string) (ImportResult, error) {
	specs, err := foldClusterIPs(specs)
	if err != nil {
		return ImportResult{}, err
	}
	var held []fsm.PoolValues
	if len(ras) > 0 {
		sn, err := n.ServiceNetwork(ctx, Linearizable)
		if err != nil {
			return ImportResult{}, err
		}
		pools, err := n.Pools(ctx, Leader)
		if err != nil {
			return ImportResult{}, err
		}
		names := []string{sn.IPv4Pool, sn.IPv6Pool, sn.NodePortPool}
		for i, ra := range ras {
			rng, err := allocator.ParseRange(ra.Range)
			if err != nil {
				return ImportResult{}, &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: fmt.Sprintf("rangeAllocations[%d]: %v", i, err)}
			}
			pool := ""
			for _, p := range pools {
				for _, name := range names {
					if name != "" && p.Name == name && p.Range.String() == rng.String() {
						pool = name
					}
				}
			}
			if pool == "" {
				return ImportResult{}, &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: fmt.Sprintf(
					"rangeAllocations[%d]: range %s is not the range of a pool of the service network (%s)", i, rng, strings.Join(nonEmpty(names), ", "))}
			}
			ap := allocator.NewPool(rng)
			if err := ap.Restore(rng.String(), ra.Data); err != nil {
				return ImportResult{}, &fsm.Error{Code: fsm.CodeInvalidArgument, Op: -1, Message: fmt.Sprintf("rangeAllocations[%d]: %v", i, err)}
			}
			pv := fsm.PoolValues{Pool: pool}
			ap.Bitmap().ForEach(func(off int) bool {
				pv.Values = append(pv.Values, rng.Value(off))
				return true
			})
			held = append(held, pv)
		}
	}
	res, err := n.submitChecked(ctx, &fsm.Request{Kind: fsm.KindImport, ID: requestID, Services: specs, Held: held})
	if err != nil {
		return ImportResult{}, err
	}
	return ImportResult{Services: res.Imported, Values: res.Count, Index: res.Index}, nil
}

// foldClusterIPs folds the singular clusterIP of listed Services (a
// reconcile's or an import's: their log entries do not carry it) into
// clusterIPs, as for a create. An error names the Service by its index
// ("services[3].spec.clusterIPs"). The caller's slice is not changed.
func foldClusterIPs(specs []service.Spec) ([]service.Spec, error) {
	out, copied := specs, false
	for i := range specs {
		if specs[i].ClusterIP == "" {
			continue
		}
		if !copied {
			out, copied = slices.Clone(specs), true
		}
		if err := service.FoldClusterIP(&out[i]); err != nil {
			e := fsm.InvalidService(out[i].Name, err)
			e.Field = fmt.Sprintf("services[%d].%s", i, e.Field)
			return nil, e
		}
	}
	return out, nil
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ensureServiceNetwork sets the configured service network on a cluster
// that has none, once its pools exist: at bootstrap, and on a cluster
// that predates Services.
func ensureServiceNetwork(ctx context.Context, sn *fsm.ServiceNetwork, f *fsm.FSM,
	submit func(context.Context, *fsm.Request) (*fsm.Result, error), logger hclog.Logger) {
	if sn == nil || f.ServiceNetwork().Set() {
		return
	}
	for _, name := range []string{sn.IPv4Pool, sn.IPv6Pool, sn.NodePortPool} {
		if name == "" {
			continue
		}
		if _, err := f.Pool(name); err != nil {
			logger.Debug("not setting the service network: its pool is missing", "pool", name)
			return
		}
	}
	res, err := submit(ctx, &fsm.Request{Kind: fsm.KindSetServiceNetwork, ID: "bootstrap-service-network", Network: *sn, IfUnset: true})
	switch {
	case err != nil:
		logger.Warn("could not set the service network", "error", err)
	case res.Err != nil:
		logger.Warn("service network not set", "error", res.Err)
	case res.Created:
		logger.Info("set the service network", "families", fmt.Sprint(sn.Families))
	}
}
