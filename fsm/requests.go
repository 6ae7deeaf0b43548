package fsm

// The request table remembers the RequestTableSize most recent requests,
// and fewer when their encoded results exceed RequestTableBytes in total;
// the oldest are evicted first, in log order. A single allocation's result
// is about 60 bytes, so the byte bound only bites with large count
// allocations (about 200 KB each at count 4096), where it keeps a node's
// memory bounded. Both numbers are part of the replicated state's
// definition: every replica must use the same.
const (
	RequestTableSize  = 100_000
	RequestTableBytes = 256 << 20
	// maxRememberedResult is the largest encoded result a snapshot holds.
	maxRememberedResult = 1 << 20
)

type requestEntry struct {
	id     string
	fp     uint64
	index  uint64 // of the entry that carried the request
	result []byte // EncodeResult's form: a retry is rare, memory is not
}

// requestTable remembers the result of the most recent requests by ID, in
// encoded form (about a third of the memory of the structs, and no second
// copy of the owner strings). Entries are immutable once stored, so copies
// share them.
type requestTable struct {
	byID  map[string]*requestEntry
	queue []*requestEntry // log order; queue[head:] are live
	head  int
	bytes int // the size of the live entries' IDs and results
}

func (e *requestEntry) size() int { return len(e.id) + len(e.result) }

func newRequestTable() *requestTable {
	return &requestTable{byID: make(map[string]*requestEntry)}
}

func (t *requestTable) get(id string) *requestEntry { return t.byID[id] }

func (t *requestTable) len() int { return len(t.queue) - t.head }

// put stores a result, evicting the oldest entry beyond RequestTableSize.
func (t *requestTable) put(e *requestEntry) {
	t.byID[e.id] = e
	t.queue = append(t.queue, e)
	t.bytes += e.size()
	for t.len() > RequestTableSize || (t.bytes > RequestTableBytes && t.len() > 1) {
		old := t.queue[t.head]
		t.queue[t.head] = nil
		t.head++
		t.bytes -= old.size()
		if t.byID[old.id] == old {
			delete(t.byID, old.id)
		}
	}
	if t.head > 1024 && t.head > len(t.queue)/2 {
		t.queue = append([]*requestEntry(nil), t.queue[t.head:]...)
		t.head = 0
	}
}

// entries returns the live entries, oldest first.
func (t *requestTable) entries() []*requestEntry { return t.queue[t.head:] }

func (t *requestTable) clone() *requestTable {
	c := &requestTable{byID: make(map[string]*requestEntry, t.len()), queue: append([]*requestEntry(nil), t.entries()...), bytes: t.bytes}
	for _, e := range c.queue {
		c.byID[e.id] = e
	}
	return c
}
