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
	listed, isListed, err := sortListed(in)
	if err != nil {
		return &Result{Err: err}
	}
	rc := &reconciliation{n: n, fence: fence, listed: listed, isListed: isListed,
		claims: map[valueAt]string{}, bad: map[string]bool{}, misses: map[string][]valueFinding{}, leaked: map[valueAt]bool{}}
	for i := range listed {
		rc.checkListed(&listed[i], s.network.Families)
	}
	rc.findLeaks()
	if !repair {
		return &Result{Findings: rc.out}
	}
	s.repairMissing(rc, index)
	s.dropLeakedRecords(rc)
	s.releaseLeaks(rc)
	return &Result{Findings: rc.out}
}

// valueAt is a value of a pool: the pool and its offset.
type valueAt struct {
	p   *pool
	off int
}

// valueFinding is a value and the index of the finding about it.
type valueFinding struct {
	valueAt
	finding int
}

// reconciliation is one reconcile's work: the listed Services, and what
// it found of them and of the pools, for a repair to act on.
type reconciliation struct {
	n        *svcNet
	fence    uint64
	listed   []service.Spec     // sorted by namespace and name
	isListed map[string]bool    // by key
	claims   map[valueAt]string // value -> the listed Service naming it
	bad      map[string]bool    // listed Services with a finding a repair cannot fix
	misses   map[string][]valueFinding
	leaks    []valueFinding // pool by pool in name order, offsets ascending
	leaked   map[valueAt]bool
	out      []Finding
}

// sortListed returns the listed Services sorted by namespace and name,
// and the set of their keys; it refuses a bad name, a spec too large, or a
// Service listed twice.
func sortListed(in []service.Spec) ([]service.Spec, map[string]bool, *Error) {
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
			return nil, nil, err
		}
		if err := checkSpecSize(l); err != nil {
			return nil, nil, err
		}
		key := l.Namespace + "/" + l.Name
		if isListed[key] {
			return nil, nil, errorf(CodeInvalidArgument, "Service %s is listed twice", key)
		}
		isListed[key] = true
	}
	return listed, isListed, nil
}

// checkListed adds the findings about the values listed Service l names
// (families: the network's, for the message of a family it has no pool
// for).
func (rc *reconciliation) checkListed(l *service.Spec, families []service.Family) {
	key, owner := l.Namespace+"/"+l.Name, ServiceOwner(l.Namespace, l.Name)
	for _, h := range service.PlanDelete(*l) {
		p := rc.n.poolOf(h.Kind, h.Family)
		if p == nil {
			rc.out = append(rc.out, Finding{Type: FindingOutOfRange, Value: h.Value, Service: key, Reason: reason(h.Kind, "OutOfRange"),
				Message: fmt.Sprintf("Cluster IP %s is not within the service network's families %v; please recreate service", h.Value, families)})
			rc.bad[key] = true
			continue
		}
		off, e := p.offset(h.Value)
		if e != nil {
			msg := fmt.Sprintf("Cluster IP [%s]:%s is not within the configured Service CIDR %s; please recreate service", h.Family, h.Value, p.p.Range())
			if h.Kind != service.KindClusterIP {
				msg = fmt.Sprintf("Port %s is not within the port range %s; please recreate service", h.Value, p.p.Range())
			}
			rc.out = append(rc.out, Finding{Type: FindingOutOfRange, Pool: p.name, Value: h.Value, Service: key, Reason: reason(h.Kind, "OutOfRange"), Message: msg})
			rc.bad[key] = true
			continue
		}
		rc.checkValue(valueAt{p, off}, key, owner, h)
	}
}

// checkValue adds the finding, if any, about value v, which listed Service
// key (of owner) names as h: named before by another listed Service
// (duplicate), not allocated (missing), or held by another owner
// (mismatch).
func (rc *reconciliation) checkValue(v valueAt, key, owner string, h service.Held) {
	p, off := v.p, v.off
	if other, ok := rc.claims[v]; ok {
		msg := fmt.Sprintf("Cluster IP [%s]:%s was assigned to multiple services (%s and %s); please recreate service", h.Family, h.Value, other, key)
		if h.Kind != service.KindClusterIP {
			msg = fmt.Sprintf("Port %s was assigned to multiple services (%s and %s); please recreate service", h.Value, other, key)
		}
		rc.out = append(rc.out, Finding{Type: FindingDuplicate, Pool: p.name, Value: h.Value, Service: key,
			Owner: p.recs.get(off).owner, Reason: reason(h.Kind, "AlreadyAllocated"), Message: msg})
		rc.bad[key] = true
		return
	}
	rc.claims[v] = key
	switch rec := p.recs.get(off); {
	case !p.p.HasOffset(off):
		msg := fmt.Sprintf("Cluster IP [%s]:%s is not allocated; repairing", h.Family, h.Value)
		if h.Kind != service.KindClusterIP {
			msg = fmt.Sprintf("Port %s is not allocated; repairing", h.Value)
		}
		rc.misses[key] = append(rc.misses[key], valueFinding{v, len(rc.out)})
		rc.out = append(rc.out, Finding{Type: FindingMissing, Pool: p.name, Value: h.Value, Service: key, Reason: reason(h.Kind, "NotAllocated"), Message: msg})
	case rec.owner != owner:
		rc.out = append(rc.out, Finding{Type: FindingMismatch, Pool: p.name, Value: h.Value, Service: key, Owner: rec.owner,
			Reason: reason(h.Kind, "AlreadyAllocated"), Message: fmt.Sprintf("%s is named by Service %s but held by %q", h.Value, key, rec.owner)})
		rc.bad[key] = true
	}
}

// findLeaks adds the leaks: the values of the network's pools held by a
// services/ owner, named by no listed Service, and allocated at or before
// the fence; pool by pool in name order, offsets ascending.
func (rc *reconciliation) findLeaks() {
	for _, p := range rc.n.ordered() {
		kind := service.KindNodePort
		if p != rc.n.ports {
			kind = service.KindClusterIP
		}
		p.p.ForEachUsed(func(off int) bool {
			rec := p.recs.get(off)
			if !strings.HasPrefix(rec.owner, ServiceOwnerPrefix) || rec.revision() > rc.fence {
				return true
			}
			if _, named := rc.claims[valueAt{p, off}]; named {
				return true
			}
			v := p.p.Range().Value(off)
			rc.leaks = append(rc.leaks, valueFinding{valueAt{p, off}, len(rc.out)})
			rc.leaked[valueAt{p, off}] = true
			what := "Cluster IP " + v
			if kind != service.KindClusterIP {
				what = "Port " + v
			}
			rc.out = append(rc.out, Finding{Type: FindingLeak, Pool: p.name, Value: v, Owner: rec.owner, Reason: reason(kind, "Leaked"),
				Message: fmt.Sprintf("%s is held by %s, which no listed Service names: it has leaked", what, rec.owner)})
			return true
		})
	}
}

// repairMissing is a repair's step 1: listed Services that only miss
// values get them, and their listed spec as their record.
func (s *state) repairMissing(rc *reconciliation, index uint64) {
	for i := range rc.listed {
		l := &rc.listed[i]
		key, owner := l.Namespace+"/"+l.Name, ServiceOwner(l.Namespace, l.Name)
		if rc.bad[key] {
			continue
		}
		if r := s.services[key]; r != nil && r.Revision > rc.fence {
			continue
		}
		plan, err := service.PlanWrite(rc.n.net, nil, *l)
		if err != nil || len(plan.Dynamic()) > 0 {
			continue
		}
		if len(rc.misses[key]) > 0 && s.freed > rc.fence {
			continue // they may be the values of a Service deleted after the caller listed it
		}
		for _, m := range rc.misses[key] {
			m.p.p.AllocateOffset(m.off) // missing: free
			m.p.take(m.off, owner, true, index)
			rc.out[m.finding].Repaired = true
		}
		if r := s.services[key]; r == nil || !reflect.DeepEqual(r.Spec, plan.Spec) {
			s.services[key] = &ServiceRecord{Spec: plan.Spec, Revision: index}
		}
	}
}

// dropLeakedRecords is a repair's step 2: it deletes the records of
// Services not listed, no newer than the fence, all of whose values that
// they still hold leaked.
func (s *state) dropLeakedRecords(rc *reconciliation) {
	for _, key := range s.serviceKeys() {
		r := s.services[key]
		if rc.isListed[key] || r.Revision > rc.fence {
			continue
		}
		all := true
		for _, h := range service.PlanDelete(r.Spec) {
			p := rc.n.poolOf(h.Kind, h.Family)
			if p == nil {
				continue
			}
			off, e := p.offset(h.Value)
			if e != nil || !p.p.HasOffset(off) || p.recs.get(off).owner != ServiceOwnerPrefix+key {
				continue // not held by this Service (a forced release took it): nothing to keep the record for
			}
			all = all && rc.leaked[valueAt{p, off}]
		}
		if all {
			delete(s.services, key)
		}
	}
}

// releaseLeaks is a repair's step 3: it releases each leak that its
// owner's record, if one is kept, does not name.
func (s *state) releaseLeaks(rc *reconciliation) {
	for _, lk := range rc.leaks {
		f := &rc.out[lk.finding]
		key := f.Owner[len(ServiceOwnerPrefix):]
		if r := s.services[key]; r != nil {
			if s.rules.repairByOffset && holds(r.Spec, lk.p, lk.off, lk.p == rc.n.ports) {
				continue
			}
			if !s.rules.repairByOffset && names(r.Spec, f.Value, lk.p == rc.n.ports) {
				continue
			}
		}
		lk.p.free(lk.off)
		f.Repaired = true
	}
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
