package checker

import (
	"fmt"
	"math"
	"sort"
)

// never is the Return of an operation whose outcome is unknown: it may
// take effect at any time after its call, or not at all. This is
// porcupine's convention for a crashed client: an operation that never
// returns can always be linearized last, where it changes nothing anyone
// observed.
const never = math.MaxInt64

// logical is one operation after its attempts are merged: the attempts of
// one idempotency key are one request, so at most one of them took
// effect.
type logical struct {
	Op            // the first attempt's request, with the chosen answer and the merged interval
	attempts []Op // sorted by Call
}

// domainCodes are the failures the state machine decides and remembers
// under the request's key like a success, so a retry must repeat them.
// Any other failure (NoLeader, a timeout on a read) says only that this
// attempt was not applied. IdempotencyKeyReused is not among them: it
// answers a different request that reused the key, not this one.
var domainCodes = map[string]bool{
	CodeAlreadyAllocated: true, CodeNotAllocated: true, CodeOwnerMismatch: true,
	CodeRangeFull: true, CodeNotInRange: true, CodeInvalidArgument: true, CodePoolNotFound: true,
	CodeInvalid: true, CodeServiceNotFound: true,
}

// answered reports whether an attempt got the state machine's answer.
func answered(a Op) bool { return a.Outcome == OK || a.Outcome == Fail && domainCodes[a.Err] }

// collapse merges the attempts of each key into one logical operation
// spanning from the first attempt's Call to the last attempt's Return.
// Its answer is the first OK attempt's, else the first answered failure's
// (a retry returns the first answer, so these agree unless idempotency is
// broken, which CheckIdempotentRetries reports); with no answer it is
// Unknown if any attempt was (and its Return is never), else a Fail that
// applied nothing. Operations without a key stand alone. The result keeps
// the order of each key's first appearance in h.
func collapse(h History) []logical {
	var out []logical
	byKey := map[string]int{}
	for _, op := range h {
		i, seen := byKey[op.Key]
		if op.Key == "" || !seen {
			if op.Key != "" {
				byKey[op.Key] = len(out)
			}
			out = append(out, logical{attempts: []Op{op}})
			continue
		}
		out[i].attempts = append(out[i].attempts, op)
	}
	for i := range out {
		out[i].merge()
	}
	return out
}

// merge fills l.Op from l.attempts.
func (l *logical) merge() {
	sort.SliceStable(l.attempts, func(i, j int) bool { return l.attempts[i].Call < l.attempts[j].Call })
	l.Op = l.attempts[0]
	var ok, fail *Op
	unknown := false
	for j := range l.attempts {
		a := &l.attempts[j]
		l.Return = max(l.Return, a.Return)
		switch {
		case a.Outcome == OK:
			if ok == nil {
				ok = a
			}
		case answered(*a):
			if fail == nil {
				fail = a
			}
		case a.Outcome == Unknown:
			unknown = true
		}
	}
	ans := ok
	if ans == nil {
		ans = fail
	}
	switch {
	case ans != nil:
		l.Outcome, l.Err, l.Result, l.Listed = ans.Outcome, ans.Err, ans.Result, ans.Listed
		l.Holds, l.Revision = ans.Holds, ans.Revision
	case unknown:
		l.Outcome, l.Err, l.Result, l.Return = Unknown, "", "", never
		l.Holds, l.Revision = nil, 0
	default:
		last := l.attempts[len(l.attempts)-1]
		l.Outcome, l.Err, l.Result = Fail, last.Err, last.Result
		l.Holds, l.Revision = nil, 0
	}
}

// value is the value the operation concerns: for an allocate, the one
// asked for or else the one answered; "" for an unanswered dynamic
// allocate or a list.
func (l logical) value() string {
	if l.Kind == KindAllocate && l.Value == "" && l.Outcome == OK {
		return l.Result
	}
	return l.Value
}

// frees reports whether release r, if it took effect, could have freed a
// value held by owner.
func (r logical) frees(owner string) bool {
	return r.Kind == KindRelease && (r.Outcome == OK || r.Outcome == Unknown) && (r.Owner == "" || r.Owner == owner)
}

// String names the operation for a report: kind, pool/value, owner, key,
// client, interval, attempts and answer.
func (l logical) String() string {
	ret := "…"
	if l.Return != never {
		ret = fmt.Sprint(l.Return)
	}
	s := fmt.Sprintf("%s %s/%s", l.Kind, l.Pool, l.Value)
	if l.Owner != "" {
		s += fmt.Sprintf(" owner=%q", l.Owner)
	}
	if l.Key != "" {
		s += fmt.Sprintf(" key=%q", l.Key)
	}
	s += fmt.Sprintf(" client %d [%d,%s]", l.Client, l.Call, ret)
	if n := len(l.attempts); n > 1 {
		s += fmt.Sprintf(" in %d attempts", n)
	}
	switch {
	case l.Outcome == Fail:
		s += " -> " + l.Err
		if l.Result != "" {
			s += fmt.Sprintf(" (holder %q)", l.Result)
		}
	case l.Outcome == Unknown:
		s += " -> unknown"
	case l.Kind == KindList:
		s += fmt.Sprintf(" -> %v", l.Listed)
	case l.Kind == KindGet && l.Result == "":
		s += " -> free"
	case l.Kind == KindGet:
		s += fmt.Sprintf(" -> held by %q", l.Result)
	case l.Kind == KindAllocate:
		s += fmt.Sprintf(" -> ok %q", l.value())
	default:
		s += " -> ok"
	}
	return s
}
