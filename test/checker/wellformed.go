package checker

import (
	"fmt"
	"strings"
)

// CheckWellFormed checks that the history is one the other checkers can
// read, and keeps the workload conventions they rely on: a known kind and
// outcome, a pool, Return not before Call, the fields each kind needs,
// retries only of keyed writes, one request per key, one allocate per
// owner. A malformed history makes the other checkers' verdicts
// meaningless (an op of an unknown kind is silently ignored, a reused
// owner confuses every owner-based rule), so a test should check this
// first. Checked counts ops.
func CheckWellFormed(h History) Report {
	r := newReporter("well formed")
	r.Checked = len(h)
	firstOfKey := map[string]Op{}
	allocatesOf := map[string][]string{} // owner -> keys of its allocates ("" for an unkeyed one)
	for i, op := range h {
		if msg := malformed(op); msg != "" {
			r.problem("op %d (%s): %s", i+1, logical{Op: op}, msg)
		}
		if op.Key == "" {
			if op.Kind == KindAllocate {
				allocatesOf[op.Owner] = append(allocatesOf[op.Owner], "")
			}
			continue
		}
		first, seen := firstOfKey[op.Key]
		switch {
		case !seen:
			firstOfKey[op.Key] = op
			if op.Kind == KindAllocate {
				allocatesOf[op.Owner] = append(allocatesOf[op.Owner], op.Key)
			}
		case !sameRequest(op, first):
			r.problem("op %d (%s): key %q already names another request: %s", i+1, logical{Op: op}, op.Key, logical{Op: first})
		}
	}
	for _, owner := range sortedKeys(allocatesOf) {
		if keys := allocatesOf[owner]; len(keys) > 1 {
			r.problem("owner %q is used by %d allocates (keys %q); the checkers assume one allocate per owner", owner, len(keys), keys)
		}
	}
	return r.done()
}

// malformed says what is wrong with one op, or "".
func malformed(op Op) string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if !op.Outcome.valid() {
		add("invalid outcome %d", int(op.Outcome))
	}
	if op.Pool == "" {
		add("no pool")
	}
	if op.Return < op.Call {
		add("returns (%d) before its call (%d)", op.Return, op.Call)
	}
	if op.Outcome == Fail && op.Err == "" {
		add("a failure without an error code")
	}
	if op.Attempt > 0 && op.Key == "" {
		add("attempt %d without a key: only a keyed write is retried", op.Attempt)
	}
	switch op.Kind {
	case KindAllocate:
		switch {
		case op.Owner == "":
			add("an allocate without an owner")
		case op.Outcome == OK && op.Value == "" && op.Result == "":
			add("a dynamic allocate answered OK without its value")
		case op.Outcome == OK && op.Value != "" && op.Result != "" && op.Result != op.Value:
			add("a static allocate of %q answered with %q", op.Value, op.Result)
		}
	case KindRelease:
		if op.Value == "" {
			add("a release without a value")
		}
	case KindGet, KindList:
		if op.Kind == KindGet && op.Value == "" {
			add("a get without a value")
		}
		if op.Key != "" {
			add("a read with an idempotency key: its attempts would merge as one write's")
		}
	default:
		add("unknown kind %q", op.Kind)
	}
	return strings.Join(bad, "; ")
}
