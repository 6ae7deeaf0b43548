package fsm

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/rangealloc/rangealloc/service"
)

// Finding types of a reconcile.
const (
	FindingLeak       = "leak"
	FindingMissing    = "missing"
	FindingDuplicate  = "duplicate"
	FindingOutOfRange = "outOfRange"
	FindingMismatch   = "mismatch"
)

// Finding is one disagreement between the listed Services and the pools.
type Finding struct {
	Type    string
	Pool    string
	Value   string
	Service string // the listed Service ("namespace/name"); "" for a leak
	Owner   string // the value's holder, when held
	Reason  string // Kubernetes' repair reason
	Message string
	// Repaired: a repair released (leak) or allocated (missing) the value.
	Repaired bool
}

// Reconcile compares listed Services with the pools and the records,
// changing nothing (see reconcile).
func (f *FSM) Reconcile(fence uint64, listed []service.Spec) ([]Finding, uint64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	res := f.s.reconcileOn(f.s.index, fence, listed, false)
	if res.Err != nil {
		return nil, 0, res.Err
	}
	return res.Findings, f.s.index, nil
}

func (s *state) reconcile(index uint64, r *Request) *Result {
	return s.reconcileOn(index, r.Fence, r.Services, r.Repair)
}

// reason returns Kubernetes' repair reason for a finding about a value of
// kind k: ClusterIP... for cluster IPs, Port... for node ports.
func reason(k service.NeedKind, what string) string {
	if k == service.KindClusterIP {
		return "ClusterIP" + what
	}
	return "Port" + what
}

// reconcileOn reports, for the listed Services:
//   - outOfRange: a named value outside its pool's range, or of a family
//     the network has no pool for;
//   - duplicate: a value named by an earlier listed Service too;
//   - missing: a named value that is not allocated;
//   - mismatch: a named value held by another owner;
//   - leak: a value of the network's pools held by a services/ owner,
//     named by no listed Service, and allocated at or before fence.
//
// With repair it then, in the same step:
//  1. for each listed Service whose only findings are missing values,
//     whose spec needs no dynamic pick, and whose record is absent or no
//     newer than fence: allocates the missing values for it and stores
//     the listed spec as its record; but missing values only when no
//     entry after the fence freed a Service's value (they may be those of
//     a Service deleted after the caller listed it: a later reconcile,
//     with a newer fence, repairs them);
//  2. deletes the record of each Service not listed, no newer than fence,
//     all of whose values that it still holds are leaks;
//  3. releases each leak its owner's record (if any) does not name.
//
// Nothing written after the fence is released or replaced: a value
// allocated after it is no leak, and a record written after it is kept.
// A repair refuses a fence at or after its own entry.
func (s *state) reconcileOn(index, fence uint64, in []service.Spec, repair bool) *Result {
	if repair && fence >= index {
		// The fence is all that keeps a repair off later writes; one
		// that was never read could release a value in use.
		return &Result{Err: errorf(CodeInvalidArgument, "fence %d is not a revision read before this repair (entry %d)", fence, index)}
	}
	n, nerr := s.resolveNetwork()
	if nerr != nil {
		return &Result{Err: nerr}
	}
	listed := append([]service.Spec(nil), in...)
	sort.SliceStable(listed, func(i, j int) bool {
		if listed[i].Namespace != listed[j].Namespace {
			return listed[i].Namespace < listed[j].Namespace
		}
		return listed[i].Name < listed[j].Name
	})
	isListed := make(map[string]bool, len(listed))
	for i := range listed {
		l := &listed[i]
		if err := ValidateServiceName(l.Namespace, l.Name); err != nil {
			err.Op = i
			return &Result{Err: err}
		}
		if err := checkSpecSize(l); err != nil {
			return &Result{Err: err}
		}
		key := l.Namespace + "/" + l.Name
		if isListed[key] {
			return &Result{Err: errorf(CodeInvalidArgument, "Service %s is listed twice", key)}
		}
		isListed[key] = true
	}

	type at struct {
		p   *pool
		off int
	}
	type missing struct {
		at
		finding int
	}
	claims := map[at]string{} // value -> the listed Service naming it
	bad := map[string]bool{}  // listed Services with a finding a repair cannot fix
	misses := map[string][]missing{}
	var out []Finding
	for i := range listed {
		l := &listed[i]
		key, owner := l.Namespace+"/"+l.Name, ServiceOwner(l.Namespace, l.Name)
		for _, h := range service.PlanDelete(*l) {
			p := n.poolOf(h.Kind, h.Family)
			if p == nil {
				out = append(out, Finding{Type: FindingOutOfRange, Value: h.Value, Service: key, Reason: reason(h.Kind, "OutOfRange"),
					Message: fmt.Sprintf("Cluster IP %s is not within the service network's families %v; please recreate service", h.Value, s.network.Families)})
				bad[key] = true
				continue
			}
			off, e := p.offset(h.Value)
			if e != nil {
				msg := fmt.Sprintf("Cluster IP [%s]:%s is not within the configured Service CIDR %s; please recreate service", h.Family, h.Value, p.p.Range())
				if h.Kind != service.KindClusterIP {
					msg = fmt.Sprintf("Port %s is not within the port range %s; please recreate service", h.Value, p.p.Range())
				}
				out = append(out, Finding{Type: FindingOutOfRange, Pool: p.name, Value: h.Value, Service: key, Reason: reason(h.Kind, "OutOfRange"), Message: msg})
				bad[key] = true
				continue
			}
			v := at{p, off}
			if other, ok := claims[v]; ok {
				msg := fmt.Sprintf("Cluster IP [%s]:%s was assigned to multiple services (%s and %s); please recreate service", h.Family, h.Value, other, key)
				if h.Kind != service.KindClusterIP {
					msg = fmt.Sprintf("Port %s was assigned to multiple services (%s and %s); please recreate service", h.Value, other, key)
				}
				out = append(out, Finding{Type: FindingDuplicate, Pool: p.name, Value: h.Value, Service: key,
					Owner: p.recs.get(off).owner, Reason: reason(h.Kind, "AlreadyAllocated"), Message: msg})
				bad[key] = true
				continue
			}
			claims[v] = key
			switch rec := p.recs.get(off); {
			case !p.p.HasOffset(off):
				msg := fmt.Sprintf("Cluster IP [%s]:%s is not allocated; repairing", h.Family, h.Value)
				if h.Kind != service.KindClusterIP {
					msg = fmt.Sprintf("Port %s is not allocated; repairing", h.Value)
				}
				misses[key] = append(misses[key], missing{v, len(out)})
				out = append(out, Finding{Type: FindingMissing, Pool: p.name, Value: h.Value, Service: key, Reason: reason(h.Kind, "NotAllocated"), Message: msg})
			case rec.owner != owner:
				out = append(out, Finding{Type: FindingMismatch, Pool: p.name, Value: h.Value, Service: key, Owner: rec.owner,
					Reason: reason(h.Kind, "AlreadyAllocated"), Message: fmt.Sprintf("%s is named by Service %s but held by %q", h.Value, key, rec.owner)})
				bad[key] = true
			}
		}
	}

	// Leaks, pool by pool in name order, offsets ascending.
	type leak struct {
		at
		finding int
	}
	var leaks []leak
	leaked := map[at]bool{}
	for _, p := range n.ordered() {
		kind := service.KindNodePort
		if p != n.ports {
			kind = service.KindClusterIP
		}
		p.p.ForEachUsed(func(off int) bool {
			rec := p.recs.get(off)
			if !strings.HasPrefix(rec.owner, ServiceOwnerPrefix) || rec.revision() > fence {
				return true
			}
			if _, named := claims[at{p, off}]; named {
				return true
			}
			v := p.p.Range().Value(off)
			leaks = append(leaks, leak{at{p, off}, len(out)})
			leaked[at{p, off}] = true
			what := "Cluster IP " + v
			if kind != service.KindClusterIP {
				what = "Port " + v
			}
			out = append(out, Finding{Type: FindingLeak, Pool: p.name, Value: v, Owner: rec.owner, Reason: reason(kind, "Leaked"),
				Message: fmt.Sprintf("%s is held by %s, which no listed Service names: it has leaked", what, rec.owner)})
			return true
		})
	}
	if !repair {
		return &Result{Findings: out}
	}

	// 1. Listed Services that only miss values.
	for i := range listed {
		l := &listed[i]
		key, owner := l.Namespace+"/"+l.Name, ServiceOwner(l.Namespace, l.Name)
		if bad[key] {
			continue
		}
		if r := s.services[key]; r != nil && r.Revision > fence {
			continue
		}
		plan, err := service.PlanWrite(n.net, nil, *l)
		if err != nil || len(plan.Dynamic()) > 0 {
			continue
		}
		if len(misses[key]) > 0 && s.freed > fence {
			continue // they may be the values of a Service deleted after the caller listed it
		}
		for _, m := range misses[key] {
			m.p.p.AllocateOffset(m.off) // missing: free
			m.p.take(m.off, owner, true, index)
			out[m.finding].Repaired = true
		}
		if r := s.services[key]; r == nil || !reflect.DeepEqual(r.Spec, plan.Spec) {
			s.services[key] = &ServiceRecord{Spec: plan.Spec, Revision: index}
		}
	}
	// 2. Records of Services not listed, all of whose values leaked.
	for _, key := range s.serviceKeys() {
		r := s.services[key]
		if isListed[key] || r.Revision > fence {
			continue
		}
		all := true
		for _, h := range service.PlanDelete(r.Spec) {
			p := n.poolOf(h.Kind, h.Family)
			if p == nil {
				continue
			}
			off, e := p.offset(h.Value)
			if e != nil || !p.p.HasOffset(off) || p.recs.get(off).owner != ServiceOwnerPrefix+key {
				continue // not held by this Service (a forced release took it): nothing to keep the record for
			}
			all = all && leaked[at{p, off}]
		}
		if all {
			delete(s.services, key)
		}
	}
	// 3. Leaks no record names.
	for _, lk := range leaks {
		f := &out[lk.finding]
		key := f.Owner[len(ServiceOwnerPrefix):]
		if r := s.services[key]; r != nil {
			if s.rules.repairByOffset && holds(r.Spec, lk.p, lk.off, lk.p == n.ports) {
				continue
			}
			if !s.rules.repairByOffset && names(r.Spec, f.Value, lk.p == n.ports) {
				continue
			}
		}
		lk.p.free(lk.off)
		f.Repaired = true
	}
	return &Result{Findings: out}
}

// names reports whether spec holds value: a node port when port, else a
// cluster IP. It compares strings, as replicas did before level 4 (holds).
func names(spec service.Spec, value string, port bool) bool {
	for _, h := range service.PlanDelete(spec) {
		if h.Value == value && (h.Kind != service.KindClusterIP) == port {
			return true
		}
	}
	return false
}

// holds reports whether spec holds the value at off in pool p: a node
// port when port, else a cluster IP. It compares offsets, since a record
// keeps an IP as its writer spelled it ("fd00::00a"), and a pool names it
// one way ("fd00::a").
func holds(spec service.Spec, p *pool, off int, port bool) bool {
	for _, h := range service.PlanDelete(spec) {
		if (h.Kind != service.KindClusterIP) != port {
			continue
		}
		if o, err := p.offset(h.Value); err == nil && o == off {
			return true
		}
	}
	return false
}

// ordered returns the network's pools in name order.
func (n *svcNet) ordered() []*pool {
	ps := []*pool{n.ports}
	for _, p := range n.pools {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	return ps
}
