// Package allocator holds rangealloc's pure allocation logic: band-aware
// bitmaps over integer offsets, and the IP and port ranges that translate
// values to offsets. It matches Kubernetes' ClusterIP (KEP-3070) and NodePort
// (KEP-3668) allocators in every observable way, but scans a word at a time.
//
// There are only three types to know:
//
//   - Bitmap: a set of offsets [0, size) split into a static band [0, B) and a
//     dynamic band [B, size), with exact per-band counts of used offsets.
//   - Range: an IP range (a CIDR) or a port range (first-last) that maps
//     values to offsets and knows its band size B.
//   - Pool: a Range and a Bitmap together, speaking values and Kubernetes'
//     error texts, and offsets for a caller that keeps data per offset.
//
// The picture for 10.96.0.0/24 (254 usable addresses, B = 16):
//
//	value   10.96.0.0   .1 ........ .16   .17 ........... .254   .255
//	offset     --        0 ........  15    16 ...........  253     --
//	          network   |<- static ->|    |<--- dynamic --->|   broadcast
//
// Invariants every method keeps:
//   - Bitmap.Used() always equals the number of set bits, and
//     UsedStatic()+UsedDynamic() == Used();
//   - no bit at or beyond Size() is ever set;
//   - a failed call changes nothing.
//
// The package is deterministic: it reads no clock, no random source and no
// map iteration order. Dynamic allocation takes its random start from the
// caller (the Raft state machine carries it inside the log entry), so every
// replica given the same calls makes the same choices.
package allocator
