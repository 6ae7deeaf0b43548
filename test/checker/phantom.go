package checker

import "fmt"

// CheckNoPhantom checks that every allocation in the final state (pool ->
// value -> owner) is explained by the history. Owners are unique to one
// allocate, so value v held by owner o is explained by an allocate of o
// that was acknowledged with v or named v and is Unknown; or, failing
// that, by one of o's dynamic allocates whose outcome is unknown, each of
// which explains one value. It is a phantom otherwise: a retry applied
// twice, a failed write applied anyway, a write nobody made. And it is
// resurrected if a release OK with o as its precondition freed v: only
// o's one allocate could have given it v, and that came before. Checked
// counts the final state's allocations.
func CheckNoPhantom(h History, final map[string]map[string]string) Report {
	r := newReporter("no phantom")
	named := map[poolOwner]map[string]bool{} // values an owner's allocates name
	wild := map[poolOwner]int{}              // an owner's unknown dynamic allocates
	freed := map[valueKey]map[string]logical{}
	for _, l := range collapse(h) {
		po, k := poolOwner{l.Pool, l.Owner}, valueKey{l.Pool, l.value()}
		switch {
		case l.Kind == KindAllocate && l.Outcome == Unknown && k.value == "":
			wild[po]++
		case l.Kind == KindAllocate && l.Outcome != Fail:
			if named[po] == nil {
				named[po] = map[string]bool{}
			}
			named[po][k.value] = true
		case l.Kind == KindRelease && l.Outcome == OK && l.Owner != "":
			if freed[k] == nil {
				freed[k] = map[string]logical{}
			}
			freed[k][l.Owner] = l
		}
	}
	for _, pool := range sortedKeys(final) {
		for _, value := range sortedKeys(final[pool]) {
			r.Checked++
			k, owner := valueKey{pool, value}, final[pool][value]
			po := poolOwner{pool, owner}
			switch rel, ok := freed[k][owner]; {
			case ok:
				r.problem("%s is held by %q in the final state, but %s freed it, and only that owner's one allocate gives it to %q",
					k, owner, rel, owner)
			case named[po][value]:
			case wild[po] > 0:
				wild[po]--
			default:
				r.problem("%s is held by %q in the final state, which no allocation in the history explains%s", k, owner, others(named[po]))
			}
		}
	}
	return r.done()
}

// others describes the values an owner's allocates did name.
func others(values map[string]bool) string {
	if len(values) == 0 {
		return ""
	}
	return fmt.Sprintf(" (that owner's allocations name %q)", sortedKeys(values))
}
