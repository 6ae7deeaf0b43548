package fsm

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// harness feeds requests to an FSM as raft would, one entry per call.
type harness struct {
	t     testing.TB
	f     *FSM
	index uint64
}

func newHarness(t testing.TB) *harness { return &harness{t: t, f: New(nil)} }

func (h *harness) apply(reqs ...*Request) []*Result {
	h.t.Helper()
	h.index++
	out := h.f.ApplyBatch([]*raft.Log{{Index: h.index, Type: raft.LogCommand, Data: EncodeBatch(reqs)}})
	return out[0].(*Response).Results
}

func (h *harness) one(r *Request) *Result { h.t.Helper(); return h.apply(r)[0] }

func (h *harness) pool(name, rng string) {
	h.t.Helper()
	res := h.one(&Request{Kind: KindCreatePool, Pool: name, Range: rng})
	require.Nil(h.t, res.Err, "create pool %s %s", name, rng)
}

func alloc(pool, value, owner string) Op {
	return Op{Kind: OpAllocate, Pool: pool, Value: value, Owner: owner}
}
func release(pool, value, owner string) Op {
	return Op{Kind: OpRelease, Pool: pool, Value: value, Owner: owner}
}
func txn(ops ...Op) *Request { return &Request{Kind: KindTxn, Ops: ops, Seed: 1} }

func TestTxnSemantics(t *testing.T) {
	cases := []struct {
		name     string
		setup    []Op // applied first, one transaction each, must succeed
		ops      []Op
		wantCode Code
		wantOp   int
		owner    string   // Error.Owner
		values   []string // values of the results, flattened
	}{
		{name: "static allocate", ops: []Op{alloc("ports", "30080", "a")}, values: []string{"30080"}},
		{name: "static allocate taken", setup: []Op{alloc("ports", "30080", "a")}, ops: []Op{alloc("ports", "30080", "b")},
			wantCode: CodeAlreadyAllocated, owner: "a"},
		{name: "static allocate out of range", ops: []Op{alloc("ports", "40000", "a")}, wantCode: CodeNotInRange},
		{name: "static allocate unparseable", ops: []Op{alloc("ports", "x", "a")}, wantCode: CodeInvalidArgument},
		{name: "unknown pool", ops: []Op{alloc("nope", "", "a")}, wantCode: CodePoolNotFound},
		{name: "release", setup: []Op{alloc("ports", "30080", "a")}, ops: []Op{release("ports", "30080", "")}, values: []string{"30080"}},
		{name: "release with owner", setup: []Op{alloc("ports", "30080", "a")}, ops: []Op{release("ports", "30080", "a")}, values: []string{"30080"}},
		{name: "release owner mismatch", setup: []Op{alloc("ports", "30080", "a")}, ops: []Op{release("ports", "30080", "b")},
			wantCode: CodeOwnerMismatch, owner: "a"},
		{name: "release free", ops: []Op{release("ports", "30080", "")}, wantCode: CodeNotAllocated},
		{name: "release out of range", ops: []Op{release("ports", "1", "")}, wantCode: CodeNotInRange},
		{name: "release without value", ops: []Op{release("ports", "", "")}, wantCode: CodeInvalidArgument},
		{name: "owner too long", ops: []Op{alloc("ports", "", string(make([]byte, 254)))}, wantCode: CodeInvalidArgument},
		{name: "value too long", ops: []Op{alloc("ports", string(make([]byte, 1000)), "")}, wantCode: CodeInvalidArgument},
		{name: "count on static", ops: []Op{{Kind: OpAllocate, Pool: "ports", Value: "30001", Count: 2}}, wantCode: CodeInvalidArgument},
		{name: "count too large", ops: []Op{{Kind: OpAllocate, Pool: "ports", Count: MaxCount + 1}}, wantCode: CodeInvalidArgument},
		{name: "count beyond free", ops: []Op{{Kind: OpAllocate, Pool: "small", Count: 15}}, wantCode: CodeRangeFull},
		{name: "count fills exactly", ops: []Op{{Kind: OpAllocate, Pool: "small", Count: 14}},
			values: []string{"10.0.0.1", "10.0.0.10", "10.0.0.11", "10.0.0.12", "10.0.0.13", "10.0.0.14", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9"}},
		{name: "second op fails: first undone", ops: []Op{alloc("ports", "30001", "a"), alloc("ports", "30001", "b")},
			wantCode: CodeAlreadyAllocated, wantOp: 1, owner: "a"},
		{name: "release then fail: release undone", setup: []Op{alloc("ports", "30002", "a")},
			ops: []Op{release("ports", "30002", "a"), alloc("nope", "", "x")}, wantCode: CodePoolNotFound, wantOp: 1},
		{name: "count then fail: count undone", ops: []Op{{Kind: OpAllocate, Pool: "small", Owner: "a", Count: 5}, alloc("nope", "", "x")},
			wantCode: CodePoolNotFound, wantOp: 1},
		{name: "release, re-allocate, then fail: both undone in order", setup: []Op{alloc("ports", "30002", "a")},
			ops:      []Op{release("ports", "30002", "a"), alloc("ports", "30002", "b"), {Kind: OpAllocate, Pool: "small", Count: 15}},
			wantCode: CodeRangeFull, wantOp: 2},
		{name: "release then re-allocate in one txn", setup: []Op{alloc("ports", "30002", "a")},
			ops: []Op{release("ports", "30002", "a"), alloc("ports", "30002", "b")}, values: []string{"30002", "30002"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.pool("ports", "30000-32767")
			h.pool("small", "10.0.0.0/28")
			for _, op := range tc.setup {
				require.Nil(t, h.one(txn(op)).Err)
			}
			before := dump(h.f)
			res := h.one(txn(tc.ops...))
			if tc.wantCode != "" {
				require.NotNil(t, res.Err, "want %s", tc.wantCode)
				assert.Equal(t, tc.wantCode, res.Err.Code, res.Err.Message)
				assert.Equal(t, tc.wantOp, res.Err.Op)
				assert.Equal(t, tc.owner, res.Err.Owner)
				assert.Equal(t, before, dump(h.f), "a failed transaction changed the pools")
				return
			}
			require.Nil(t, res.Err)
			var got []string
			for i, op := range res.Allocations() {
				for _, a := range op {
					got = append(got, a.Value)
					if tc.ops[i].Kind == OpAllocate {
						assert.Equal(t, h.index, a.Revision, "an allocation's revision is the index of its entry")
					}
				}
			}
			if len(got) > 3 {
				sortStrings(got)
			}
			assert.Equal(t, tc.values, got)
		})
	}
}

func sortStrings(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

func TestAllocationRecords(t *testing.T) {
	h := newHarness(t)
	h.pool("ip", "10.96.0.0/24")
	r1 := h.one(txn(alloc("ip", "10.96.0.10", "default/dns")))
	require.Nil(t, r1.Err)
	r2 := h.one(txn(alloc("ip", "", "default/web")))
	require.Nil(t, r2.Err)
	a, err := h.f.Get("ip", "10.96.0.10")
	require.NoError(t, err)
	assert.Equal(t, Allocation{Pool: "ip", Value: "10.96.0.10", Owner: "default/dns", Static: true, InStatic: true, Revision: 2}, a)
	d := r2.Allocations()[0][0]
	assert.False(t, d.Static)
	assert.False(t, d.InStatic, "dynamic allocations come from the dynamic band first")
	assert.Equal(t, uint64(3), d.Revision)
	got, err := h.f.Get("ip", d.Value)
	require.NoError(t, err)
	assert.Equal(t, d, got)
	_, err = h.f.Get("ip", "10.96.0.11")
	assert.ErrorIs(t, err, &Error{Code: CodeNotAllocated})
	st, err := h.f.Pool("ip")
	require.NoError(t, err)
	assert.Equal(t, 2, st.Used)
	assert.Equal(t, 1, st.UsedStatic)
}

func TestPools(t *testing.T) {
	h := newHarness(t)
	res := h.one(&Request{Kind: KindCreatePool, Pool: "ip", Range: "10.96.0.5/24"})
	require.Nil(t, res.Err)
	assert.True(t, res.Created)
	res = h.one(&Request{Kind: KindCreatePool, Pool: "ip", Range: "10.96.0.0/24"})
	require.Nil(t, res.Err, "the same pool again is fine")
	assert.False(t, res.Created)
	for _, tc := range []struct {
		req  *Request
		code Code
	}{
		{&Request{Kind: KindCreatePool, Pool: "ip", Range: "10.97.0.0/24"}, CodePoolExists},
		{&Request{Kind: KindCreatePool, Pool: "Bad_Name", Range: "10.97.0.0/24"}, CodeInvalidArgument},
		{&Request{Kind: KindCreatePool, Pool: "x", Range: "10.0.0.0/8"}, CodeInvalidArgument},
		{&Request{Kind: KindCreatePool, Pool: "x", Range: "zzz"}, CodeInvalidArgument},
		{&Request{Kind: KindDeletePool, Pool: "nope"}, CodePoolNotFound},
	} {
		res := h.one(tc.req)
		require.NotNil(t, res.Err, "%+v", tc.req)
		assert.Equal(t, tc.code, res.Err.Code, res.Err.Message)
	}
	require.Nil(t, h.one(txn(alloc("ip", "", "o"))).Err)
	res = h.one(&Request{Kind: KindDeletePool, Pool: "ip"})
	require.NotNil(t, res.Err)
	assert.Equal(t, CodePoolNotEmpty, res.Err.Code)
	v := h.f.Pools()
	require.Len(t, v, 1)
	rel, _, err := h.f.List("ip", "", "", 10)
	require.NoError(t, err)
	require.Nil(t, h.one(txn(release("ip", rel[0].Value, ""))).Err)
	require.Nil(t, h.one(&Request{Kind: KindDeletePool, Pool: "ip"}).Err)
	assert.Empty(t, h.f.Pools())
}

func TestList(t *testing.T) {
	h := newHarness(t)
	h.pool("p", "30000-30099")
	for i := 0; i < 10; i++ {
		owner := "even"
		if i%2 == 1 {
			owner = "odd"
		}
		require.Nil(t, h.one(txn(alloc("p", fmt.Sprint(30000+i*3), owner))).Err)
	}
	page, next, err := h.f.List("p", "", "", 4)
	require.NoError(t, err)
	assert.Equal(t, []string{"30000", "30003", "30006", "30009"}, values(page))
	assert.Equal(t, "30009", next)
	page, next, err = h.f.List("p", "", next, 4)
	require.NoError(t, err)
	assert.Equal(t, []string{"30012", "30015", "30018", "30021"}, values(page))
	page, next, err = h.f.List("p", "", next, 4)
	require.NoError(t, err)
	assert.Equal(t, []string{"30024", "30027"}, values(page))
	assert.Equal(t, "", next, "no next page")
	page, next, err = h.f.List("p", "odd", "", 100)
	require.NoError(t, err)
	assert.Equal(t, []string{"30003", "30009", "30015", "30021", "30027"}, values(page))
	assert.Equal(t, "", next)
	page, next, err = h.f.List("p", "", "30027", 1)
	require.NoError(t, err)
	assert.Empty(t, page)
	assert.Equal(t, "", next)
	_, _, err = h.f.List("p", "", "zz", 1)
	assert.ErrorIs(t, err, &Error{Code: CodeInvalidArgument})
	_, _, err = h.f.List("nope", "", "", 1)
	assert.ErrorIs(t, err, &Error{Code: CodePoolNotFound})
	for _, limit := range []int{0, -1} {
		_, _, err = h.f.List("p", "", "", limit)
		assert.ErrorIs(t, err, &Error{Code: CodeInvalidArgument}, "List(limit %d)", limit)
	}
}

// answer is r as a caller sees it: its allocations built, whether the
// state machine made it or a retry decoded the remembered form.
func answer(r *Result) *Result {
	c := *r
	c.ops, c.done = r.Allocations(), nil
	return &c
}

func values(as []Allocation) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Value
	}
	return out
}

func TestIdempotentRequests(t *testing.T) {
	h := newHarness(t)
	h.pool("p", "30000-32767")
	first := h.one(&Request{Kind: KindTxn, ID: "k1", Seed: 11, Ops: []Op{alloc("p", "", "o")}})
	require.Nil(t, first.Err)
	// A retry carries a new seed (the proposer draws one each time) but the same body.
	again := h.one(&Request{Kind: KindTxn, ID: "k1", Seed: 99, Ops: []Op{alloc("p", "", "o")}})
	assert.Equal(t, answer(first), answer(again), "a retry returns the first answer")
	st, _ := h.f.Pool("p")
	assert.Equal(t, 1, st.Used, "and allocates nothing more")
	other := h.one(&Request{Kind: KindTxn, ID: "k1", Ops: []Op{alloc("p", "", "someone-else")}})
	require.NotNil(t, other.Err)
	assert.Equal(t, CodeIdempotencyKeyReused, other.Err.Code)
	// Failures are remembered too.
	f1 := h.one(&Request{Kind: KindTxn, ID: "k2", Ops: []Op{alloc("p", "1", "o")}})
	require.NotNil(t, f1.Err)
	f2 := h.one(&Request{Kind: KindTxn, ID: "k2", Ops: []Op{alloc("p", "1", "o")}})
	assert.Equal(t, f1, f2)
}

func TestRequestTableEviction(t *testing.T) {
	h := newHarness(t)
	h.pool("p", "10.96.0.0/12")
	reqs := make([]*Request, 0, 1000)
	n := RequestTableSize + 10
	for i := 0; i < n; i++ {
		reqs = append(reqs, &Request{Kind: KindTxn, ID: fmt.Sprintf("id-%d", i), Seed: uint64(i), Ops: []Op{alloc("p", "", "o")}})
		if len(reqs) == cap(reqs) || i == n-1 {
			h.apply(reqs...)
			reqs = reqs[:0]
		}
	}
	assert.Equal(t, RequestTableSize, h.f.s.requests.len())
	for i := 0; i < 10; i++ {
		_, ok := h.f.RequestResult(fmt.Sprintf("id-%d", i))
		assert.False(t, ok, "id-%d is among the oldest and was evicted", i)
	}
	for _, i := range []int{10, 50_000, n - 1} {
		_, ok := h.f.RequestResult(fmt.Sprintf("id-%d", i))
		assert.True(t, ok, "id-%d is remembered", i)
	}
}

// TestRequestTableByteBound: large results are evicted by total size, so a
// stream of count allocations cannot grow the table without bound.
func TestRequestTableByteBound(t *testing.T) {
	tab := newRequestTable()
	big := make([]byte, 200_000) // about one count=4096 result
	n := RequestTableBytes/len(big) + 10
	for i := 0; i < n; i++ {
		tab.put(&requestEntry{id: fmt.Sprintf("c-%d", i), result: big})
		require.LessOrEqual(t, tab.bytes, RequestTableBytes, "after %d puts", i+1)
	}
	assert.Nil(t, tab.get("c-0"), "the oldest large result was evicted")
	assert.NotNil(t, tab.get(fmt.Sprintf("c-%d", n-1)), "the newest is remembered")
	live := 0
	for _, e := range tab.entries() {
		live += e.size()
	}
	assert.Equal(t, live, tab.bytes, "bytes always equals the size of the live entries")
	huge := &requestEntry{id: "huge", result: make([]byte, RequestTableBytes+1)}
	tab.put(huge)
	assert.Same(t, huge, tab.get("huge"), "one entry larger than the budget is still remembered")
	assert.Equal(t, 1, tab.len())
}

// TestKeyedRequestsOutliveDrawnOnes: from feature level 3 on, writes whose
// ID a node drew (they came without a key) no longer evict a keyed
// request's result: RequestTableSize keyed requests are remembered
// whatever else is written. Before level 3 they share one count, as every
// replica of a cluster not yet raised must keep doing.
func TestKeyedRequestsOutliveDrawnOnes(t *testing.T) {
	for _, level := range []uint64{2, levelRequestClasses} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) {
			h := newHarness(t)
			require.Nil(t, h.one(&Request{Kind: KindSetFeatureLevel, FeatureLevel: level}).Err)
			h.pool("p", "10.96.0.0/12")
			keyed := &Request{Kind: KindTxn, ID: "k", Seed: 1, Ops: []Op{alloc("p", "", "o")}}
			first := h.one(keyed)
			require.Nil(t, first.Err)
			drawn := func(i int) string { return fmt.Sprintf("%sd-%d", DrawnRequestPrefix, i) }
			n := RequestTableSize + 10
			reqs := make([]*Request, 0, 1000)
			for i := 0; i < n; i++ {
				reqs = append(reqs, &Request{Kind: KindTxn, ID: drawn(i), Seed: uint64(i + 2), Ops: []Op{alloc("p", "", "o")}})
				if len(reqs) == cap(reqs) || i == n-1 {
					h.apply(reqs...)
					reqs = reqs[:0]
				}
			}
			retry := h.one(&Request{Kind: KindTxn, ID: "k", Seed: 99, Ops: keyed.Ops})
			require.Nil(t, retry.Err)
			st, _ := h.f.Pool("p")
			if level < levelRequestClasses {
				assert.NotEqual(t, answer(first), answer(retry), "evicted by the writes without a key, the retry allocates again")
				assert.Equal(t, n+2, st.Used)
				assert.Equal(t, RequestTableSize, h.f.s.requests.len())
				return
			}
			assert.Equal(t, answer(first), answer(retry), "the keyed request outlives %d drawn ones: its retry gets the first answer", n)
			assert.Equal(t, n+1, st.Used, "and allocates nothing more")
			assert.Equal(t, RequestTableSize+1, h.f.s.requests.len())
			for i := 0; i < 10; i++ {
				_, ok := h.f.RequestResult(drawn(i))
				assert.False(t, ok, "%s is among the oldest drawn requests and was evicted", drawn(i))
			}
			_, ok := h.f.RequestResult(drawn(10))
			assert.True(t, ok, "%s is remembered", drawn(10))
		})
	}
}

// TestRequestClassesFromTheRaise: raising the level to 3 sorts the
// remembered requests into their classes, keeping log order, and a
// snapshot taken after it reads back as the same table, even one holding
// more requests than the count before level 3 allows.
func TestRequestClassesFromTheRaise(t *testing.T) {
	s := newState()
	id := func(i int) string {
		if i%3 == 0 {
			return fmt.Sprintf("%sd-%d", DrawnRequestPrefix, i)
		}
		return fmt.Sprintf("k-%d", i)
	}
	ids := func(es []*requestEntry) []string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.id
		}
		return out
	}
	var want []string
	for i := 0; i < 30; i++ {
		s.requests.put(&requestEntry{id: id(i), index: uint64(i / 2), result: EncodeResult(&Result{Index: uint64(i / 2)})})
		want = append(want, id(i))
	}
	require.Zero(t, s.requests.queues[drawnRequests].len(), "before level 3, one queue")
	require.Nil(t, s.setFeatureLevel(levelRequestClasses).Err)
	assert.Equal(t, 10, s.requests.queues[drawnRequests].len(), "the drawn requests have their own queue")
	assert.Equal(t, 20, s.requests.queues[keyedRequests].len())
	assert.Equal(t, want, ids(s.requests.entries()), "in log order still")

	// Fill the keyed class to its bound: with the drawn ones, more than
	// RequestTableSize in all.
	for i := 30; s.requests.queues[keyedRequests].len() < RequestTableSize; i++ {
		if id(i)[0] == 'k' {
			s.requests.put(&requestEntry{id: id(i), index: uint64(i / 2), result: EncodeResult(&Result{Index: uint64(i / 2)})})
			want = append(want, id(i))
		}
	}
	want = want[:0]
	want = append(want, ids(s.requests.entries())...)
	require.Greater(t, len(want), RequestTableSize)
	back, err := importState(s.export())
	require.NoError(t, err)
	assert.Equal(t, want, ids(back.requests.entries()), "a snapshot keeps every remembered request, in order")
	assert.Equal(t, s.requests.bytes, back.requests.bytes)
	for _, q := range []int{keyedRequests, drawnRequests} {
		assert.Equal(t, s.requests.queues[q].len(), back.requests.queues[q].len(), "queue %d", q)
	}
	c := s.requests.clone()
	assert.Equal(t, want, ids(c.entries()), "so does a copy")
}

// TestRequestTableByteBoundAcrossClasses: the byte bound evicts the oldest
// request of either class.
func TestRequestTableByteBoundAcrossClasses(t *testing.T) {
	tab := newRequestTable()
	tab.countClasses()
	big := make([]byte, 200_000)
	n := RequestTableBytes/len(big) + 10
	id := func(i int) string { // keyed, then drawn only: the keyed ones are the oldest
		if i >= n/2 {
			return fmt.Sprintf("%sc-%d", DrawnRequestPrefix, i)
		}
		return fmt.Sprintf("c-%d", i)
	}
	for i := 0; i < n; i++ {
		tab.put(&requestEntry{id: id(i), result: big})
		require.LessOrEqual(t, tab.bytes, RequestTableBytes, "after %d puts", i+1)
	}
	kept := tab.len()
	for i := 0; i < n; i++ {
		assert.Equal(t, i >= n-kept, tab.get(id(i)) != nil, "%s: only the newest %d are remembered", id(i), kept)
	}
	live := 0
	for _, e := range tab.entries() {
		live += e.size()
	}
	assert.Equal(t, live, tab.bytes, "bytes always equals the size of the live entries")
}

// TestRequestTableReplayMatchesSnapshots: a replica that installs a
// snapshot and applies what follows remembers what one that applied
// everything remembers, through the raise to level 3 and over 100,000
// evictions from each class (enough for each queue to compact).
func TestRequestTableReplayMatchesSnapshots(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	live := newState()
	replayAgainstSnapshots(t, live, 500_000, 60_000, levelRequestClasses, 100_000, func(i int) requestEntry {
		id := fmt.Sprintf("k-%d", i)
		if rng.IntN(2) == 0 {
			id = fmt.Sprintf("%s%d", DrawnRequestPrefix, i)
		}
		index := uint64(i/4 + 1)
		return requestEntry{id: id, index: index, fp: rng.Uint64(), result: EncodeResult(&Result{Index: index})}
	})
	for _, q := range []int{keyedRequests, drawnRequests} {
		assert.Equal(t, RequestTableSize, live.requests.queues[q].len(), "class %d is full", q)
	}
}

// replayAgainstSnapshots puts n entries from next into live, raising its
// level to raise before entry raiseAt. Every `every` entries it checks
// that a state read from live's previous snapshot, and given the same
// entries since, remembers what live does; then it takes a new snapshot.
func replayAgainstSnapshots(t *testing.T, live *state, n, raiseAt int, raise uint64, every int, next func(i int) requestEntry) {
	t.Helper()
	// installed is read from the last snapshot, then given the same puts;
	// each table numbers its own copy of an entry.
	var installed *state
	put := func(s *state, e requestEntry) { s.requests.put(&e) }
	for i := 0; i < n; i++ {
		if i == raiseAt {
			require.Nil(t, live.setFeatureLevel(raise).Err)
			if installed != nil {
				require.Nil(t, installed.setFeatureLevel(raise).Err)
			}
		}
		e := next(i)
		put(live, e)
		if installed != nil {
			put(installed, e)
		}
		if i%every == every-1 {
			if installed != nil {
				sameRequests(t, live.requests, installed.requests, i)
			}
			var err error
			installed, err = importState(live.clone().export())
			require.NoError(t, err)
		}
	}
	sameRequests(t, live.requests, installed.requests, n)
}

// sameRequests fails unless two tables remember the same requests in the
// same order, and each indexes exactly what it holds.
func sameRequests(t *testing.T, a, b *requestTable, after int) {
	t.Helper()
	ea, eb := a.entries(), b.entries()
	require.Equal(t, len(ea), len(eb), "after %d puts", after)
	for i := range ea {
		if ea[i].id != eb[i].id || ea[i].index != eb[i].index || ea[i].fp != eb[i].fp || string(ea[i].result) != string(eb[i].result) {
			t.Fatalf("after %d puts, entry %d: %s at %d against %s at %d", after, i, ea[i].id, ea[i].index, eb[i].id, eb[i].index)
		}
	}
	require.Equal(t, a.bytes, b.bytes, "after %d puts", after)
	require.Equal(t, a.classes, b.classes, "after %d puts", after)
	require.Equal(t, a.byClass, b.byClass, "after %d puts", after)
	for q := range a.queues {
		require.Equal(t, a.queues[q].bytes, b.queues[q].bytes, "after %d puts: class %d's bytes", after, q)
	}
	for _, tab := range []*requestTable{a, b} {
		require.Equal(t, tab.len(), len(tab.byID), "after %d puts: the index holds what the queues hold", after)
	}
}

func TestUndecodableEntryStopsTheNode(t *testing.T) {
	for name, data := range map[string][]byte{
		"unknown type": {9, 0},
		"unknown kind": {byte(EntryBatch), 1, 77, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"truncated":    EncodeBatch([]*Request{txn(alloc("p", "", "o"))})[:8],
		"empty":        {},
	} {
		t.Run(name, func(t *testing.T) {
			f := New(nil)
			assert.Panics(t, func() { f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}) })
			assert.Equal(t, uint64(0), f.AppliedIndex(), "nothing applied")
		})
	}
}

func TestNonCommandEntriesAreSkipped(t *testing.T) {
	f := New(nil)
	out := f.ApplyBatch([]*raft.Log{{Index: 1, Type: raft.LogConfiguration, Data: []byte("not ours")},
		{Index: 2, Type: raft.LogCommand, Data: EncodeBatch([]*Request{{Kind: KindCreatePool, Pool: "p", Range: "1-10"}})}})
	assert.Nil(t, out[0])
	assert.Nil(t, out[1].(*Response).Results[0].Err)
	assert.Equal(t, uint64(2), f.AppliedIndex())
}

func TestEntryRoundTrip(t *testing.T) {
	reqs := []*Request{
		{Kind: KindTxn, ID: "a", Seed: 1<<63 + 5, Ops: []Op{alloc("p", "10.0.0.1", "o"), release("q", "30001", ""), {Kind: OpAllocate, Pool: "p", Count: 4096}}},
		{Kind: KindCreatePool, ID: "b", Pool: "p", Range: "10.0.0.0/24"},
		{Kind: KindDeletePool, Pool: "p"},
		{Kind: KindSetMember, Member: Member{ID: "n1", RaftAddr: "127.0.0.1:7081", APIAddr: "127.0.0.1:7080"}},
		{Kind: KindRemoveMember, Member: Member{ID: "n1"}},
		{Kind: KindSetClusterID, ID: "c", ClusterID: "5b0c2f4e-0000-4000-8000-000000000001"},
		{Kind: KindCreatePoolExclusive, ID: "d", Pool: "q", Range: "30000-30099"},
	}
	got, err := DecodeEntry(EncodeBatch(reqs))
	require.NoError(t, err)
	assert.Equal(t, reqs, got)
}

func TestResultRoundTrip(t *testing.T) {
	for _, r := range []*Result{
		{Index: 7},
		{Index: 8, Created: true},
		{Index: 9, Err: &Error{Code: CodeAlreadyAllocated, Message: "provided IP is already allocated", Op: 3, Owner: "x"}},
		{Index: 10, ops: [][]Allocation{{{Pool: "p", Value: "1", Owner: "o", Static: true, InStatic: true, Revision: 10}}, {}}},
	} {
		got, err := DecodeResult(EncodeResult(r))
		require.NoError(t, err)
		assert.Equal(t, r, got)
	}
}

// TestTxnResultEncoding: a transaction's result as the state machine
// makes it encodes to the same bytes as the allocations it gives, which is
// the form remembered results had before (and have on other replicas
// during an upgrade), and decodes to those allocations.
func TestTxnResultEncoding(t *testing.T) {
	h := newHarness(t)
	h.pool("v4", "10.96.0.0/12")
	h.pool("v6", "fd00:10:96::/108")
	h.pool("ports", "30000-32767")
	var held []Op // releases of what the transactions below allocated
	for i, ops := range [][]Op{
		{{Kind: OpAllocate, Pool: "v4", Owner: "svc-a", Count: 300}},
		{{Kind: OpAllocate, Pool: "v6", Owner: "svc-b", Count: 40}, {Kind: OpAllocate, Pool: "ports", Owner: "svc-b", Count: 7}},
		{alloc("v4", "10.96.0.5", "x"), alloc("v6", "fd00:10:96::0005", "y"), alloc("ports", "30005", ""), {Kind: OpAllocate, Pool: "ports"}},
		{release("v6", "fd00:10:96:0::5", "y"), release("ports", "30005", ""), alloc("ports", "30005", "z")},
	} {
		res := h.one(&Request{ID: fmt.Sprint("t", i), Kind: KindTxn, Ops: ops, Seed: uint64(i) + 7})
		require.Nil(t, res.Err, "transaction %d", i)
		allocs := res.Allocations()
		require.Len(t, allocs, len(ops))
		enc := EncodeResult(res)
		assert.Equal(t, EncodeResult(&Result{Index: res.Index, ops: allocs}), enc, "transaction %d", i)
		got, err := DecodeResult(enc)
		require.NoError(t, err)
		assert.Equal(t, allocs, got.Allocations(), "transaction %d", i)
		assert.Equal(t, res.Index, got.Index)
		for _, op := range allocs {
			for _, a := range op {
				if a.Pool == "v4" && !a.Static {
					held = append(held, release(a.Pool, a.Value, a.Owner))
				}
			}
		}
	}
	// A retry is answered from the remembered form.
	again := h.one(&Request{ID: "t2", Kind: KindTxn, Seed: 9,
		Ops: []Op{alloc("v4", "10.96.0.5", "x"), alloc("v6", "fd00:10:96::0005", "y"), alloc("ports", "30005", ""), {Kind: OpAllocate, Pool: "ports"}}})
	require.Nil(t, again.Err)
	assert.Equal(t, "fd00:10:96::5", again.Allocations()[1][0].Value, "the canonical form of the value")
	res := h.one(&Request{ID: "rel", Kind: KindTxn, Ops: held})
	require.Nil(t, res.Err)
	enc := EncodeResult(res)
	assert.Equal(t, EncodeResult(&Result{Index: res.Index, ops: res.Allocations()}), enc)
	for i, op := range res.Allocations() {
		require.Len(t, op, 1)
		assert.Equal(t, held[i].Value, op[0].Value)
		assert.Equal(t, held[i].Owner, op[0].Owner)
	}
}

// TestTxnResultBytes: remembered results are part of the replicated state
// (the request table, snapshots), so their bytes must not change between
// versions. The expected bytes were produced by the state machine before
// results were kept as applied operations (b454f46).
func TestTxnResultBytes(t *testing.T) {
	h := newHarness(t)
	h.pool("v4", "10.96.0.0/24")
	h.pool("v6", "fd00:10:96::/120")
	h.pool("ports", "30000-30099")
	var out []string
	for i, ops := range [][]Op{
		{{Kind: OpAllocate, Pool: "v4", Owner: "svc-a", Count: 3}, {Kind: OpAllocate, Pool: "ports", Owner: "svc-a"}},
		{alloc("v4", "10.96.0.5", "x"), alloc("v6", "FD00:10:96::0005", "y"), alloc("ports", "30005", "")},
		{release("v6", "fd00:10:96:0::5", "y"), release("ports", "30005", ""), alloc("ports", "30005", "z")},
	} {
		res := h.one(&Request{ID: fmt.Sprint("g", i), Kind: KindTxn, Ops: ops, Seed: uint64(i) + 42})
		require.Nil(t, res.Err, "transaction %d", i)
		out = append(out, hex.EncodeToString(EncodeResult(res)))
	}
	assert.Equal(t, []string{
		"04000002030276340a31302e39362e302e3634057376632d610000040276340a31302e39362e302e3738057376632d610000040276340b31302e39362e302e323237057376632d610000040105706f727473053330303838057376632d61000004",
		"05000003010276340931302e39362e302e350178010105010276360d666430303a31303a39363a3a3501790101050105706f72747305333030303500010105",
		"06000003010276360d666430303a31303a39363a3a3501790101050105706f727473053330303035000101050105706f727473053330303035017a010106",
	}, out)
}

// TestDeterminism: replicas fed the same entries end in the same state.
func TestDeterminism(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	rng := rand.New(rand.NewPCG(1, 2))
	entries := randomEntries(rng, 300)
	for _, e := range entries {
		a.apply(e...)
		b.apply(e...)
	}
	require.Equal(t, dump(a.f), dump(b.f))
	require.Equal(t, a.f.s.requests.len(), b.f.s.requests.len())
}

// dump returns every pool's range, bitmap bytes and allocations.
func dump(f *FSM) map[string]any {
	out := map[string]any{}
	for _, p := range f.Pools() {
		rng, data, err := f.RangeAllocation(p.Name)
		if err != nil {
			panic(err)
		}
		allocs, _, err := f.List(p.Name, "", "", 1<<21)
		if err != nil {
			panic(err)
		}
		out[p.Name] = []any{rng, data, allocs}
	}
	return out
}

// TestModel checks every result of a random workload against a naive model
// (pool -> value -> owner): no value held twice, failures exactly when the
// model says so, and the state equal to the model after every entry.
func TestModel(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			h := newHarness(t)
			model := map[string]map[string]string{"ip": {}, "port": {}}
			sizes := map[string]int{"ip": 30, "port": 41}
			seen := map[string]*Result{}
			fps := map[string]uint64{}
			for _, e := range randomEntries(rand.New(rand.NewPCG(seed, 7)), 400) {
				results := h.apply(e...)
				for i, req := range e {
					res := results[i]
					if req.Kind != KindTxn {
						continue
					}
					if prev, ok := seen[req.ID]; ok {
						if fps[req.ID] == req.Fingerprint() {
							require.Equal(t, answer(prev), answer(res), "request %s retried returns its first answer", req.ID)
						} else {
							require.NotNil(t, res.Err)
							require.Equal(t, CodeIdempotencyKeyReused, res.Err.Code, "request %s reused for another body", req.ID)
						}
						continue
					}
					seen[req.ID], fps[req.ID] = res, req.Fingerprint()
					checkTxnAgainstModel(t, model, sizes, req, res)
				}
				for name, held := range model {
					got, _, err := h.f.List(name, "", "", 10000)
					require.NoError(t, err)
					gotMap := map[string]string{}
					for _, a := range got {
						gotMap[a.Value] = a.Owner
					}
					require.Equal(t, held, gotMap, "pool %s after entry %d", name, h.index)
				}
			}
		})
	}
}

// checkTxnAgainstModel replays a transaction on a copy of the model and
// checks the FSM's verdict; on success the copy becomes the model.
func checkTxnAgainstModel(t *testing.T, model map[string]map[string]string, sizes map[string]int, req *Request, res *Result) {
	t.Helper()
	work := map[string]map[string]string{}
	for p, m := range model {
		work[p] = map[string]string{}
		for v, o := range m {
			work[p][v] = o
		}
	}
	for i, op := range req.Ops {
		m := work[op.Pool]
		failed := func(code Code) bool {
			return res.Err != nil && res.Err.Op == i && res.Err.Code == code
		}
		switch {
		case op.Kind == OpRelease:
			owner, held := m[op.Value]
			switch {
			case failed(CodeNotInRange) || failed(CodeInvalidArgument):
				return
			case !held:
				require.True(t, failed(CodeNotAllocated), "release of free %s: %+v", op.Value, res.Err)
				return
			case op.Owner != "" && owner != op.Owner:
				require.True(t, failed(CodeOwnerMismatch), "release of %s held by %s, precondition %s: %+v", op.Value, owner, op.Owner, res.Err)
				return
			}
			delete(m, op.Value)
		case op.Value != "":
			if failed(CodeNotInRange) || failed(CodeInvalidArgument) {
				return
			}
			if _, held := m[op.Value]; held {
				require.True(t, failed(CodeAlreadyAllocated), "allocate of held %s: %+v", op.Value, res.Err)
				return
			}
			m[op.Value] = op.Owner
		default:
			n := max(op.Count, 1)
			if sizes[op.Pool]-len(m) < n {
				require.True(t, failed(CodeRangeFull), "count %d with %d free: %+v", n, sizes[op.Pool]-len(m), res.Err)
				return
			}
			if res.Err != nil {
				// A later op failed and this one was rolled back: its values
				// are unknown, so the rest of the transaction cannot be judged.
				require.Greater(t, res.Err.Op, i, "dynamic allocate with room failed: %+v", res.Err)
				return
			}
			for _, a := range res.Allocations()[i] {
				_, held := m[a.Value]
				require.False(t, held, "dynamic allocate handed out held value %s", a.Value)
				m[a.Value] = op.Owner
			}
		}
	}
	require.Nil(t, res.Err, "the model expects success")
	for p, m := range work {
		model[p] = m
	}
}

// randomEntries builds a workload over two small pools.
func randomEntries(rng *rand.Rand, n int) [][]*Request {
	var out [][]*Request
	out = append(out, []*Request{{Kind: KindCreatePool, Pool: "ip", Range: "10.0.0.0/27"}, {Kind: KindCreatePool, Pool: "port", Range: "30000-30040"}})
	pools := []struct{ name, base string }{{"ip", "10.0.0."}, {"port", "300"}}
	for i := 0; i < n; i++ {
		var reqs []*Request
		for j := 0; j < 1+rng.IntN(4); j++ {
			var ops []Op
			for k := 0; k < 1+rng.IntN(3); k++ {
				p := pools[rng.IntN(2)]
				v := ""
				if rng.IntN(2) == 0 {
					if p.name == "ip" {
						v = fmt.Sprintf("10.0.0.%d", 1+rng.IntN(32))
					} else {
						v = fmt.Sprintf("%d", 30000+rng.IntN(45))
					}
				}
				owner := fmt.Sprintf("o%d", rng.IntN(3))
				switch rng.IntN(3) {
				case 0, 1:
					ops = append(ops, Op{Kind: OpAllocate, Pool: p.name, Value: v, Owner: owner, Count: rng.IntN(2)})
				default:
					if v == "" {
						v = "30001"
					}
					if rng.IntN(2) == 0 {
						owner = ""
					}
					ops = append(ops, Op{Kind: OpRelease, Pool: p.name, Value: v, Owner: owner})
				}
			}
			reqs = append(reqs, &Request{Kind: KindTxn, ID: fmt.Sprintf("r%d", rng.IntN(n)), Seed: rng.Uint64(), Ops: ops})
		}
		out = append(out, reqs)
	}
	return out
}

// TestBodySize checks that bodySize bounds encodeBody's output, so that
// EncodeBatch and Fingerprint allocate their buffers once.
func TestBodySize(t *testing.T) {
	long := string(make([]byte, MaxOwnerLen))
	reqs := []*Request{
		{Kind: KindCreatePool, Pool: "clusterip-ipv4", Range: "10.96.0.0/12"},
		{Kind: KindDeletePool, Pool: "p"},
		{Kind: KindSetMember, Member: Member{ID: "n1", RaftAddr: "10.0.0.1:7081", APIAddr: "10.0.0.1:7080"}},
		{Kind: KindRemoveMember, Member: Member{ID: "n1"}},
		{Kind: KindTxn, Ops: []Op{{Kind: OpAllocate, Pool: "p", Owner: long, Count: MaxCount}}},
	}
	big := &Request{Kind: KindTxn}
	for i := 0; i < MaxOps; i++ {
		big.Ops = append(big.Ops, release("clusterip-ipv4", fmt.Sprintf("10.96.%d.%d", i/256, i%256), long))
	}
	for _, r := range append(reqs, big) {
		e := encoder{}
		encodeBody(&e, r)
		assert.LessOrEqual(t, len(e.b), bodySize(r), "kind %d", r.Kind)
	}
}

func TestClusterID(t *testing.T) {
	h := newHarness(t)
	res := h.one(&Request{Kind: KindSetClusterID, ClusterID: "first"})
	require.Nil(t, res.Err)
	assert.True(t, res.Created)
	res = h.one(&Request{Kind: KindSetClusterID, ClusterID: "second"})
	require.Nil(t, res.Err)
	assert.False(t, res.Created, "only the first ID applied counts")
	assert.Equal(t, "first", h.f.ClusterID())
	for _, bad := range []string{"", "with space", strings.Repeat("x", MaxClusterID+1)} {
		res := h.one(&Request{Kind: KindSetClusterID, ClusterID: bad})
		require.NotNil(t, res.Err, "%q", bad)
		assert.Equal(t, CodeInvalidArgument, res.Err.Code)
	}
	var snap bytes.Buffer
	require.NoError(t, h.f.WriteBackup(&snap))
	g := New(nil)
	var learned []string
	g.OnClusterID(func(id string) { learned = append(learned, id) })
	require.NoError(t, g.Restore(io.NopCloser(&snap)))
	assert.Equal(t, "first", g.ClusterID(), "kept in snapshots")
	assert.Equal(t, []string{"first"}, learned, "and told when learned")
}

func TestPoolOverlap(t *testing.T) {
	h := newHarness(t)
	// Entries of kind create-pool, written before the rule existed, apply
	// as they always did: the log of an older cluster replays the same.
	old := newHarness(t)
	old.pool("a", "10.96.0.0/16")
	assert.Nil(t, old.one(&Request{Kind: KindCreatePool, Pool: "wide", Range: "10.96.0.0/12"}).Err)
	h.pool("a", "10.96.0.0/16")
	h.pool("b", "30000-32767")
	h.pool("c", "fd00::/112")
	h.pool("a2", "10.98.0.0/16")
	cases := []struct {
		name, rng string
		other     string // the overlapping pool named, "" for none
	}{
		{"x", "10.96.0.0/12", "a"}, // a bigger range around a and a2: the first by name
		{"x", "10.96.0.0/24", "a"},
		{"x", "10.96.255.0/24", "a"},
		{"x", "10.98.0.0/12", "a"},
		{"x", "32000-33000", "b"},
		{"x", "29000-30000", "b"},
		{"x", "fd00::/120", "c"},
		{"b", "30000-32767", ""}, // the same pool again is no overlap
		{"x", "10.97.0.0/16", ""},
		{"y", "32768-32999", ""},
		{"z", "fd00::1:0/112", ""},
	}
	for _, c := range cases {
		before := len(h.f.Pools())
		res := h.one(&Request{Kind: KindCreatePoolExclusive, Pool: c.name, Range: c.rng})
		if c.other == "" {
			assert.Nil(t, res.Err, "create %s %s", c.name, c.rng)
			continue
		}
		require.NotNil(t, res.Err, "create %s %s", c.name, c.rng)
		assert.Equal(t, CodePoolOverlap, res.Err.Code)
		assert.Equal(t, c.other, res.Err.Owner, "create %s %s names the pool it overlaps", c.name, c.rng)
		assert.Contains(t, res.Err.Message, c.other)
		assert.Len(t, h.f.Pools(), before, "a refused pool changes nothing")
	}
}

// TestKeyedResultsOutliveLargeDrawnOnes: from level 4 the byte bound is
// per class, so large answers to writes without a key (drawn IDs) never
// evict a keyed result a client may still retry. Below it, 300 answers of
// 1 MiB evicted it.
func TestKeyedResultsOutliveLargeDrawnOnes(t *testing.T) {
	big := make([]byte, 1<<20)
	for _, level := range []uint64{3, 4} {
		t.Run(fmt.Sprint("level=", level), func(t *testing.T) {
			s := newState()
			require.Nil(t, s.setFeatureLevel(level).Err)
			s.requests.put(&requestEntry{id: "client-key", index: 1, result: EncodeResult(&Result{Index: 1})})
			for i := range 300 {
				s.requests.put(&requestEntry{id: fmt.Sprintf("%s%d", DrawnRequestPrefix, i), index: uint64(i + 2), result: big})
			}
			kept := s.requests.get("client-key") != nil
			if level < 4 {
				assert.False(t, kept, "below level 4 replicas replay the old rule")
				return
			}
			assert.True(t, kept, "the keyed result outlives 300 MiB of drawn ones")
			d := &s.requests.queues[drawnRequests]
			assert.LessOrEqual(t, d.bytes, DrawnRequestBytes, "drawn results stay within their bound")
			assert.InDelta(t, DrawnRequestBytes/len(big), d.len(), 1, "about 64 results of 1 MiB kept")
		})
	}
}

// TestRequestTableBytesByClassReplay: with large results, a table read
// from a snapshot and given the same puts evicts what the live one does,
// across the raise to level 4 (which trims the drawn class at once) and
// after it.
func TestRequestTableBytesByClassReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	// Results that decode, of 0 to 16 findings of 60 KB each.
	var results [][]byte
	for k := 0; k <= 16; k++ {
		r := &Result{Index: 1, Findings: make([]Finding, k)}
		for i := range r.Findings {
			r.Findings[i] = Finding{Type: FindingLeak, Message: strings.Repeat("m", 60_000)}
		}
		results = append(results, EncodeResult(r))
	}
	live := newState()
	require.Nil(t, live.setFeatureLevel(levelRequestClasses).Err)
	replayAgainstSnapshots(t, live, 2_000, 700, levelServiceRules, 250, func(i int) requestEntry {
		id := fmt.Sprintf("k-%d", i)
		if rng.IntN(3) > 0 {
			id = fmt.Sprintf("%s%d", DrawnRequestPrefix, i)
		}
		return requestEntry{id: id, index: uint64(i + 1), fp: rng.Uint64(), result: results[rng.IntN(len(results))]}
	})
	assert.LessOrEqual(t, live.requests.queues[keyedRequests].bytes, RequestTableBytes)
	assert.LessOrEqual(t, live.requests.queues[drawnRequests].bytes, DrawnRequestBytes)
}
