package fsm

import (
	"strings"

	"github.com/rangealloc/rangealloc/internal/limits"
)

// The request table remembers the RequestTableSize most recent requests,
// and fewer when their encoded results exceed RequestTableBytes in total;
// the oldest are evicted first, in log order. A single allocation's result
// is about 60 bytes, so the byte bound only bites with large count
// allocations (about 200 KB each at count 4096), where it keeps a node's
// memory bounded. Both numbers are part of the replicated state's
// definition: every replica must use the same.
//
// From feature level 3 on (rules.requestClasses), the count bound applies
// to two classes apart: requests whose ID a caller chose (an
// Idempotency-Key, or the embedded API's request ID), and requests whose
// ID a node drew because the write came without one (DrawnRequestPrefix).
// So RequestTableSize keyed requests are remembered however many writes
// come without a key: a drawn ID only serves the node's own retries of
// one call. The byte bound still covers both, evicting the oldest of
// either class.
//
// From feature level 4 on (rules.bytesByClass) each class has its own byte
// bound too: RequestTableBytes for keyed requests, DrawnRequestBytes for
// drawn ones. Before, a few hundred large answers to writes without a key
// (count allocations) evicted a keyed result a client could still retry.
const (
	RequestTableSize  = 100_000
	RequestTableBytes = 256 << 20
	DrawnRequestBytes = 64 << 20
	// MaxRememberedResult is the largest encoded result the table
	// remembers and a snapshot holds (package limits defines it).
	MaxRememberedResult = limits.MaxRememberedResult
)

// DrawnRequestPrefix begins the request IDs a node draws for writes that
// come without one. A caller may retry with such an ID (a write whose
// outcome was unknown names the ID it was sent under); it is then
// remembered in the drawn class.
const DrawnRequestPrefix = "rangealloc:"

// IsDrawnRequestID reports whether id is of the form a node draws.
func IsDrawnRequestID(id string) bool { return strings.HasPrefix(id, DrawnRequestPrefix) }

type requestEntry struct {
	id     string
	fp     uint64
	index  uint64 // of the entry that carried the request
	result []byte // EncodeResult's form: a retry is rare, memory is not
	seq    uint64 // the table's count of puts before this one: log order, within an entry too
}

// The request table's classes (queues), apart from feature level 3 on.
const (
	keyedRequests = 0 // before level 3, every request
	drawnRequests = 1
)

// requestQueue holds one class's entries in log order; q[head:] are live.
type requestQueue struct {
	q     []*requestEntry
	head  int
	bytes int // the size of the live entries
}

func (q *requestQueue) len() int { return len(q.q) - q.head }

func (q *requestQueue) live() []*requestEntry { return q.q[q.head:] }

// oldest returns the queue's oldest entry, or nil if it is empty.
func (q *requestQueue) oldest() *requestEntry {
	if q.len() == 0 {
		return nil
	}
	return q.q[q.head]
}

// pop removes the oldest entry and returns it.
func (q *requestQueue) pop() *requestEntry {
	e := q.q[q.head]
	q.q[q.head] = nil
	q.head++
	if q.head > 1024 && q.head > len(q.q)/2 {
		q.q = append([]*requestEntry(nil), q.q[q.head:]...)
		q.head = 0
	}
	return e
}

// requestTable remembers the result of the most recent requests by ID, in
// encoded form (about a third of the memory of the structs, and no second
// copy of the owner strings). Entries are immutable once stored, so copies
// share them.
type requestTable struct {
	byID    map[string]*requestEntry
	classes bool            // keyed and drawn requests counted apart (level 3 on)
	byClass bool            // each class has its own byte bound (level 4 on)
	queues  [2]requestQueue // by class; all in keyedRequests until classes
	puts    uint64          // the next entry's seq
	bytes   int             // the size of the live entries' IDs and results
}

func (e *requestEntry) size() int { return len(e.id) + len(e.result) }

func newRequestTable() *requestTable {
	return &requestTable{byID: make(map[string]*requestEntry)}
}

func (t *requestTable) get(id string) *requestEntry { return t.byID[id] }

func (t *requestTable) len() int {
	return t.queues[keyedRequests].len() + t.queues[drawnRequests].len()
}

// class is the queue of a request ID.
func (t *requestTable) class(id string) int {
	if t.classes && IsDrawnRequestID(id) {
		return drawnRequests
	}
	return keyedRequests
}

// put stores a result, evicting the oldest entries of its class beyond
// RequestTableSize, then those over the byte bounds (trim).
func (t *requestTable) put(e *requestEntry) {
	e.seq = t.puts
	t.puts++
	t.byID[e.id] = e
	q := &t.queues[t.class(e.id)]
	q.q = append(q.q, e)
	q.bytes += e.size()
	t.bytes += e.size()
	for q.len() > RequestTableSize {
		t.evict(q)
	}
	t.trim()
}

// trim evicts the oldest entries while the results exceed the byte
// bounds: each class's own from level 4 (one entry of a class stays,
// however large), else RequestTableBytes over both, the oldest of either
// class first (one entry stays).
func (t *requestTable) trim() {
	if t.byClass {
		for c, limit := range [2]int{keyedRequests: RequestTableBytes, drawnRequests: DrawnRequestBytes} {
			q := &t.queues[c]
			for q.bytes > limit && q.len() > 1 {
				t.evict(q)
			}
		}
		return
	}
	for t.bytes > RequestTableBytes && t.len() > 1 {
		t.evict(t.oldestQueue())
	}
}

// evict forgets the oldest entry of q.
func (t *requestTable) evict(q *requestQueue) {
	old := q.pop()
	q.bytes -= old.size()
	t.bytes -= old.size()
	if t.byID[old.id] == old {
		delete(t.byID, old.id)
	}
}

// boundBytesByClass gives each class its own byte bound (the cluster's
// rules have bytesByClass), and evicts what is over them.
func (t *requestTable) boundBytesByClass() {
	if t.byClass {
		return
	}
	t.byClass = true
	t.trim()
}

// oldestQueue returns the queue whose oldest entry is the table's oldest.
func (t *requestTable) oldestQueue() *requestQueue {
	k, d := t.queues[keyedRequests].oldest(), t.queues[drawnRequests].oldest()
	if d != nil && (k == nil || d.seq < k.seq) {
		return &t.queues[drawnRequests]
	}
	return &t.queues[keyedRequests]
}

// countClasses moves the table to counting keyed and drawn requests apart
// (the cluster's rules have requestClasses): the drawn ones move to their
// own queue, each queue keeping log order. Each class then holds at most
// what the whole table held, so nothing is evicted.
func (t *requestTable) countClasses() {
	if t.classes {
		return
	}
	t.classes = true
	all := t.queues[keyedRequests].live()
	t.queues = [2]requestQueue{}
	for _, e := range all {
		q := &t.queues[t.class(e.id)]
		q.q = append(q.q, e)
		q.bytes += e.size()
	}
}

// entries returns the live entries, oldest first (log order).
func (t *requestTable) entries() []*requestEntry {
	k, d := t.queues[keyedRequests].live(), t.queues[drawnRequests].live()
	if len(d) == 0 {
		return k
	}
	out := make([]*requestEntry, 0, len(k)+len(d))
	for len(k) > 0 && len(d) > 0 {
		if k[0].seq < d[0].seq {
			out, k = append(out, k[0]), k[1:]
		} else {
			out, d = append(out, d[0]), d[1:]
		}
	}
	return append(append(out, k...), d...)
}

func (t *requestTable) clone() *requestTable {
	c := &requestTable{byID: make(map[string]*requestEntry, t.len()), classes: t.classes, byClass: t.byClass, puts: t.puts, bytes: t.bytes}
	for i := range t.queues {
		c.queues[i].q = append([]*requestEntry(nil), t.queues[i].live()...)
		c.queues[i].bytes = t.queues[i].bytes
		for _, e := range c.queues[i].q {
			c.byID[e.id] = e
		}
	}
	return c
}
