package checker

import (
	"fmt"
	"sort"
)

// Report is a checker's verdict, with the problems it found, each naming
// the operations involved.
type Report struct {
	OK       bool
	Problems []string
}

func (r *Report) problem(format string, args ...any) {
	r.OK = false
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

func describe(l logical) string {
	ret := "?"
	if l.Return != never {
		ret = fmt.Sprint(l.Return)
	}
	return fmt.Sprintf("%s %s/%s owner=%q key=%q [%d,%s] %s", l.Kind, l.Pool, l.Value, l.Owner, l.Key, l.Call, ret, l.Outcome)
}

// allocations returns the acknowledged allocations and the releases that
// may have taken effect, per "pool/value".
func allocations(h History) (acks, releases map[string][]logical) {
	acks, releases = map[string][]logical{}, map[string][]logical{}
	for _, l := range collapse(h) {
		switch {
		case l.Kind == "allocate" && l.Outcome == OK:
			v := l.Value
			if v == "" {
				v = l.Result
			}
			l.Value = v
			acks[l.Pool+"/"+v] = append(acks[l.Pool+"/"+v], l)
		case l.Kind == "release" && (l.Outcome == OK || l.Outcome == Unknown):
			releases[l.Pool+"/"+l.Value] = append(releases[l.Pool+"/"+l.Value], l)
		}
	}
	return acks, releases
}

// mayFree reports whether release r could have freed the allocation a
// before time t: it could act on a's owner and overlaps (a.Call, t).
func mayFree(r, a logical, t int64) bool {
	return (r.Owner == "" || r.Owner == a.Owner) && r.Call < t && r.Return > a.Call
}

// CheckNoDoubleOwner checks that no value was acknowledged to two owners
// without a release between them that could have freed the first.
func CheckNoDoubleOwner(h History) Report {
	rep := Report{OK: true}
	acks, releases := allocations(h)
	for _, key := range sortedKeys(acks) {
		as := acks[key]
		sort.Slice(as, func(i, j int) bool { return as[i].Call < as[j].Call })
		for i := 1; i < len(as); i++ {
			prev, next := as[i-1], as[i]
			freed := false
			for _, r := range releases[key] {
				freed = freed || mayFree(r, prev, next.Return)
			}
			if !freed {
				rep.problem("%s held twice, with no release between: %s, then %s", key, describe(prev), describe(next))
			}
		}
	}
	return rep
}

// CheckNoLostAck checks that every acknowledged allocation that no release
// could have freed is in the final state (pool -> value -> owner) with its
// owner.
func CheckNoLostAck(h History, final map[string]map[string]string) Report {
	rep := Report{OK: true}
	acks, releases := allocations(h)
	for _, key := range sortedKeys(acks) {
		for _, a := range acks[key] {
			freed := false
			for _, r := range releases[key] {
				freed = freed || mayFree(r, a, never)
			}
			if freed {
				continue
			}
			if got, ok := final[a.Pool][a.Value]; !ok || got != a.Owner {
				rep.problem("acknowledged allocation lost: %s; final holder %q", describe(a), got)
			}
		}
	}
	return rep
}

// CheckIdempotentRetries checks that every attempt of a key that got the
// state machine's answer got the same one.
func CheckIdempotentRetries(h History) Report {
	rep := Report{OK: true}
	first := map[string]Op{}
	for _, op := range h {
		if op.Key == "" || !answered(op) {
			continue
		}
		f, ok := first[op.Key]
		if !ok {
			first[op.Key] = op
			continue
		}
		if f.Outcome != op.Outcome || f.Err != op.Err || f.Result != op.Result {
			rep.problem("key %q answered %s %s %q, then %s %s %q (attempt %d)", op.Key, f.Outcome, f.Err, f.Result,
				op.Outcome, op.Err, op.Result, op.Attempt)
		}
	}
	return rep
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// CheckNoPhantom checks that every allocation in the final state (pool ->
// value -> owner) is explained by the history: an acknowledged allocation
// of that value by that owner, or one whose outcome is unknown. An owner
// whose only answer named another value holds a phantom: a retry applied
// twice, or a write nobody asked for.
func CheckNoPhantom(h History, final map[string]map[string]string) Report {
	rep := Report{OK: true}
	type claim struct{ pool, owner string }
	explained := map[claim]map[string]bool{} // the values an owner may hold; nil: any (unknown dynamic)
	for _, l := range collapse(h) {
		if l.Kind != "allocate" || l.Outcome == Fail {
			continue
		}
		c := claim{l.Pool, l.Owner}
		v := l.Value
		if v == "" {
			v = l.Result
		}
		if l.Outcome == Unknown && v == "" {
			explained[c] = nil
			continue
		}
		if vs, ok := explained[c]; ok && vs == nil {
			continue
		}
		if explained[c] == nil {
			explained[c] = map[string]bool{}
		}
		explained[c][v] = true
	}
	for _, pool := range sortedKeys(final) {
		for _, value := range sortedKeys(final[pool]) {
			owner := final[pool][value]
			vs, ok := explained[claim{pool, owner}]
			if !ok || (vs != nil && !vs[value]) {
				rep.problem("%s/%s is held by %q, which no allocation in the history explains", pool, value, owner)
			}
		}
	}
	return rep
}
