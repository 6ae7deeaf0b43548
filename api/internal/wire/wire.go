// Package wire writes and reads, by hand, the JSON of the API's bulk
// messages: the allocation list (the answer of a list or of a count
// allocation), the transaction results, and the transaction request. A
// count allocation of 4,096 values and its release pass every value
// through these six times, and encoding/json's reflection was most of
// their CPU. It does the same for the messages of one allocation (the
// allocate request and the allocation it answers), which every
// allocation passes through four times.
//
// The output is byte for byte what encoding/json writes for the same
// value (with HTML escaping, as json.Marshal and json.Encoder do by
// default). The decoders are fast paths only: they accept the plain form
// these messages take on the wire (exact field names, each at most once,
// strings of printable ASCII without escapes, revisions as plain unsigned
// integers) and report false for anything else, so that the caller falls
// back to encoding/json and every other input, valid or not, is handled
// exactly as before. Whatever a decoder accepts, it decodes to what
// encoding/json decodes it to. They never panic.
package wire

import (
	"strconv"
	"unicode/utf8"

	"github.com/rangealloc/rangealloc/api/types"
)

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaped as encoding/json
// escapes it with HTML escaping on: <, > and & as \u003c, \u003e and
// \u0026, U+2028 and U+2029 escaped, invalid UTF-8 as \ufffd.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// allocationSize is about the length of one allocation's JSON besides its
// strings.
const allocationSize = len(`{"pool":"","value":"","owner":"","band":"","mode":"","revision":18446744073709551615},`)

func allocationsSize(as []types.Allocation) int {
	n := 32
	if len(as) > 0 {
		a := &as[0]
		n += len(as) * (allocationSize + 2*len(a.Value) + len(a.Pool) + len(a.Owner) + len(a.Band) + len(a.Mode))
	}
	return n
}

func appendAllocation(dst []byte, a *types.Allocation) []byte {
	dst = append(dst, `{"pool":`...)
	dst = appendString(dst, a.Pool)
	dst = append(dst, `,"value":`...)
	dst = appendString(dst, a.Value)
	dst = append(dst, `,"owner":`...)
	dst = appendString(dst, a.Owner)
	dst = append(dst, `,"band":`...)
	dst = appendString(dst, a.Band)
	dst = append(dst, `,"mode":`...)
	dst = appendString(dst, a.Mode)
	dst = append(dst, `,"revision":`...)
	dst = strconv.AppendUint(dst, a.Revision, 10)
	return append(dst, '}')
}

// AllocationSize is a capacity that AppendAllocation usually fills
// without growing.
func AllocationSize(a *types.Allocation) int {
	return allocationSize + 2*len(a.Value) + len(a.Pool) + len(a.Owner) + len(a.Band) + len(a.Mode)
}

// AppendAllocation appends what json.Marshal(a) returns.
func AppendAllocation(dst []byte, a *types.Allocation) []byte { return appendAllocation(dst, a) }

// AppendAllocateRequest appends what json.Marshal(r) returns.
func AppendAllocateRequest(dst []byte, r *types.AllocateRequest) []byte {
	dst = append(dst, '{')
	if r.Value != "" {
		dst = append(dst, `"value":`...)
		dst = appendString(dst, r.Value)
	}
	if r.Owner != "" {
		if r.Value != "" {
			dst = append(dst, ',')
		}
		dst = append(dst, `"owner":`...)
		dst = appendString(dst, r.Owner)
	}
	if r.Count != nil {
		if r.Value != "" || r.Owner != "" {
			dst = append(dst, ',')
		}
		dst = append(dst, `"count":`...)
		dst = strconv.AppendInt(dst, int64(*r.Count), 10)
	}
	return append(dst, '}')
}

func appendAllocations(dst []byte, as []types.Allocation) []byte {
	if as == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i := range as {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendAllocation(dst, &as[i])
	}
	return append(dst, ']')
}

// AllocationListSize is a capacity that AppendAllocationList usually
// fills without growing.
func AllocationListSize(l *types.AllocationList) int { return allocationsSize(l.Allocations) }

// AppendAllocationList appends what json.Marshal(l) returns.
func AppendAllocationList(dst []byte, l *types.AllocationList) []byte {
	dst = append(dst, `{"allocations":`...)
	dst = appendAllocations(dst, l.Allocations)
	if l.Next != nil {
		dst = append(dst, `,"next":`...)
		dst = appendString(dst, *l.Next)
	}
	return append(dst, '}')
}

// TxnResultsSize is a capacity that AppendTxnResults usually fills
// without growing.
func TxnResultsSize(r *types.TxnResults) int { return allocationsSize(r.Results) }

// AppendTxnResults appends what json.Marshal(r) returns.
func AppendTxnResults(dst []byte, r *types.TxnResults) []byte {
	dst = append(dst, `{"results":`...)
	dst = appendAllocations(dst, r.Results)
	return append(dst, '}')
}

// TxnRequestSize is a capacity that AppendTxnRequest usually fills
// without growing.
func TxnRequestSize(r *types.TxnRequest) int {
	n := 16
	if len(r.Ops) > 0 {
		op := &r.Ops[0]
		n += len(r.Ops) * (len(`{"op":"","pool":"","value":"","owner":""},`) + len(op.Op) + len(op.Pool) + 2*len(op.Value) + len(op.Owner))
	}
	return n
}

// AppendTxnRequest appends what json.Marshal(r) returns.
func AppendTxnRequest(dst []byte, r *types.TxnRequest) []byte {
	dst = append(dst, `{"ops":`...)
	if r.Ops == nil {
		dst = append(dst, "null"...)
		return append(dst, '}')
	}
	dst = append(dst, '[')
	for i := range r.Ops {
		op := &r.Ops[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"op":`...)
		dst = appendString(dst, op.Op)
		dst = append(dst, `,"pool":`...)
		dst = appendString(dst, op.Pool)
		if op.Value != "" {
			dst = append(dst, `,"value":`...)
			dst = appendString(dst, op.Value)
		}
		if op.Owner != "" {
			dst = append(dst, `,"owner":`...)
			dst = appendString(dst, op.Owner)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']', '}')
}
