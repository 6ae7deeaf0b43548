package checker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// Outcome is what became of an operation.
type Outcome int

// Outcomes.
const (
	OK      Outcome = iota // acknowledged
	Fail                   // definite failure: nothing was applied
	Unknown                // may or may not have been applied
)

func (o Outcome) String() string {
	return [...]string{"ok", "fail", "unknown"}[o]
}

// MarshalText writes the outcome's name.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText reads an outcome's name.
func (o *Outcome) UnmarshalText(b []byte) error {
	switch string(b) {
	case "ok":
		*o = OK
	case "fail":
		*o = Fail
	case "unknown":
		*o = Unknown
	default:
		return fmt.Errorf("unknown outcome %q", b)
	}
	return nil
}

// Op is one attempt of one operation.
type Op struct {
	Client int    `json:"client"`
	Kind   string `json:"kind"` // "allocate", "release", "get", "list"
	Pool   string `json:"pool"`
	// Value is the value asked for: static allocate, release, get; "" for a
	// dynamic allocate.
	Value string `json:"value,omitempty"`
	// Owner is the owner an allocate records, or a release's precondition.
	Owner   string  `json:"owner,omitempty"`
	Key     string  `json:"key,omitempty"` // idempotency key of a write
	Call    int64   `json:"call"`          // monotonic nanoseconds
	Return  int64   `json:"return"`
	Outcome Outcome `json:"outcome"`
	Err     string  `json:"err,omitempty"` // error code of a failure
	// Result is the allocated value (allocate), the holder seen (get: "" for
	// free), or the current holder a failure reported (AlreadyAllocated,
	// OwnerMismatch), when known.
	Result  string            `json:"result,omitempty"`
	Listed  map[string]string `json:"listed,omitempty"` // list: value -> owner
	Attempt int               `json:"attempt,omitempty"`
}

// History is a recorded run.
type History []Op

// WriteJSONL writes one operation per line.
func (h History) WriteJSONL(w io.Writer) error {
	enc := json.NewEncoder(w)
	for _, op := range h {
		if err := enc.Encode(op); err != nil {
			return err
		}
	}
	return nil
}

// ReadJSONL reads what WriteJSONL wrote.
func ReadJSONL(r io.Reader) (History, error) {
	var h History
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for n := 1; sc.Scan(); n++ {
		var op Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return nil, fmt.Errorf("history line %d: %w", n, err)
		}
		h = append(h, op)
	}
	return h, sc.Err()
}

// never is the Return of an operation that may take effect any time after
// its call.
const never = math.MaxInt64

// logical is one operation after its attempts are merged.
type logical struct {
	Op
	attempts []Op
}

// domainCodes are the failures the state machine decides; they are
// remembered under the request's key like a success. Other failures (no
// leader) say only that this attempt was not applied.
var domainCodes = map[string]bool{"AlreadyAllocated": true, "NotAllocated": true, "OwnerMismatch": true,
	"RangeFull": true, "NotInRange": true, "InvalidArgument": true, "PoolNotFound": true, "IdempotencyKeyReused": true}

// answered reports whether an attempt got the state machine's answer.
func answered(a Op) bool { return a.Outcome == OK || a.Outcome == Fail && domainCodes[a.Err] }

// collapse merges the attempts of each key into one logical operation
// spanning from the first call to the last return. Its outcome is the
// first answered attempt's (OK, or a failure the state machine decided: a
// retry returns the first answer), else Unknown if any attempt was, else
// Fail (no attempt was applied). An Unknown operation gets Return = never.
// Operations without a key stand alone.
func collapse(h History) []logical {
	var out []logical
	byKey := map[string]int{}
	for _, op := range h {
		if op.Key == "" {
			out = append(out, logical{Op: op, attempts: []Op{op}})
			continue
		}
		i, ok := byKey[op.Key]
		if !ok {
			byKey[op.Key] = len(out)
			out = append(out, logical{Op: op, attempts: []Op{op}})
			continue
		}
		out[i].attempts = append(out[i].attempts, op)
	}
	for i := range out {
		l := &out[i]
		first := l.attempts[0]
		l.Op = first
		l.Call = first.Call
		var ans *Op
		unknown := false
		for j := range l.attempts {
			a := &l.attempts[j]
			l.Call = min(l.Call, a.Call)
			l.Return = max(l.Return, a.Return)
			switch {
			case answered(*a) && ans == nil:
				ans = a
			case a.Outcome == Unknown:
				unknown = true
			}
		}
		switch {
		case ans != nil:
			l.Outcome, l.Err, l.Result, l.Listed = ans.Outcome, ans.Err, ans.Result, ans.Listed
		case unknown:
			l.Outcome, l.Return = Unknown, never
		default:
			last := l.attempts[len(l.attempts)-1]
			l.Outcome, l.Err, l.Result = Fail, last.Err, last.Result
		}
	}
	return out
}
