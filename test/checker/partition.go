package checker

import (
	"sort"

	"github.com/anishathalye/porcupine"
)

// valueKey names one value of one pool: one porcupine partition.
type valueKey struct{ pool, value string }

func (k valueKey) String() string { return k.pool + "/" + k.value }

// poolOwner names one owner in one pool.
type poolOwner struct{ pool, owner string }

// partitions holds the porcupine operations of each value.
type partitions map[valueKey][]porcupine.Operation

// partitionHistory turns a history into per-value porcupine operations.
// A history is linearizable only if each value's is (values are
// independent: an operation here touches one value), so checking each
// value alone loses nothing but the atomicity of a list across values.
//
// What each logical operation (see collapse) contributes:
//   - allocate, release: to its value's partition when its answer says
//     something about the value (OK, AlreadyAllocated, NotAllocated,
//     OwnerMismatch) or it is Unknown. Other failures (RangeFull,
//     NotInRange, NoLeader) applied nothing and are left out.
//   - dynamic allocate OK: an allocate of the value it returned.
//   - get OK (or Fail NotAllocated): a read of its value.
//   - list OK: a read of every value of its pool that any other operation
//     or list names (held if listed, else free).
//   - dynamic allocate Unknown: its value is unknown, but its owner is
//     unique to it, so an answer that shows the owner holding a value (a
//     get or list, an AlreadyAllocated or OwnerMismatch naming the holder,
//     a release OK with the owner as precondition) says which value it
//     took: it joins those partitions only, as an unknown allocate.
//   - dynamic allocate Unknown that no answer shows holding anything (an
//     unseen allocate): it may still have taken a value and explain an
//     answer that names no holder, of a value otherwise free. Leaving it
//     out would call a correct history illegal; adding it to every
//     partition as an operation that never returns makes porcupine's
//     search exponential in their number. Instead, an answer that names
//     no holder and returned after the earliest unseen allocate of its
//     pool was called is marked unseenBefore, and the model lets it find
//     the value held by an unseen owner (see model). That can hide a
//     violation (it does not count the unseen allocates, nor which one
//     was called when) but never invents one.
func partitionHistory(h History) partitions {
	ls := collapse(h)
	holds := observedHolds(ls)
	p := partitions{}
	unseen := map[string]*unseenAllocates{}
	var rest, lists []logical
	for _, l := range ls {
		po := poolOwner{l.Pool, l.Owner}
		switch {
		case l.Kind == KindAllocate && l.Outcome == Unknown && l.value() == "" && len(holds[po]) > 0:
			for _, v := range sortedKeys(holds[po]) {
				p.add(valueKey{l.Pool, v}, l, input{kind: KindAllocate, owner: l.Owner}, output{unknown: true})
			}
		case l.Kind == KindAllocate && l.Outcome == Unknown && l.value() == "":
			if unseen[l.Pool] == nil {
				unseen[l.Pool] = &unseenAllocates{since: never, owners: map[string]bool{}}
			}
			unseen[l.Pool].since = min(unseen[l.Pool].since, l.Call)
			unseen[l.Pool].owners[l.Owner] = true
		case l.Kind == KindList && l.Outcome == OK:
			lists = append(lists, l)
		default:
			rest = append(rest, l)
		}
	}
	for _, l := range rest {
		p.addOp(l, unseen[l.Pool])
	}
	p.addLists(lists)
	return p
}

// unseenAllocates sums up the unseen allocates of one pool.
type unseenAllocates struct {
	since  int64           // the earliest call
	owners map[string]bool // their owners
}

func (p partitions) add(k valueKey, l logical, in input, out output) {
	p[k] = append(p[k], porcupine.Operation{
		ClientId: l.Client, Input: in, Output: out, Call: l.Call, Return: l.Return,
		Metadata: opInfo{key: k, desc: l.String()},
	})
}

// addOp adds an operation on a named value, if it says anything about
// it; u is its pool's unseen allocates, if any.
func (p partitions) addOp(l logical, u *unseenAllocates) {
	k := valueKey{l.Pool, l.value()}
	if k.value == "" {
		return
	}
	out := output{unknown: l.Outcome == Unknown, ok: l.Outcome == OK, err: l.Err}
	if l.Outcome == Fail {
		out.holder = l.Result
	}
	in := input{kind: l.Kind, owner: l.Owner}
	if u != nil {
		in.unseenBefore = namesNoHolder(in, out) && l.Return >= u.since
		in.unseenOwner = l.Kind == KindRelease && u.owners[l.Owner]
	}
	switch l.Kind {
	case KindAllocate:
		if out.unknown || out.ok || l.Err == CodeAlreadyAllocated {
			p.add(k, l, in, out)
		}
	case KindRelease:
		if out.unknown || out.ok || l.Err == CodeNotAllocated || l.Err == CodeOwnerMismatch {
			p.add(k, l, in, out)
		}
	case KindGet:
		switch {
		case out.ok:
			p.add(k, l, input{kind: KindGet}, output{ok: true, holder: l.Result})
		case l.Outcome == Fail && l.Err == CodeNotAllocated:
			p.add(k, l, input{kind: KindGet}, output{ok: true})
		}
	}
}

// namesNoHolder reports whether an answer shows its value held without
// saying by whom: AlreadyAllocated or OwnerMismatch reporting no holder,
// or an unconditional release OK.
func namesNoHolder(in input, out output) bool {
	switch {
	case out.unknown:
		return false
	case in.kind == KindAllocate:
		return out.err == CodeAlreadyAllocated && out.holder == ""
	case in.kind == KindRelease && out.ok:
		return in.owner == ""
	case in.kind == KindRelease:
		return out.err == CodeOwnerMismatch && out.holder == ""
	}
	return false
}

// addLists adds each list as a read of every value of its pool that the
// partitions or any list name.
func (p partitions) addLists(lists []logical) {
	for _, l := range lists {
		for v := range l.Listed {
			if _, ok := p[valueKey{l.Pool, v}]; !ok {
				p[valueKey{l.Pool, v}] = nil
			}
		}
	}
	known := map[string][]string{} // pool -> its values, in order
	for _, k := range p.keys() {
		known[k.pool] = append(known[k.pool], k.value)
	}
	for _, l := range lists {
		for _, v := range known[l.Pool] {
			p.add(valueKey{l.Pool, v}, l, input{kind: KindList}, output{ok: true, holder: l.Listed[v]})
		}
	}
}

// observedHolds returns, per pool and owner, the values that answers show
// the owner holding.
func observedHolds(ls []logical) map[poolOwner]map[string]bool {
	holds := map[poolOwner]map[string]bool{}
	see := func(pool, owner, value string) { seeHeld(holds, pool, owner, value) }
	for _, l := range ls {
		switch {
		case l.Outcome == OK && l.Kind == KindGet:
			see(l.Pool, l.Result, l.Value)
		case l.Outcome == OK && l.Kind == KindList:
			for v, o := range l.Listed {
				see(l.Pool, o, v)
			}
		case l.Outcome == OK && l.Kind == KindRelease:
			see(l.Pool, l.Owner, l.Value)
		case l.Outcome == Fail && (l.Err == CodeAlreadyAllocated || l.Err == CodeOwnerMismatch):
			see(l.Pool, l.Result, l.Value)
		}
	}
	return holds
}

// seeHeld records that owner held value in pool; an empty owner or value
// says nothing.
func seeHeld(holds map[poolOwner]map[string]bool, pool, owner, value string) {
	if owner == "" || value == "" {
		return
	}
	k := poolOwner{pool, owner}
	if holds[k] == nil {
		holds[k] = map[string]bool{}
	}
	holds[k][value] = true
}

// keys returns the partitions' keys in order.
func (p partitions) keys() []valueKey { return sortedValueKeys(p) }

func sortedValueKeys[V any](m map[valueKey]V) []valueKey {
	keys := make([]valueKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pool != keys[j].pool {
			return keys[i].pool < keys[j].pool
		}
		return keys[i].value < keys[j].value
	})
	return keys
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
