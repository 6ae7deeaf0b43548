package wire

import (
	"math"

	"github.com/rangealloc/rangealloc/api/types"
)

// scanner reads the plain JSON the decoders accept. Every method reports
// false, leaving the scanner anywhere, for input outside that form.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c, after white space, if it comes next.
func (s *scanner) next(c byte) bool {
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.skipSpace()
	return s.i == len(s.b)
}

// str reads a string of printable ASCII without escapes: its bytes are
// its value, as encoding/json decodes it.
func (s *scanner) str() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.i
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], true
		case c < 0x20 || c == '\\' || c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// intern returns v as a string, prev itself when they are equal: the
// pool, owner, band and mode of a list repeat from one element to the
// next, and sharing them saves an allocation each.
func intern(v []byte, prev string) string {
	if string(v) == prev {
		return prev
	}
	return string(v)
}

// uint reads an unsigned integer of at most 19 digits, without a leading
// zero, sign, fraction or exponent (a fraction or exponent leaves a byte
// the caller does not expect).
func (s *scanner) uint() (uint64, bool) {
	s.skipSpace()
	start := s.i
	var n uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		n = n*10 + uint64(s.b[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	if digits == 0 || digits > 19 || (digits > 1 && s.b[start] == '0') {
		return 0, false
	}
	return n, true
}

// key reads an object key and its colon.
func (s *scanner) key() ([]byte, bool) {
	k, ok := s.str()
	return k, ok && s.next(':')
}

// object reads the members of an object whose '{' has been read: field
// reads the value of one key, returning its bit (each key may come once)
// or 0 to give up.
func (s *scanner) object(field func(key []byte) uint) bool {
	if s.next('}') {
		return true
	}
	var seen uint
	for {
		k, ok := s.key()
		if !ok {
			return false
		}
		bit := field(k)
		if bit == 0 || seen&bit != 0 {
			return false
		}
		seen |= bit
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// values gathers the values of a list, which a list does not share, into
// one string: a span per element, then the string once the list is read.
type values struct {
	bytes []byte
	spans [][2]int
}

// add records v as the value of the last element.
func (vs *values) add(v []byte) {
	start := len(vs.bytes)
	vs.bytes = append(vs.bytes, v...)
	vs.spans[len(vs.spans)-1] = [2]int{start, len(vs.bytes)}
}

// each calls set with every element's value, in order.
func (vs *values) each(set func(i int, v string)) {
	all := string(vs.bytes)
	for i, sp := range vs.spans {
		set(i, all[sp[0]:sp[1]])
	}
}

func newValues(size int) values {
	return values{bytes: make([]byte, 0, size*16), spans: make([][2]int, 0, size)}
}

// allocation reads one allocation into *a, its strings shared with *prev
// where equal; its value goes to vs, or to a.Value when vs is nil.
func (s *scanner) allocation(a, prev *types.Allocation, vs *values) bool {
	if !s.next('{') {
		return false
	}
	return s.object(func(k []byte) uint {
		var (
			v   []byte
			ok  bool
			bit uint
		)
		switch string(k) {
		case "pool":
			if v, ok = s.str(); ok {
				a.Pool, bit = intern(v, prev.Pool), 1
			}
		case "value":
			if v, ok = s.str(); ok {
				if vs != nil {
					vs.add(v)
				} else {
					a.Value = string(v)
				}
				bit = 2
			}
		case "owner":
			if v, ok = s.str(); ok {
				a.Owner, bit = intern(v, prev.Owner), 4
			}
		case "band":
			if v, ok = s.str(); ok {
				a.Band, bit = intern(v, prev.Band), 8
			}
		case "mode":
			if v, ok = s.str(); ok {
				a.Mode, bit = intern(v, prev.Mode), 16
			}
		case "revision":
			if a.Revision, ok = s.uint(); ok {
				bit = 32
			}
		}
		return bit
	})
}

// allocations reads an array of allocations; null is left to
// encoding/json.
func (s *scanner) allocations() ([]types.Allocation, bool) {
	if !s.next('[') {
		return nil, false
	}
	// An allocation takes about a hundred bytes.
	out := make([]types.Allocation, 0, min(len(s.b)/96+1, 1<<16))
	if s.next(']') {
		return out, true
	}
	var prev types.Allocation
	vs := newValues(cap(out))
	for {
		out = append(out, types.Allocation{})
		vs.spans = append(vs.spans, [2]int{})
		a := &out[len(out)-1]
		if !s.allocation(a, &prev, &vs) {
			return nil, false
		}
		prev = *a
		if s.next(']') {
			vs.each(func(i int, v string) { out[i].Value = v })
			return out, true
		}
		if !s.next(',') {
			return nil, false
		}
	}
}

// DecodeAllocationList decodes data into *dst, which must be zero, as
// json.Unmarshal would; false, leaving *dst as it was, when data is
// outside the plain form and must go to json.Unmarshal.
func DecodeAllocationList(data []byte, dst *types.AllocationList) bool {
	var l types.AllocationList
	s := scanner{b: data}
	if !s.next('{') {
		return false
	}
	ok := s.object(func(k []byte) uint {
		switch string(k) {
		case "allocations":
			as, ok := s.allocations()
			if ok {
				l.Allocations = as
				return 1
			}
		case "next":
			if v, ok := s.str(); ok {
				next := string(v)
				l.Next = &next
				return 2
			}
		}
		return 0
	}) && s.end()
	if ok {
		*dst = l
	}
	return ok
}

// DecodeTxnResults decodes data into *dst, which must be zero, as
// json.Unmarshal would; false, leaving *dst as it was, when data is
// outside the plain form and must go to json.Unmarshal.
func DecodeTxnResults(data []byte, dst *types.TxnResults) bool {
	var r types.TxnResults
	s := scanner{b: data}
	if !s.next('{') {
		return false
	}
	ok := s.object(func(k []byte) uint {
		if string(k) == "results" {
			if as, ok := s.allocations(); ok {
				r.Results = as
				return 1
			}
		}
		return 0
	}) && s.end()
	if ok {
		*dst = r
	}
	return ok
}

// DecodeAllocation decodes data into *dst, which must be zero, as
// json.Unmarshal would; false, leaving *dst as it was, when data is
// outside the plain form and must go to json.Unmarshal.
func DecodeAllocation(data []byte, dst *types.Allocation) bool {
	var a types.Allocation
	s := scanner{b: data}
	if !s.allocation(&a, &types.Allocation{}, nil) || !s.end() {
		return false
	}
	*dst = a
	return true
}

// DecodeAllocateRequest decodes data into *dst, which must be zero, as a
// json.Decoder with DisallowUnknownFields decodes a body that holds one
// object; false, leaving *dst as it was, when data is outside the plain
// form (which holds no negative count) and must go to encoding/json.
func DecodeAllocateRequest(data []byte, dst *types.AllocateRequest) bool {
	var r types.AllocateRequest
	s := scanner{b: data}
	if !s.next('{') {
		return false
	}
	ok := s.object(func(k []byte) uint {
		switch string(k) {
		case "value":
			if v, ok := s.str(); ok {
				r.Value = string(v)
				return 1
			}
		case "owner":
			if v, ok := s.str(); ok {
				r.Owner = string(v)
				return 2
			}
		case "count":
			if n, ok := s.uint(); ok && n <= math.MaxInt {
				c := int(n)
				r.Count = &c
				return 4
			}
		}
		return 0
	}) && s.end()
	if ok {
		*dst = r
	}
	return ok
}

func (s *scanner) txnOp(op, prev *types.TxnOp, vs *values) bool {
	if !s.next('{') {
		return false
	}
	return s.object(func(k []byte) uint {
		var (
			v   []byte
			ok  bool
			bit uint
		)
		switch string(k) {
		case "op":
			if v, ok = s.str(); ok {
				op.Op, bit = intern(v, prev.Op), 1
			}
		case "pool":
			if v, ok = s.str(); ok {
				op.Pool, bit = intern(v, prev.Pool), 2
			}
		case "value":
			if v, ok = s.str(); ok {
				vs.add(v)
				bit = 4
			}
		case "owner":
			if v, ok = s.str(); ok {
				op.Owner, bit = intern(v, prev.Owner), 8
			}
		}
		return bit
	})
}

// DecodeTxnRequest decodes data into *dst, which must be zero, as a
// json.Decoder with DisallowUnknownFields decodes a body that holds one
// object; false, leaving *dst as it was, when data is outside the plain
// form and must go to encoding/json, which decides whether it is valid.
func DecodeTxnRequest(data []byte, dst *types.TxnRequest) bool {
	var r types.TxnRequest
	s := scanner{b: data}
	if !s.next('{') {
		return false
	}
	ok := s.object(func(k []byte) uint {
		if string(k) != "ops" || !s.next('[') {
			return 0
		}
		// An operation takes about eighty bytes.
		ops := make([]types.TxnOp, 0, min(len(s.b)/72+1, 1<<16))
		if s.next(']') {
			r.Ops = ops
			return 1
		}
		var prev types.TxnOp
		vs := newValues(cap(ops))
		for {
			ops = append(ops, types.TxnOp{})
			vs.spans = append(vs.spans, [2]int{})
			op := &ops[len(ops)-1]
			if !s.txnOp(op, &prev, &vs) {
				return 0
			}
			prev = *op
			if s.next(']') {
				vs.each(func(i int, v string) { ops[i].Value = v })
				r.Ops = ops
				return 1
			}
			if !s.next(',') {
				return 0
			}
		}
	}) && s.end()
	if ok {
		*dst = r
	}
	return ok
}
