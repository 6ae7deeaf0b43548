package checker

import (
	"fmt"
	"sort"
)

// allocations indexes the logical operations by value: the acknowledged
// allocations (sorted by call) and the releases that may have taken
// effect (OK or Unknown).
func allocations(ls []logical) (acks, releases map[valueKey][]logical) {
	acks, releases = map[valueKey][]logical{}, map[valueKey][]logical{}
	for _, l := range ls {
		k := valueKey{l.Pool, l.value()}
		switch {
		case l.Kind == KindAllocate && l.Outcome == OK && k.value != "":
			acks[k] = append(acks[k], l)
		case l.Kind == KindRelease && (l.Outcome == OK || l.Outcome == Unknown):
			releases[k] = append(releases[k], l)
		}
	}
	for _, as := range acks {
		sort.SliceStable(as, func(i, j int) bool { return as[i].Call < as[j].Call })
	}
	return acks, releases
}

// earliestFree returns the earliest time at which one of releases could
// take effect after allocation a and free it, or never if none could: a
// release that may have applied, whose precondition a's owner meets, and
// that had not returned before a was called.
func earliestFree(a logical, releases []logical) int64 {
	t := int64(never)
	for _, r := range releases {
		if r.frees(a.Owner) && r.Return >= a.Call {
			t = min(t, max(r.Call, a.Call))
		}
	}
	return t
}

// CheckNoDoubleOwner checks that no value was held by two owners at once,
// as far as acknowledged allocations prove it: two OK allocations of one
// value by different owners are a double owner unless, in one of the two
// orders their intervals allow, a release that may have applied (OK or
// Unknown) and whose precondition the first owner meets could fall
// between them. It reads nothing but allocations and releases, so it
// holds for histories too long or too concurrent for porcupine. Checked
// counts acknowledged allocations.
func CheckNoDoubleOwner(h History) Report {
	r := newReporter("no double owner")
	acks, releases := allocations(collapse(h))
	for _, k := range sortedValueKeys(acks) {
		as := acks[k]
		r.Checked += len(as)
		free := make([]int64, len(as)) // free[i]: earliest a release could free as[i]
		for i, a := range as {
			free[i] = earliestFree(a, releases[k])
		}
		for i, x := range as {
			for j := i + 1; j < len(as); j++ {
				y := as[j]
				if x.Owner == y.Owner || free[i] <= y.Return || free[j] <= x.Return {
					continue
				}
				r.problem("%s acknowledged to two owners with no release that could come between: %s; and %s", k, x, y)
			}
		}
	}
	return r.done()
}

// CheckNoLostAck checks that every acknowledged allocation that no
// release could have freed (an OK or Unknown release, whose precondition
// its owner meets, not over before the allocation began) is in the final
// state (pool -> value -> owner) with its owner. Checked counts
// acknowledged allocations.
func CheckNoLostAck(h History, final map[string]map[string]string) Report {
	r := newReporter("no lost ack")
	acks, releases := allocations(collapse(h))
	for _, k := range sortedValueKeys(acks) {
		for _, a := range acks[k] {
			r.Checked++
			if earliestFree(a, releases[k]) != never {
				continue
			}
			switch holder, held := final[k.pool][k.value]; {
			case !held:
				r.problem("acknowledged allocation lost: %s; no release could have freed it, but %s is free in the final state", a, k)
			case holder != a.Owner:
				r.problem("acknowledged allocation lost: %s; no release could have freed it, but %s is held by %q in the final state", a, k, holder)
			}
		}
	}
	return r.done()
}

// CheckIdempotentRetries checks that one request took effect at most
// once, however often it was tried:
//
//   - the attempts of one key that got the state machine's answer (OK, or
//     a failure it decides, such as AlreadyAllocated) all got the same
//     answer, as a retry must return the first answer; and no retry of
//     the same request was refused with IdempotencyKeyReused (attempts
//     are taken in call order);
//   - the owner of a dynamic allocate was never seen holding two values:
//     in the attempts' answers, in the answers of reads and failures
//     (observedHolds) and, when final is not nil, in the final state
//     (pool -> value -> owner). Owners are unique to one allocate, which
//     takes one value, so two values mean the request was applied twice:
//     what a retry under a fresh request ID does, whether the client
//     retried (the first attempt's answer lost) or the node did on its
//     behalf (the client then sees one attempt, answered with the second
//     value, and the first value is held by an owner whose answer never
//     named it).
//
// Checked counts the keys with more than one attempt and the dynamic
// allocates whose owner was seen holding a value.
func CheckIdempotentRetries(h History, final map[string]map[string]string) Report {
	r := newReporter("idempotent retries")
	ls := collapse(h)
	held := observedHolds(ls)
	for pool, values := range final {
		for value, owner := range values {
			seeHeld(held, pool, owner, value)
		}
	}
	for _, l := range ls {
		retried := l.Key != "" && len(l.attempts) > 1
		if retried {
			r.Checked++
			compareAttempts(r, l)
		}
		if l.Kind != KindAllocate || l.Value != "" {
			continue
		}
		values := map[string]bool{}
		for v := range held[poolOwner{l.Pool, l.Owner}] {
			values[v] = true
		}
		for _, a := range l.attempts {
			if a.Outcome == OK && a.Result != "" {
				values[a.Result] = true
			}
		}
		if len(values) > 0 && !retried {
			r.Checked++
		}
		if len(values) > 1 {
			r.problem("%s: its owner was seen holding %q, but an allocate takes one value: the request was applied more than once (a retry under another request ID?)",
				l, sortedKeys(values))
		}
	}
	return r.done()
}

// compareAttempts reports the attempts of l's key that answered unlike the
// first answered one, and the retries refused as a reused key.
func compareAttempts(r *reporter, l logical) {
	var first *Op
	for i := range l.attempts {
		a := &l.attempts[i]
		switch {
		case a.Outcome == Fail && a.Err == CodeIdempotencyKeyReused && sameRequest(*a, l.attempts[0]):
			r.problem("key %q: attempt %d [%d,%d] was refused IdempotencyKeyReused, though it repeats the request of %s",
				a.Key, a.Attempt, a.Call, a.Return, l)
		case !answered(*a):
		case first == nil:
			first = a
		case answer(*a) != answer(*first):
			r.problem("key %q answered %s (attempt %d [%d,%d]), then %s (attempt %d [%d,%d]): %s", a.Key,
				answer(*first), first.Attempt, first.Call, first.Return, answer(*a), a.Attempt, a.Call, a.Return, l)
		}
	}
}

// answer describes an answered attempt's answer, for comparing.
func answer(a Op) string {
	switch {
	case a.Outcome == OK && a.Kind == KindAllocate && a.Result == "":
		return fmt.Sprintf("ok %q", a.Value)
	case a.Outcome == OK:
		return fmt.Sprintf("ok %q", a.Result)
	case a.Result != "":
		return fmt.Sprintf("%s (holder %q)", a.Err, a.Result)
	}
	return a.Err
}

// sameRequest reports whether two attempts ask the same thing.
func sameRequest(a, b Op) bool {
	return a.Kind == b.Kind && a.Pool == b.Pool && a.Value == b.Value && a.Owner == b.Owner
}
