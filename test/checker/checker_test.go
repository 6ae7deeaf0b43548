package checker

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Builders for hand-written histories in pool "p"; times are small
// integers, and every allocate's owner is unique to it.

// alloc is a static allocate of value by owner (key k) that answered OK.
func alloc(c int, value, owner, k string, call, ret int64) Op {
	return Op{Client: c, Kind: KindAllocate, Pool: "p", Value: value, Owner: owner, Key: k, Call: call, Return: ret, Outcome: OK, Result: value}
}

// dyn is a dynamic allocate by owner (key k) that answered OK with result.
func dyn(c int, owner, k string, call, ret int64, result string) Op {
	return Op{Client: c, Kind: KindAllocate, Pool: "p", Owner: owner, Key: k, Call: call, Return: ret, Outcome: OK, Result: result}
}

// release is a release of value with precondition pre that answered OK.
func release(c int, value, pre, k string, call, ret int64) Op {
	return Op{Client: c, Kind: KindRelease, Pool: "p", Value: value, Owner: pre, Key: k, Call: call, Return: ret, Outcome: OK}
}

// get is a get of value that saw holder ("" free).
func get(c int, value string, call, ret int64, holder string) Op {
	return Op{Client: c, Kind: KindGet, Pool: "p", Value: value, Call: call, Return: ret, Outcome: OK, Result: holder}
}

// list is a list of pool "p" that saw held.
func list(c int, call, ret int64, held map[string]string) Op {
	return Op{Client: c, Kind: KindList, Pool: "p", Call: call, Return: ret, Outcome: OK, Listed: held}
}

// failed turns op into a failure with code err, reporting holder.
func failed(op Op, err, holder string) Op {
	op.Outcome, op.Err, op.Result = Fail, err, holder
	return op
}

// unknown turns op into one whose outcome is unknown.
func unknown(op Op) Op {
	op.Outcome, op.Err, op.Result = Unknown, "", ""
	return op
}

// retry turns op into attempt n of its key, over [call, ret].
func retry(op Op, n int, call, ret int64) Op {
	op.Attempt, op.Call, op.Return = n, call, ret
	return op
}

// The checkers' names, as their Reports give them.
const (
	wellFormed  = "well formed"
	linearizes  = "linearizable"
	doubleOwner = "no double owner"
	lostAck     = "no lost ack"
	badRetry    = "idempotent retries"
	phantom     = "no phantom"
)

// historyCase is a history, the final state of pool "p" after it, and
// the checkers that must flag it; every other checker must accept it.
type historyCase struct {
	name  string
	h     History
	final map[string]string
	bad   []string
}

// historyCases is the one table every checker is judged on.
var historyCases = []historyCase{
	// Correct histories.
	{name: "sequential allocate, release, allocate", final: map[string]string{"1": "b"}, h: History{
		dyn(0, "a", "k1", 1, 2, "1"), release(0, "1", "a", "k2", 3, 4), alloc(1, "1", "b", "k3", 5, 6), get(2, "1", 7, 8, "b")}},
	{name: "concurrent allocates of one value: one wins", final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 5), failed(alloc(1, "1", "b", "k2", 2, 6), CodeAlreadyAllocated, "a")}},
	{name: "concurrent allocates: the one called first takes effect last", final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 10), alloc(1, "1", "b", "k2", 2, 3), release(1, "1", "b", "k3", 4, 5), get(2, "1", 11, 12, "a")}},
	{name: "get concurrent with an allocate sees it or not", final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 6), get(1, "1", 2, 3, ""), get(2, "1", 4, 5, "a"), get(3, "1", 2, 5, "")}},
	{name: "get concurrent with a release sees it or not", final: map[string]string{}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), release(0, "1", "", "k2", 3, 8), get(1, "1", 4, 5, "a"), get(2, "1", 6, 7, "")}},
	{name: "unknown allocate that applied", final: map[string]string{"1": "a"}, h: History{
		unknown(alloc(0, "1", "a", "k1", 1, 2)), get(1, "1", 3, 4, "a"), failed(alloc(2, "1", "b", "k2", 5, 6), CodeAlreadyAllocated, "a")}},
	{name: "unknown allocate that did not apply", final: map[string]string{"1": "b"}, h: History{
		unknown(alloc(0, "1", "a", "k1", 1, 2)), get(1, "1", 3, 4, ""), alloc(2, "1", "b", "k2", 5, 6)}},
	{name: "unknown allocate that applied late, after a read of free", final: map[string]string{"1": "a"}, h: History{
		unknown(alloc(0, "1", "a", "k1", 1, 2)), get(1, "1", 3, 4, ""), get(1, "1", 5, 6, "a")}},
	{name: "unknown dynamic allocate seen by a get", final: map[string]string{"2": "a"}, h: History{
		unknown(dyn(0, "a", "k1", 1, 2, "")), get(1, "2", 3, 4, "a")}},
	{name: "unknown dynamic allocate seen by a failure and a release", final: map[string]string{}, h: History{
		unknown(dyn(0, "a", "k1", 1, 2, "")), failed(alloc(1, "3", "b", "k2", 3, 4), CodeAlreadyAllocated, "a"),
		release(2, "3", "a", "k3", 5, 6), get(1, "3", 7, 8, "")}},
	{name: "unknown dynamic allocate nobody saw explains an unconditional release", final: map[string]string{}, h: History{
		unknown(dyn(0, "a", "k1", 1, 2, "")), release(1, "4", "", "k2", 3, 4), get(2, "4", 5, 6, "")}},
	{name: "unknown dynamic allocate nobody saw explains a failure naming no holder", final: map[string]string{"3": "a"}, h: History{
		unknown(dyn(0, "a", "k1", 1, 2, "")), failed(alloc(1, "3", "b", "k2", 3, 4), CodeAlreadyAllocated, "")}},
	{name: "unknown release naming an unseen allocate's owner frees it", final: map[string]string{"4": "b"}, h: History{
		unknown(dyn(0, "g", "k1", 1, 2, "")), failed(alloc(1, "4", "a", "k2", 3, 4), CodeAlreadyAllocated, ""),
		unknown(release(2, "4", "g", "k3", 5, 6)), alloc(1, "4", "b", "k4", 7, 8)}},
	{name: "unknown release that applied", final: map[string]string{}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), unknown(release(0, "1", "a", "k2", 3, 4)), get(1, "1", 5, 6, "")}},
	{name: "unknown release that did not apply", final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), unknown(release(0, "1", "a", "k2", 3, 4)), get(1, "1", 5, 6, "a")}},
	{name: "retry after unknown returns the first answer", final: map[string]string{"3": "a"}, h: History{
		unknown(dyn(0, "a", "k1", 1, 2, "")), retry(dyn(0, "a", "k1", 0, 0, "3"), 1, 3, 4), get(1, "3", 5, 6, "a")}},
	{name: "retry after unknown returns the first failure", final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), unknown(alloc(1, "1", "b", "k2", 3, 4)),
		retry(failed(alloc(1, "1", "b", "k2", 0, 0), CodeAlreadyAllocated, "a"), 1, 5, 6)}},
	{name: "retry after no leader", final: map[string]string{"1": "a"}, h: History{
		failed(alloc(0, "1", "a", "k1", 1, 2), "NoLeader", ""), retry(alloc(0, "1", "a", "k1", 0, 0), 1, 3, 4), get(1, "1", 5, 6, "a")}},
	{name: "retries that all timed out, applied", final: map[string]string{"1": "a"}, h: History{
		unknown(alloc(0, "1", "a", "k1", 1, 2)), retry(unknown(alloc(0, "1", "a", "k1", 0, 0)), 1, 3, 4), get(1, "1", 5, 6, "a")}},
	{name: "release refused: owner mismatch, not allocated", final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), failed(release(1, "1", "b", "k2", 3, 4), CodeOwnerMismatch, "a"),
		failed(release(1, "2", "", "k3", 5, 6), CodeNotAllocated, "")}},
	{name: "failures that change nothing", final: map[string]string{}, h: History{
		failed(alloc(0, "1", "a", "k1", 1, 2), "NoLeader", ""), failed(dyn(1, "b", "k2", 1, 2, ""), CodeRangeFull, ""),
		failed(alloc(2, "99", "c", "k3", 1, 2), CodeNotInRange, ""), get(1, "1", 3, 4, "")}},
	{name: "a get answered NotAllocated reads free", final: map[string]string{}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), release(0, "1", "a", "k2", 3, 4), failed(get(1, "1", 5, 6, ""), CodeNotAllocated, "")}},
	{name: "retry after unknown: its one value seen by a get, a list and its release", final: map[string]string{"3": "b"}, h: History{
		unknown(dyn(0, "a", "k1", 1, 2, "")), retry(dyn(0, "a", "k1", 0, 0, "3"), 1, 3, 4), get(1, "3", 5, 6, "a"),
		list(2, 7, 8, map[string]string{"3": "a"}), release(0, "3", "a", "k2", 9, 10), dyn(1, "b", "k3", 11, 12, "3")}},
	{name: "lists see allocations and releases", final: map[string]string{"2": "b"}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), dyn(1, "b", "k2", 1, 3, "2"), list(2, 4, 5, map[string]string{"1": "a", "2": "b"}),
		release(0, "1", "a", "k3", 6, 7), list(2, 8, 9, map[string]string{"2": "b"})}},

	// Incorrect histories.
	{name: "duplicate allocation", final: map[string]string{"1": "b"}, bad: []string{linearizes, doubleOwner, lostAck}, h: History{
		dyn(0, "a", "k1", 1, 2, "1"), dyn(1, "b", "k2", 3, 4, "1")}},
	{name: "duplicate allocation with another owner's release between", final: map[string]string{"1": "b"},
		bad: []string{linearizes, doubleOwner, lostAck}, h: History{
			alloc(0, "1", "a", "k1", 1, 2), unknown(release(1, "1", "c", "k2", 3, 4)), alloc(2, "1", "b", "k3", 5, 6)}},
	{name: "lost release", final: map[string]string{"1": "a"}, bad: []string{linearizes, phantom}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), release(0, "1", "a", "k2", 3, 4), failed(alloc(1, "1", "b", "k3", 5, 6), CodeAlreadyAllocated, "a")}},
	{name: "lost release seen by a get", final: map[string]string{}, bad: []string{linearizes}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), release(0, "1", "", "k2", 3, 4), get(1, "1", 5, 6, "a")}},
	{name: "stale read of an old owner after a completed release", final: map[string]string{"1": "b"}, bad: []string{linearizes}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), release(0, "1", "a", "k2", 3, 4), alloc(1, "1", "b", "k3", 5, 6), get(2, "1", 7, 8, "a")}},
	{name: "stale read in a list", final: map[string]string{"1": "b"}, bad: []string{linearizes}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), release(0, "1", "a", "k2", 3, 4), alloc(1, "1", "b", "k3", 5, 6),
		list(2, 7, 8, map[string]string{"1": "a"})}},
	{name: "stale read of free after an acknowledged allocation", final: map[string]string{"1": "a"}, bad: []string{linearizes}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), get(1, "1", 3, 4, "")}},
	{name: "failure names a holder the value never had", final: map[string]string{"1": "a"}, bad: []string{linearizes}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), failed(alloc(1, "1", "b", "k2", 3, 4), CodeAlreadyAllocated, "ghost")}},
	{name: "unknown dynamic allocate seen elsewhere explains nothing here", final: map[string]string{"1": "g"}, bad: []string{linearizes}, h: History{
		unknown(dyn(0, "g", "k1", 1, 2, "")), get(1, "1", 3, 4, "g"), release(2, "2", "", "k2", 5, 6)}},
	{name: "unknown dynamic allocate nobody saw explains nothing before its call", final: map[string]string{}, bad: []string{linearizes}, h: History{
		release(1, "4", "", "k2", 1, 2), unknown(dyn(0, "g", "k1", 3, 4, ""))}},
	{name: "value an unseen allocate took reads free with no release", final: map[string]string{}, bad: []string{linearizes}, h: History{
		unknown(dyn(0, "g", "k1", 1, 2, "")), failed(alloc(1, "4", "a", "k2", 3, 4), CodeAlreadyAllocated, ""), get(2, "4", 5, 6, "")}},
	{name: "lost acknowledged allocation", final: map[string]string{}, bad: []string{lostAck}, h: History{
		alloc(0, "1", "a", "k1", 1, 2)}},
	{name: "acknowledged allocation overwritten", final: map[string]string{"1": "x"}, bad: []string{lostAck, phantom}, h: History{
		dyn(0, "a", "k1", 1, 2, "1")}},
	{name: "retry applied twice leaves a phantom", final: map[string]string{"1": "a", "2": "a"}, bad: []string{badRetry, phantom}, h: History{
		unknown(dyn(0, "a", "k1", 1, 2, "")), retry(dyn(0, "a", "k1", 0, 0, "2"), 1, 3, 4)}},
	{name: "unknown dynamic allocate holds two values", final: map[string]string{"1": "a", "2": "a"}, bad: []string{badRetry, phantom}, h: History{
		unknown(dyn(0, "a", "k1", 1, 2, "")), retry(unknown(dyn(0, "a", "k1", 0, 0, "")), 1, 3, 4)}},
	{name: "failed allocate applied anyway", final: map[string]string{"1": "b"}, bad: []string{phantom}, h: History{
		failed(alloc(0, "1", "b", "k1", 1, 2), "NoLeader", "")}},
	{name: "retry answered another value", final: map[string]string{"1": "a", "2": "a"}, bad: []string{badRetry, phantom}, h: History{
		dyn(0, "a", "k1", 1, 2, "1"), retry(dyn(0, "a", "k1", 0, 0, "2"), 1, 3, 4)}},
	{name: "retry under a fresh request ID: a get sees the lost first value, later released", final: map[string]string{"2": "a"},
		bad: []string{linearizes, badRetry}, h: History{
			unknown(dyn(0, "a", "k1", 1, 2, "")), retry(dyn(0, "a", "k1", 0, 0, "2"), 1, 3, 4), get(1, "1", 5, 6, "a"),
			release(2, "1", "", "k2", 7, 8)}},
	{name: "node retried under a fresh request ID: one attempt, a list sees its owner hold two values",
		final: map[string]string{"1": "a", "2": "a"}, bad: []string{linearizes, badRetry, phantom}, h: History{
			dyn(0, "a", "k1", 1, 4, "2"), list(1, 5, 6, map[string]string{"1": "a", "2": "a"})}},
	{name: "retry answered OK after a failure", final: map[string]string{"1": "b"}, bad: []string{linearizes, doubleOwner, lostAck, badRetry}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), failed(alloc(1, "1", "b", "k2", 3, 4), CodeAlreadyAllocated, "a"),
		retry(alloc(1, "1", "b", "k2", 0, 0), 1, 5, 6)}},
	{name: "retry refused as a reused key", final: map[string]string{}, bad: []string{badRetry}, h: History{
		unknown(alloc(0, "1", "a", "k1", 1, 2)), retry(failed(alloc(0, "1", "a", "k1", 0, 0), CodeIdempotencyKeyReused, ""), 1, 3, 4)}},
	{name: "malformed: unknown kind, owner and key reused", final: map[string]string{"1": "a"}, bad: []string{wellFormed}, h: History{
		alloc(0, "1", "a", "k1", 1, 2), {Client: 1, Kind: "frobnicate", Pool: "p", Call: 3, Return: 4},
		failed(alloc(1, "2", "a", "k2", 5, 6), CodeNotInRange, ""), unknown(release(2, "3", "", "k2", 7, 8))}},
	{name: "malformed: a static allocate answered another value", final: map[string]string{"1": "a"}, bad: []string{wellFormed}, h: History{
		{Client: 0, Kind: KindAllocate, Pool: "p", Value: "1", Owner: "a", Key: "k1", Call: 1, Return: 2, Outcome: OK, Result: "7"}}},
}

func finalOf(tc historyCase) map[string]map[string]string {
	return map[string]map[string]string{"p": tc.final}
}

const checkTimeout = 10 * time.Second

func TestCheckers(t *testing.T) {
	for _, tc := range historyCases {
		t.Run(tc.name, func(t *testing.T) {
			bad := map[string]bool{}
			for _, name := range tc.bad {
				bad[name] = true
			}
			reports := CheckAll(tc.h, finalOf(tc), checkTimeout, "")
			require.Len(t, reports, 6)
			for _, r := range reports {
				assert.Equal(t, !bad[r.Name], r.OK, "%s: OK = %v, want %v\n%s", r.Name, r.OK, !bad[r.Name], r)
				assert.Equal(t, r.OK, len(r.Problems) == 0, "%s: problems exactly when not OK", r.Name)
				delete(bad, r.Name)
			}
			assert.Empty(t, bad, "the case names checkers CheckAll did not run")
		})
	}
}

func TestCheckLinearizable(t *testing.T) {
	for _, tc := range historyCases {
		t.Run(tc.name, func(t *testing.T) {
			want := porcupine.Ok
			for _, name := range tc.bad {
				if name == linearizes {
					want = porcupine.Illegal
				}
			}
			res, err := CheckLinearizable(tc.h, checkTimeout, "")
			require.Equal(t, want, res, "CheckLinearizable = %v (%v), want %v", res, err, want)
			if want == porcupine.Ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, ErrNotLinearizable)
				assert.Contains(t, err.Error(), "p/")
			}
		})
	}
}

func caseNamed(t *testing.T, name string) historyCase {
	t.Helper()
	for _, tc := range historyCases {
		if tc.name == name {
			return tc
		}
	}
	t.Fatalf("no case %q", name)
	return historyCase{}
}

func TestReportsNameTheOperations(t *testing.T) {
	tc := caseNamed(t, "duplicate allocation")
	rep := CheckNoDoubleOwner(tc.h)
	require.False(t, rep.OK)
	require.Len(t, rep.Problems, 1)
	assert.Contains(t, rep.Problems[0], `p/1`)
	assert.Contains(t, rep.Problems[0], `key="k1"`)
	assert.Contains(t, rep.Problems[0], `key="k2"`)

	rep = CheckNoLostAck(tc.h, finalOf(tc))
	require.False(t, rep.OK)
	assert.Contains(t, rep.Problems[0], `key="k1"`)
	assert.Contains(t, rep.Problems[0], `held by "b"`)

	rep = CheckIdempotentRetries(caseNamed(t, "retry answered another value").h, nil)
	require.False(t, rep.OK)
	assert.Contains(t, rep.Problems[0], `key "k1" answered ok "1" (attempt 0 [1,2]), then ok "2" (attempt 1 [3,4])`)

	tc = caseNamed(t, "retry under a fresh request ID: a get sees the lost first value, later released")
	rep = CheckIdempotentRetries(tc.h, nil)
	require.False(t, rep.OK, "the history alone shows it, without the final state")
	require.Len(t, rep.Problems, 1)
	assert.Contains(t, rep.Problems[0], `owner="a" key="k1"`)
	assert.Contains(t, rep.Problems[0], `seen holding ["1" "2"]`)

	_, err := CheckLinearizable(caseNamed(t, "stale read of an old owner after a completed release").h, checkTimeout, "")
	assert.EqualError(t, err, "not linearizable: p/1")
}

func TestVisualisationWrittenWhenNotLinearizable(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.html")
	h := caseNamed(t, "duplicate allocation").h
	h = append(h, alloc(2, "9", "z", "k9", 1, 2)) // a linearizable value beside the illegal one
	res, err := CheckLinearizable(h, checkTimeout, bad)
	require.Equal(t, porcupine.Illegal, res)
	require.ErrorIs(t, err, ErrNotLinearizable)
	assert.Contains(t, err.Error(), bad)
	data, err := os.ReadFile(bad)
	require.NoError(t, err)
	assert.Contains(t, string(data), "<html")
	assert.Contains(t, string(data), "k2", "the visualisation describes the operations")
	assert.NotContains(t, string(data), "k9", "only illegal values are drawn")

	good := filepath.Join(dir, "good.html")
	res, err = CheckLinearizable(caseNamed(t, "sequential allocate, release, allocate").h, checkTimeout, good)
	require.Equal(t, porcupine.Ok, res)
	require.NoError(t, err)
	assert.NoFileExists(t, good)

	res, err = CheckLinearizable(caseNamed(t, "duplicate allocation").h, checkTimeout, filepath.Join(dir, "no", "such", "dir.html"))
	assert.Equal(t, porcupine.Illegal, res)
	assert.ErrorIs(t, err, ErrNotLinearizable)
	assert.ErrorContains(t, err, "writing the visualisation")
}

func TestCheckLinearizableTimeout(t *testing.T) {
	h := caseNamed(t, "lists see allocations and releases").h
	res, err := CheckLinearizable(h, time.Nanosecond, "")
	assert.Equal(t, porcupine.Unknown, res)
	assert.ErrorIs(t, err, ErrUndecided)
	for _, r := range CheckAll(h, nil, time.Nanosecond, "") {
		if r.Name == linearizes {
			assert.False(t, r.OK, "a timed-out check proves nothing: %s", r)
		}
	}
}

func TestCheckAll(t *testing.T) {
	tc := caseNamed(t, "retry after unknown returns the first answer")
	var names []string
	for _, r := range CheckAll(tc.h, nil, checkTimeout, "") {
		names = append(names, r.Name)
		assert.True(t, r.OK, "%s", r)
		assert.Positive(t, r.Checked, "%s judged nothing", r.Name)
	}
	assert.Equal(t, []string{wellFormed, linearizes, doubleOwner, badRetry}, names, "without a final state")
	names = nil
	for _, r := range CheckAll(tc.h, finalOf(tc), checkTimeout, "") {
		names = append(names, r.Name)
	}
	assert.Equal(t, []string{wellFormed, linearizes, doubleOwner, badRetry, lostAck, phantom}, names)
}

func TestProblemsAreCapped(t *testing.T) {
	var h History
	for i := range 2 * maxProblems {
		owner := string(rune('A'+i%26)) + strings.Repeat("x", i/26)
		h = append(h, dyn(i, owner, owner, int64(2*i), int64(2*i+1), "1"))
	}
	rep := CheckNoDoubleOwner(h)
	require.False(t, rep.OK)
	require.Len(t, rep.Problems, maxProblems+1)
	assert.Contains(t, rep.Problems[maxProblems], "more")
}

func TestCollapse(t *testing.T) {
	a := alloc(0, "1", "a", "k", 1, 2)
	for _, tc := range []struct {
		name     string
		attempts History
		want     Outcome
		result   string
		err      string
		call     int64
		ret      int64
	}{
		{"one attempt", History{a}, OK, "1", "", 1, 2},
		{"unknown, then ok", History{unknown(a), retry(a, 1, 3, 4)}, OK, "1", "", 1, 4},
		{"attempts out of order", History{retry(a, 1, 3, 4), unknown(a)}, OK, "1", "", 1, 4},
		{"unknown, then a decided failure", History{unknown(a), retry(failed(a, CodeAlreadyAllocated, "x"), 1, 3, 4)},
			Fail, "x", CodeAlreadyAllocated, 1, 4},
		{"ok wins over a failure", History{failed(a, CodeAlreadyAllocated, "x"), retry(a, 1, 3, 4)}, OK, "1", "", 1, 4},
		{"unknown, then no leader", History{unknown(a), retry(failed(a, "NoLeader", ""), 1, 3, 4)}, Unknown, "", "", 1, never},
		{"no leader twice", History{failed(a, "NoLeader", ""), retry(failed(a, "NoLeader", ""), 1, 3, 4)}, Fail, "", "NoLeader", 1, 4},
		{"a reused key is not an answer", History{unknown(a), retry(failed(a, CodeIdempotencyKeyReused, ""), 1, 3, 4)},
			Unknown, "", "", 1, never},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := collapse(tc.attempts)
			require.Len(t, ls, 1)
			l := ls[0]
			assert.Equal(t, tc.want, l.Outcome, "collapse(%v).Outcome", tc.attempts)
			assert.Equal(t, tc.result, l.Result)
			assert.Equal(t, tc.err, l.Err)
			assert.Equal(t, tc.call, l.Call)
			assert.Equal(t, tc.ret, l.Return)
			assert.Len(t, l.attempts, len(tc.attempts))
		})
	}
	assert.Len(t, collapse(History{get(0, "1", 1, 2, ""), get(0, "1", 3, 4, "")}), 2, "reads without keys stand alone")
}

func TestJSONLRoundTrip(t *testing.T) {
	var h History
	for _, tc := range historyCases {
		h = append(h, tc.h...)
	}
	var buf bytes.Buffer
	require.NoError(t, h.WriteJSONL(&buf))
	assert.Equal(t, len(h), strings.Count(buf.String(), "\n"), "one op per line")
	got, err := ReadJSONL(&buf)
	require.NoError(t, err)
	assert.Equal(t, h, got)

	_, err = ReadJSONL(strings.NewReader(`{"kind":"get","outcome":"ok"}` + "\n" + `{"outcome":"maybe"}` + "\n"))
	assert.ErrorContains(t, err, "history op 2")
	_, err = ReadJSONL(strings.NewReader(`{"kind":`))
	assert.Error(t, err)
	assert.Error(t, History{{Outcome: Outcome(7)}}.WriteJSONL(&buf), "an invalid outcome is not written")
	empty, err := ReadJSONL(strings.NewReader(""))
	assert.NoError(t, err)
	assert.Empty(t, empty)
}

func TestOutcomeText(t *testing.T) {
	for _, o := range []Outcome{OK, Fail, Unknown} {
		b, err := o.MarshalText()
		require.NoError(t, err)
		var got Outcome
		require.NoError(t, got.UnmarshalText(b))
		assert.Equal(t, o, got)
	}
	assert.Equal(t, "Outcome(9)", Outcome(9).String())
	var o Outcome
	assert.Error(t, o.UnmarshalText([]byte("maybe")))
}
