package checker

import (
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// valueInput is an operation on one value, as the model sees it.
type valueInput struct {
	kind    string // "allocate", "release", "get"
	owner   string // allocate: the new owner; release: the precondition ("" none)
	unknown bool
}

// valueOutput is what the operation answered.
type valueOutput struct {
	ok     bool
	err    string
	holder string // get: the holder seen ("" free); AlreadyAllocated, OwnerMismatch: the holder reported, if any
}

// model is the sequential specification of one value: free ("") or held
// by one owner. An operation with an unknown outcome has Return = never,
// so the checker may place it after everything else, where it changes
// nothing observed; placed earlier, it takes effect if it can.
var model = porcupine.Model{
	Init: func() interface{} { return "" },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		s, i, o := state.(string), in.(valueInput), out.(valueOutput)
		switch i.kind {
		case "allocate":
			switch {
			case i.unknown:
				if s == "" {
					return true, i.owner
				}
				return true, s
			case o.ok:
				return s == "", i.owner
			case o.err == "AlreadyAllocated":
				return s != "" && (o.holder == "" || s == o.holder), s
			}
		case "release":
			can := s != "" && (i.owner == "" || s == i.owner)
			switch {
			case i.unknown:
				if can {
					return true, ""
				}
				return true, s
			case o.ok:
				return can, ""
			case o.err == "NotAllocated":
				return s == "", s
			case o.err == "OwnerMismatch":
				return s != "" && s != i.owner && (o.holder == "" || s == o.holder), s
			}
		case "get":
			return o.ok && s == o.holder, s
		}
		return false, s
	},
	Equal: func(a, b interface{}) bool { return a == b },
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(valueInput), out.(valueOutput)
		switch {
		case i.unknown:
			return fmt.Sprintf("%s(%s) -> ?", i.kind, i.owner)
		case i.kind == "get":
			return fmt.Sprintf("get -> %q", o.holder)
		case o.ok:
			return fmt.Sprintf("%s(%s) -> ok", i.kind, i.owner)
		}
		return fmt.Sprintf("%s(%s) -> %s", i.kind, i.owner, o.err)
	},
	DescribeState: func(s interface{}) string {
		if s == "" {
			return "free"
		}
		return fmt.Sprintf("held by %s", s)
	},
}

// valueOps turns a history into per-value porcupine operations, keyed by
// "pool/value". Operations that say nothing about one value's state are
// left out: failures such as RangeFull, NotInRange or no leader. A dynamic
// allocation whose outcome is unknown may have taken any value of its
// pool, so it joins the partition of every value of that pool: it may take
// effect there if it can, or nowhere (its Return is never). This
// over-approximates what it could have done, which can hide a violation
// but never invent one.
func valueOps(h History) map[string][]porcupine.Operation {
	ops := collapse(h)
	out := map[string][]porcupine.Operation{}
	ghosts := map[string][]porcupine.Operation{} // pool -> unknown dynamic allocations
	pools := map[string]string{}                 // "pool/value" -> pool
	add := func(l logical, key string, in valueInput, o valueOutput) {
		out[key] = append(out[key], porcupine.Operation{ClientId: l.Client, Input: in, Output: o, Call: l.Call, Return: l.Return})
		pools[key] = l.Pool
	}
	for _, l := range ops {
		unknown := l.Outcome == Unknown
		o := valueOutput{ok: l.Outcome == OK, err: l.Err, holder: l.Result}
		switch l.Kind {
		case "allocate":
			value := l.Value
			if value == "" && l.Outcome == OK {
				value = l.Result
			}
			if value == "" && unknown {
				ghosts[l.Pool] = append(ghosts[l.Pool], porcupine.Operation{ClientId: l.Client,
					Input: valueInput{kind: "allocate", owner: l.Owner, unknown: true}, Output: o, Call: l.Call, Return: l.Return})
				continue
			}
			if value != "" && (unknown || o.ok || o.err == "AlreadyAllocated") {
				add(l, l.Pool+"/"+value, valueInput{kind: "allocate", owner: l.Owner, unknown: unknown}, o)
			}
		case "release":
			if unknown || o.ok || o.err == "NotAllocated" || o.err == "OwnerMismatch" {
				add(l, l.Pool+"/"+l.Value, valueInput{kind: "release", owner: l.Owner, unknown: unknown}, o)
			}
		case "get":
			if o.ok {
				add(l, l.Pool+"/"+l.Value, valueInput{kind: "get"}, o)
			}
		}
	}
	for key, pool := range pools {
		out[key] = append(out[key], ghosts[pool]...)
	}
	return out
}

// CheckLinearizable checks the history per value with porcupine. When it
// is not linearizable and visualizeTo is not empty, porcupine's HTML
// visualisation of the failing value is written there.
func CheckLinearizable(h History, timeout time.Duration, visualizeTo string) (porcupine.CheckResult, error) {
	perValue := valueOps(h)
	keys := make([]string, 0, len(perValue))
	for k := range perValue {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	result := porcupine.Ok
	for _, k := range keys {
		res, info := porcupine.CheckOperationsVerbose(model, perValue[k], timeout)
		if res == porcupine.Ok {
			continue
		}
		if result == porcupine.Ok || res == porcupine.Illegal {
			result = res
		}
		if res == porcupine.Illegal {
			if visualizeTo != "" {
				if err := porcupine.VisualizePath(model, info, visualizeTo); err != nil {
					return res, fmt.Errorf("value %s: %w", k, err)
				}
			}
			return res, fmt.Errorf("value %s is not linearizable", k)
		}
	}
	return result, nil
}
