package checker

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// input is an operation on one value, as the model sees it.
type input struct {
	kind  string // KindAllocate, KindRelease, KindGet, or KindList for a list's reading of this value
	owner string // allocate: the new owner; release: the precondition ("" none)
	// unseenBefore: the answer names no holder, and an unseen allocate
	// (see partitionHistory) was called before it returned, so it may
	// find the value held by an unseen owner.
	unseenBefore bool
	// unseenOwner: the release's precondition names the owner of an
	// unseen allocate.
	unseenOwner bool
}

// unseen is the state of a value held by an owner no answer names: one of
// the dynamic allocates with an unknown outcome that nobody saw.
const unseen = "\x00unseen"

// output is what the operation answered.
type output struct {
	unknown bool   // no answer: the operation may or may not have taken effect
	ok      bool   // acknowledged
	err     string // the failure when !ok: AlreadyAllocated, NotAllocated or OwnerMismatch
	holder  string // get, list: the holder seen ("" free); AlreadyAllocated, OwnerMismatch: the holder reported, if any
}

// opInfo is porcupine metadata: the partition an operation belongs to
// and the logical operation it came from, shown in the visualisation.
type opInfo struct {
	key  valueKey
	desc string
}

// model is the sequential specification of one value: its state is the
// owner holding it, "" when it is free, or unseen.
//
//	allocate(o) ok                 free -> o
//	allocate(o) AlreadyAllocated   held (by the holder reported, if any), unchanged
//	release(p)  ok                 held (by p, if p != "") -> free
//	release(p)  NotAllocated       free, unchanged
//	release(p)  OwnerMismatch      held by someone other than p (the holder reported, if any), unchanged
//	get, list -> h                 the state is h, unchanged
//	unknown                        takes effect if it can, as the system would have
//
// An unknown operation has Return = never, so porcupine may also place it
// after everything else, where taking effect changes nothing observed:
// together these say "applied at some point after its call, or not at
// all".
//
// An answer marked unseenBefore that names no holder (AlreadyAllocated,
// OwnerMismatch, an unconditional release OK) may also find the value
// free: an unseen allocate took it just before, so it goes free ->
// unseen (or, for the release, free -> free).
var model = porcupine.Model{
	Init: func() interface{} { return "" },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		return step(state.(string), in.(input), out.(output))
	},
	Equal: func(a, b interface{}) bool { return a == b },
	DescribeOperation: func(in, out interface{}) string {
		return describeStep(in.(input), out.(output))
	},
	DescribeState: func(s interface{}) string {
		switch s {
		case "":
			return "free"
		case unseen:
			return "held by an unseen owner"
		}
		return fmt.Sprintf("held by %q", s)
	},
	DescribeOperationMetadata: func(info interface{}) string {
		if i, ok := info.(opInfo); ok {
			return i.desc
		}
		return ""
	},
}

func step(s string, i input, o output) (bool, string) {
	switch i.kind {
	case KindAllocate:
		switch {
		case o.unknown:
			if s == "" {
				return true, i.owner
			}
			return true, s
		case o.ok:
			return s == "", i.owner
		case s == "" && i.unseenBefore:
			return true, unseen
		default: // AlreadyAllocated
			return s != "" && (o.holder == "" || o.holder == s), s
		}
	case KindRelease:
		can := s != "" && (i.owner == "" || i.owner == s || s == unseen && i.unseenOwner)
		switch {
		case o.unknown:
			if can {
				return true, ""
			}
			return true, s
		case o.ok:
			return can || s == "" && i.unseenBefore, ""
		case o.err == CodeNotAllocated:
			return s == "", s
		case s == "" && i.unseenBefore:
			return true, unseen
		default: // OwnerMismatch
			return s != "" && i.owner != "" && s != i.owner && (o.holder == "" || o.holder == s), s
		}
	case KindGet, KindList:
		return s == o.holder, s
	}
	return false, s
}

func describeStep(i input, o output) string {
	call := i.kind
	switch {
	case i.kind == KindAllocate:
		call = fmt.Sprintf("allocate(%q)", i.owner)
	case i.kind == KindRelease && i.owner != "":
		call = fmt.Sprintf("release(if %q)", i.owner)
	}
	if i.unseenBefore {
		call += "*" // may meet an unseen allocate
	}
	switch {
	case o.unknown:
		return call + " -> ?"
	case i.kind == KindGet || i.kind == KindList:
		if o.holder == "" {
			return call + " -> free"
		}
		return fmt.Sprintf("%s -> %q", call, o.holder)
	case o.ok:
		return call + " -> ok"
	case o.holder != "":
		return fmt.Sprintf("%s -> %s (holder %q)", call, o.err, o.holder)
	}
	return call + " -> " + o.err
}
