package checker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Outcome is what became of one attempt of an operation.
type Outcome int

// Outcomes. The zero value is OK, so a recorder must set Outcome on every
// path; CheckWellFormed cannot tell a forgotten outcome from a success.
const (
	OK      Outcome = iota // acknowledged
	Fail                   // a definite failure: nothing was applied
	Unknown                // a timeout, 503 Unavailable, a broken connection: may or may not have been applied
)

var outcomeNames = [...]string{OK: "ok", Fail: "fail", Unknown: "unknown"}

func (o Outcome) valid() bool { return o >= OK && o <= Unknown }

func (o Outcome) String() string {
	if !o.valid() {
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
	return outcomeNames[o]
}

// MarshalText writes the outcome's name: "ok", "fail" or "unknown".
func (o Outcome) MarshalText() ([]byte, error) {
	if !o.valid() {
		return nil, fmt.Errorf("invalid outcome %d", int(o))
	}
	return []byte(o.String()), nil
}

// UnmarshalText reads an outcome's name.
func (o *Outcome) UnmarshalText(b []byte) error {
	for i, name := range outcomeNames {
		if string(b) == name {
			*o = Outcome(i)
			return nil
		}
	}
	return fmt.Errorf("unknown outcome %q", b)
}

// Operation kinds, the values of Op.Kind.
const (
	KindAllocate = "allocate"
	KindRelease  = "release"
	KindGet      = "get"
	KindList     = "list"

	// Service writes (services.go): a PUT the client meant as a create
	// or as an update (the server decides which it is), and a DELETE.
	KindServiceCreate = "service-create"
	KindServiceUpdate = "service-update"
	KindServiceDelete = "service-delete"
)

// Error codes the checkers interpret (Op.Err), as the API spells them.
// All but IdempotencyKeyReused are answers the state machine decides, which
// a retry of the key must repeat. Any other code on a Fail (NoLeader, a
// refused connection) means only that the attempt was not applied.
const (
	CodeAlreadyAllocated     = "AlreadyAllocated"
	CodeNotAllocated         = "NotAllocated"
	CodeOwnerMismatch        = "OwnerMismatch"
	CodeRangeFull            = "RangeFull"
	CodeNotInRange           = "NotInRange"
	CodeInvalidArgument      = "InvalidArgument"
	CodePoolNotFound         = "PoolNotFound"
	CodeIdempotencyKeyReused = "IdempotencyKeyReused" // the key was reused for another request
	CodeInvalid              = "Invalid"              // a Service write Kubernetes would reject (422)
	CodeServiceNotFound      = "ServiceNotFound"      // a Service delete of a missing Service (404)
)

// Op is one attempt of one operation, as a client saw it.
//
// Conventions the workloads keep, and the checkers rely on: every write
// has a unique Key, shared by its retries and by nothing else; every
// allocate names a unique Owner, so an owner seen anywhere identifies the
// one allocate that made it.
type Op struct {
	Client int    `json:"client"`
	Kind   string `json:"kind"` // KindAllocate, KindRelease, KindGet or KindList
	Pool   string `json:"pool"`
	// Value is the value asked for: static allocate, release, get; "" for a
	// dynamic allocate and for list.
	Value string `json:"value,omitempty"`
	// Owner is the owner an allocate records, or a release's owner
	// precondition ("" for none).
	Owner  string `json:"owner,omitempty"`
	Key    string `json:"key,omitempty"` // idempotency key of a write; "" for reads
	Call   int64  `json:"call"`          // monotonic nanoseconds when the request was sent
	Return int64  `json:"return"`        // monotonic nanoseconds when the answer (or the give-up) came
	// Outcome is OK, Fail or Unknown. A get of a free value is OK with an
	// empty Result; a get recorded as Fail with Err NotAllocated is read
	// the same way.
	Outcome Outcome `json:"outcome"`
	Err     string  `json:"err,omitempty"` // error code of a Fail, e.g. "AlreadyAllocated"
	// Result is the allocated value (allocate OK), the holder seen (get: ""
	// for free), or the current holder a failure reported
	// (AlreadyAllocated, OwnerMismatch), when the system reported one.
	Result string            `json:"result,omitempty"`
	Listed map[string]string `json:"listed,omitempty"` // list OK: value -> owner of every held value
	// Attempt is 0 for the first try of a key, 1.. for retries. The
	// checkers order attempts by Call, not by Attempt; a negative Attempt
	// (an op a suite derived, such as a get per listed value) is allowed.
	Attempt int `json:"attempt,omitempty"`
	// Node is the node the request was sent to, and ServedBy the node that
	// answered it (X-Rangealloc-Served-By: the leader a follower forwarded
	// to is not named, the follower is), when an answer came. For reading
	// a history; the checkers ignore both.
	Node     string `json:"node,omitempty"`
	ServedBy string `json:"servedBy,omitempty"`

	// Service is the Service a Service write concerns,
	// "<namespace>/<name>"; Request the body of its PUT, for replaying
	// and reading a history (the checkers ignore it).
	Service string          `json:"service,omitempty"`
	Request json.RawMessage `json:"request,omitempty"`
	// Holds is, for an acknowledged Service write, the values the
	// answered Service names, each "<pool>=<value>" (HoldsValue), sorted
	// and without repeats: what it holds after a PUT, what a DELETE
	// released. Revision is the answer's revision.
	Holds    []string `json:"holds,omitempty"`
	Revision uint64   `json:"revision,omitempty"`
	// Answer is the body of an acknowledged Service write's answer, for
	// the client that sent it and for reading a history.
	Answer json.RawMessage `json:"answer,omitempty"`
}

// History is a recorded run, in any order.
type History []Op

// WriteJSONL writes one operation per line, as JSON.
func (h History) WriteJSONL(w io.Writer) error {
	enc := json.NewEncoder(w)
	for i, op := range h {
		if err := enc.Encode(op); err != nil {
			return fmt.Errorf("history op %d: %w", i+1, err)
		}
	}
	return nil
}

// ReadJSONL reads what WriteJSONL wrote. Errors name the 1-based op (the
// line, for a file WriteJSONL wrote).
func ReadJSONL(r io.Reader) (History, error) {
	var h History
	dec := json.NewDecoder(r)
	for n := 1; ; n++ {
		var op Op
		err := dec.Decode(&op)
		if errors.Is(err, io.EOF) {
			return h, nil
		}
		if err != nil {
			return nil, fmt.Errorf("history op %d: %w", n, err)
		}
		h = append(h, op)
	}
}
