package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// ServiceOwnerPrefix starts the owner of every value a Service holds:
// "services/<namespace>/<name>".
const ServiceOwnerPrefix = "services/"

// HoldsValue spells one value a Service names, as Op.Holds and
// ServiceState.Services do: "<pool>=<value>".
func HoldsValue(pool, value string) string { return pool + "=" + value }

// splitHolds is HoldsValue's inverse.
func splitHolds(h string) (pool, value string) {
	pool, value, _ = strings.Cut(h, "=")
	return pool, value
}

// ServiceState is what one node holds at the end of a run: its Service
// records and its pools.
type ServiceState struct {
	Node string // the node read, e.g. "n1", or "leader" for the linearizable read
	// Services maps "<namespace>/<name>" to the values its record names
	// (clusterIPs, nodePorts, healthCheckNodePort), each HoldsValue,
	// sorted and without repeats.
	Services map[string][]string
	// Revisions maps "<namespace>/<name>" to its record's revision: the
	// log index of the write that last changed it.
	Revisions map[string]uint64
	// Pools maps pool -> value -> owner for every held value.
	Pools map[string]map[string]string
}

// IsServiceKind reports whether kind is a Service write.
func IsServiceKind(kind string) bool {
	return kind == KindServiceCreate || kind == KindServiceUpdate || kind == KindServiceDelete
}

// CheckServiceState checks that a node's Services and pools agree:
//
//   - no value is named by the records of two Services;
//   - every value a record names is held in its pool by the Service's
//     owner, services/<namespace>/<name>;
//   - no value is orphaned: every value held by an owner services/X is
//     named by the record of Service X, which exists.
//
// Checked counts the values judged: those records name, and those held
// by a Service owner.
func CheckServiceState(s ServiceState) Report {
	r := newReporter("services hold their values")
	namedBy := map[string]string{} // HoldsValue -> the first Service naming it
	for _, svc := range sortedKeys(s.Services) {
		for _, hv := range s.Services[svc] {
			r.Checked++
			pool, value := splitHolds(hv)
			if other, dup := namedBy[hv]; dup && other != svc {
				r.problem("%s: %s %s is named by two Services: %s and %s", s.Node, pool, value, other, svc)
			} else {
				namedBy[hv] = svc
			}
			owner, held := s.Pools[pool][value]
			switch want := ServiceOwnerPrefix + svc; {
			case !held:
				r.problem("%s: Service %s names %s %s, which is free in the pool", s.Node, svc, pool, value)
			case owner != want:
				r.problem("%s: Service %s names %s %s, which the pool holds for %q, not %q", s.Node, svc, pool, value, owner, want)
			}
		}
	}
	for _, pool := range sortedKeys(s.Pools) {
		for _, value := range sortedKeys(s.Pools[pool]) {
			owner := s.Pools[pool][value]
			svc, ok := strings.CutPrefix(owner, ServiceOwnerPrefix)
			if !ok {
				continue
			}
			r.Checked++
			names, exists := s.Services[svc]
			switch {
			case !exists:
				r.problem("%s: orphan: %s %s is held by %q, but there is no Service %s", s.Node, pool, value, owner, svc)
			case !slices.Contains(names, HoldsValue(pool, value)):
				r.problem("%s: orphan: %s %s is held by %q, but Service %s names %v", s.Node, pool, value, owner, svc, names)
			}
		}
	}
	return r.done()
}

// CheckServiceReplicas checks that every state read (one per node, and
// the leader's linearizable read) has the same Services naming the same
// values, and the same owners in every pool. Checked counts the states
// compared with the first.
func CheckServiceReplicas(states []ServiceState) Report {
	r := newReporter("replicas agree on Services")
	if len(states) == 0 {
		return r.done()
	}
	ref := states[0]
	for _, s := range states[1:] {
		r.Checked++
		for _, svc := range unionKeys(ref.Services, s.Services) {
			a, inA := ref.Services[svc]
			b, inB := s.Services[svc]
			if inA != inB || !slices.Equal(a, b) {
				r.problem("Service %s: %s has %s, %s has %s", svc, ref.Node, describeRecord(a, inA), s.Node, describeRecord(b, inB))
			}
			if ra, rb := ref.Revisions[svc], s.Revisions[svc]; ra != rb {
				r.problem("Service %s: %s has its record at revision %d, %s at %d", svc, ref.Node, ra, s.Node, rb)
			}
		}
		for _, pool := range unionKeys(ref.Pools, s.Pools) {
			for _, value := range unionKeys(ref.Pools[pool], s.Pools[pool]) {
				a, b := ref.Pools[pool][value], s.Pools[pool][value]
				if a != b {
					r.problem("%s %s: %s has owner %q, %s has %q (\"\": free)", pool, value, ref.Node, a, s.Node, b)
				}
			}
		}
	}
	return r.done()
}

func describeRecord(values []string, exists bool) string {
	if !exists {
		return "no record"
	}
	return fmt.Sprintf("a record naming %v", values)
}

func unionKeys[V any](a, b map[string]V) []string {
	keys := sortedKeys(a)
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// CheckServiceAcks checks the acknowledged Service writes of h against
// the final state, where the final state is decided by one of them. A
// write decides a Service's final state when it was answered (a PUT
// acknowledged; a DELETE acknowledged or answered ServiceNotFound) and
// every other write of the Service either applied nothing (a definite
// failure) or returned before it began: no other write can have come
// after it. The Service must then exist naming exactly the values the PUT
// answered, or be absent after the DELETE. A write whose outcome is
// unknown may be applied at any time after its call, so a Service with
// one is not judged, nor one whose last writes overlap.
//
// A Service in the final state is also judged by its record's revision,
// whatever the other writes' outcomes: revisions are log indexes, so no
// acknowledged PUT of it may have answered a later revision than the
// record's (that write was lost), and the PUTs that answered the
// record's revision (one log entry may hold several) include the one
// that stored it, which names the same values.
//
// It also checks that every acknowledged attempt of one key got the same
// answer (values and revision): a retry answered from the idempotency
// record, not applied twice. Checked counts the Services judged.
func CheckServiceAcks(h History, final ServiceState) Report {
	r := newReporter("acknowledged Service writes")
	bySvc := map[string][]logical{}
	for _, l := range collapse(serviceWrites(h)) {
		bySvc[l.Service] = append(bySvc[l.Service], l)
		checkServiceRetries(r, l)
	}
	for _, svc := range sortedKeys(bySvc) {
		ls := bySvc[svc]
		byRevision := checkRecordRevision(r, svc, ls, final)
		i := slices.IndexFunc(ls, func(l logical) bool { return decides(l, ls) })
		if i < 0 {
			if byRevision {
				r.Checked++
			}
			continue
		}
		r.Checked++
		l := ls[i]
		got, exists := final.Services[svc]
		switch {
		case l.Kind == KindServiceDelete && exists:
			r.problem("Service %s: its last write, %s, deleted it, but %s has a record naming %v", svc, serviceString(l), final.Node, got)
		case l.Kind != KindServiceDelete && !exists:
			r.problem("Service %s: its last write, %s, stored it, but %s has no record of it", svc, serviceString(l), final.Node)
		case l.Kind != KindServiceDelete && !slices.Equal(got, l.Holds):
			r.problem("Service %s: its last write, %s, answered %v, but %s's record names %v", svc, serviceString(l), l.Holds, final.Node, got)
		}
	}
	return r.done()
}

// checkRecordRevision judges svc's final record by its revision against
// the acknowledged PUTs ls of it, and reports whether any PUT concerned
// it. A node may apply several writes in one log entry, so several PUTs
// of one Service may answer the same revision: the record is then the
// last of them, and names what one of them answered.
func checkRecordRevision(r *reporter, svc string, ls []logical, final ServiceState) bool {
	rev, exists := final.Revisions[svc]
	if !exists || rev == 0 {
		return false
	}
	got := final.Services[svc]
	var same []logical // the acknowledged PUTs that answered rev
	judged := false
	for _, l := range ls {
		if l.Kind == KindServiceDelete || l.Outcome != OK {
			continue
		}
		switch {
		case l.Revision > rev:
			judged = true
			r.problem("Service %s: %s, but %s's record is at revision %d: the write was lost", svc, serviceString(l), final.Node, rev)
		case l.Revision == rev:
			same = append(same, l)
		}
	}
	if len(same) == 0 {
		return judged
	}
	if !slices.ContainsFunc(same, func(l logical) bool { return slices.Equal(got, l.Holds) }) {
		var ws []string
		for _, l := range same {
			ws = append(ws, serviceString(l))
		}
		r.problem("Service %s: %s's record at revision %d names %v, but the writes that answered that revision answered otherwise: %s",
			svc, final.Node, rev, got, strings.Join(ws, "; "))
	}
	return true
}

// serviceWrites returns the Service writes of h.
func serviceWrites(h History) History {
	var out History
	for _, op := range h {
		if IsServiceKind(op.Kind) {
			out = append(out, op)
		}
	}
	return out
}

// decides reports whether l decides its Service's final state among the
// writes ls of that Service (see CheckServiceAcks).
func decides(l logical, ls []logical) bool {
	answered := l.Outcome == OK || l.Kind == KindServiceDelete && l.Err == CodeServiceNotFound
	if !answered {
		return false
	}
	for _, o := range ls {
		if o.Key == l.Key || o.Outcome == Fail {
			continue
		}
		if o.Return >= l.Call { // unknown (never returns), or concurrent with l, or after it
			return false
		}
	}
	return true
}

// checkServiceRetries reports the acknowledged attempts of l that got
// another answer than the first.
func checkServiceRetries(r *reporter, l logical) {
	var first *Op
	for i := range l.attempts {
		a := &l.attempts[i]
		if a.Outcome != OK {
			continue
		}
		if first == nil {
			first = a
			continue
		}
		if !slices.Equal(a.Holds, first.Holds) || a.Revision != first.Revision || a.Result != first.Result {
			r.problem("Service %s: key %q answered %s %v at revision %d on attempt %d, then %s %v at revision %d on attempt %d",
				l.Service, l.Key, first.Result, first.Holds, first.Revision, first.Attempt, a.Result, a.Holds, a.Revision, a.Attempt)
		}
	}
}

// serviceString names a Service write for a report.
func serviceString(l logical) string {
	ret := "…"
	if l.Return != never {
		ret = fmt.Sprint(l.Return)
	}
	s := fmt.Sprintf("%s key=%q client %d [%d,%s]", l.Kind, l.Key, l.Client, l.Call, ret)
	if n := len(l.attempts); n > 1 {
		s += fmt.Sprintf(" in %d attempts", n)
	}
	switch l.Outcome {
	case Fail:
		return s + " -> " + l.Err
	case Unknown:
		return s + " -> unknown"
	}
	if l.Kind == KindServiceDelete {
		return s + fmt.Sprintf(" -> ok, released %v", l.Holds)
	}
	return s + fmt.Sprintf(" -> ok, %s holding %v at revision %d", l.Result, l.Holds, l.Revision)
}

// ServiceCounts tallies the logical Service writes of h by kind and
// outcome, e.g. "service-create ok", and the domain failures by code,
// e.g. "service-update Invalid".
func ServiceCounts(h History) map[string]int {
	c := map[string]int{}
	for _, l := range collapse(serviceWrites(h)) {
		c[l.Kind+" "+l.Outcome.String()]++
		if l.Outcome == Fail {
			c[l.Kind+" "+l.Err]++
		}
	}
	return c
}
