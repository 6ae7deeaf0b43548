package checker

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Builders for hand-written histories; times are small integers.
func alloc(c int, value, owner, key string, call, ret int64, out Outcome, res string) Op {
	return Op{Client: c, Kind: "allocate", Pool: "p", Value: value, Owner: owner, Key: key, Call: call, Return: ret, Outcome: out, Result: res}
}

func allocFail(c int, value, owner, key string, call, ret int64, err string) Op {
	return Op{Client: c, Kind: "allocate", Pool: "p", Value: value, Owner: owner, Key: key, Call: call, Return: ret, Outcome: Fail, Err: err}
}

func release(c int, value, pre, key string, call, ret int64, out Outcome, err string) Op {
	return Op{Client: c, Kind: "release", Pool: "p", Value: value, Owner: pre, Key: key, Call: call, Return: ret, Outcome: out, Err: err}
}

func get(c int, value string, call, ret int64, holder string) Op {
	return Op{Client: c, Kind: "get", Pool: "p", Value: value, Call: call, Return: ret, Outcome: OK, Result: holder}
}

// historyCases is the one table of histories all checkers are judged on:
// for each, whether it is linearizable, has a double owner, loses an
// acknowledged allocation (against final), and answers a retry differently.
type historyCase struct {
	name        string
	h           History
	final       map[string]string
	linear      bool
	doubleOwner bool
	lostAck     bool
	badRetry    bool
	phantom     bool
}

var historyCases = []historyCase{
	{name: "sequential allocate, release, allocate", linear: true, final: map[string]string{"1": "b"}, h: History{
		alloc(0, "", "a", "k1", 1, 2, OK, "1"), release(0, "1", "a", "k2", 3, 4, OK, ""), alloc(1, "1", "b", "k3", 5, 6, OK, "1"),
		get(2, "1", 7, 8, "b")}},
	{name: "concurrent allocates of one value: one wins", linear: true, final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 5, OK, "1"), allocFail(1, "1", "b", "k2", 2, 6, "AlreadyAllocated")}},
	{name: "unknown allocate that did apply", linear: true, final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 2, Unknown, ""), get(1, "1", 3, 4, "a"), allocFail(2, "1", "b", "k2", 5, 6, "AlreadyAllocated")}},
	{name: "unknown allocate that did not apply", linear: true, final: map[string]string{"1": "b"}, h: History{
		alloc(0, "1", "a", "k1", 1, 2, Unknown, ""), get(1, "1", 3, 4, ""), alloc(2, "1", "b", "k2", 5, 6, OK, "1")}},
	{name: "unknown dynamic allocate seen by its owner", linear: true, final: map[string]string{"2": "a"}, h: History{
		alloc(0, "", "a", "k1", 1, 2, Unknown, ""), get(1, "2", 3, 4, "a")}},
	{name: "unknown dynamic allocate freed before anyone saw it", linear: true, final: map[string]string{}, h: History{
		alloc(0, "", "a", "k1", 1, 2, Unknown, ""), release(1, "4", "", "k2", 3, 4, OK, ""), get(2, "4", 5, 6, "")}},
	{name: "unknown release that did apply", linear: true, final: map[string]string{}, h: History{
		alloc(0, "1", "a", "k1", 1, 2, OK, "1"), release(0, "1", "a", "k2", 3, 4, Unknown, ""), get(1, "1", 5, 6, "")}},
	{name: "retry after unknown returns the first answer", linear: true, final: map[string]string{"3": "a"}, h: History{
		alloc(0, "", "a", "k1", 1, 2, Unknown, ""), {Client: 0, Kind: "allocate", Pool: "p", Owner: "a", Key: "k1", Call: 3, Return: 4, Outcome: OK, Result: "3", Attempt: 1},
		get(1, "3", 5, 6, "a")}},
	{name: "release with owner mismatch", linear: true, final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 2, OK, "1"), release(1, "1", "b", "k2", 3, 4, Fail, "OwnerMismatch")}},
	{name: "failure with no leader changes nothing", linear: true, final: map[string]string{}, h: History{
		{Client: 0, Kind: "allocate", Pool: "p", Value: "1", Owner: "a", Key: "k1", Call: 1, Return: 2, Outcome: Fail, Err: "NoLeader"},
		get(1, "1", 3, 4, "")}},

	{name: "duplicate allocation", linear: false, doubleOwner: true, lostAck: true, final: map[string]string{"1": "b"}, h: History{
		alloc(0, "", "a", "k1", 1, 2, OK, "1"), alloc(1, "", "b", "k2", 3, 4, OK, "1")}},
	{name: "lost release", linear: false, final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 2, OK, "1"), release(0, "1", "a", "k2", 3, 4, OK, ""), get(1, "1", 5, 6, "a")}},
	{name: "stale read after release", linear: false, final: map[string]string{}, h: History{
		alloc(0, "1", "a", "k1", 1, 2, OK, "1"), release(0, "1", "", "k2", 3, 4, OK, ""), get(1, "1", 5, 6, "a")}},
	{name: "failure names a holder the value never had", linear: false, final: map[string]string{"1": "a"}, h: History{
		alloc(0, "1", "a", "k1", 1, 2, OK, "1"), {Client: 1, Kind: "allocate", Pool: "p", Value: "1", Owner: "b", Key: "k2", Call: 3, Return: 4,
			Outcome: Fail, Err: "AlreadyAllocated", Result: "ghost"}}},
	{name: "lost acknowledged allocation", linear: true, lostAck: true, final: map[string]string{}, h: History{
		alloc(0, "1", "a", "k1", 1, 2, OK, "1")}},
	{name: "retry applied twice leaves a phantom", linear: true, phantom: true, final: map[string]string{"1": "a", "2": "a"}, h: History{
		alloc(0, "", "a", "k1", 1, 2, Unknown, ""), {Client: 0, Kind: "allocate", Pool: "p", Owner: "a", Key: "k1", Call: 3, Return: 4, Outcome: OK, Result: "2", Attempt: 1}}},
	{name: "retry answered differently", linear: true, badRetry: true, phantom: true, final: map[string]string{"1": "a", "2": "a"}, h: History{
		alloc(0, "", "a", "k1", 1, 2, OK, "1"), {Client: 0, Kind: "allocate", Pool: "p", Owner: "a", Key: "k1", Call: 3, Return: 4, Outcome: OK, Result: "2", Attempt: 1}}},
}

func caseNamed(t *testing.T, name string) historyCase {
	for _, tc := range historyCases {
		if tc.name == name {
			return tc
		}
	}
	t.Fatalf("no case %q", name)
	return historyCase{}
}

func TestCheckers(t *testing.T) {
	for _, tc := range historyCases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := CheckLinearizable(tc.h, 10*time.Second, "")
			if tc.linear {
				assert.Equal(t, porcupine.Ok, res, "CheckLinearizable: %v", err)
			} else {
				assert.Equal(t, porcupine.Illegal, res, "CheckLinearizable must flag it")
				assert.Error(t, err)
			}
			assert.Equal(t, !tc.doubleOwner, CheckNoDoubleOwner(tc.h).OK, "CheckNoDoubleOwner: %v", CheckNoDoubleOwner(tc.h).Problems)
			rep := CheckNoLostAck(tc.h, map[string]map[string]string{"p": tc.final})
			assert.Equal(t, !tc.lostAck, rep.OK, "CheckNoLostAck: %v", rep.Problems)
			assert.Equal(t, !tc.badRetry, CheckIdempotentRetries(tc.h).OK, "CheckIdempotentRetries: %v", CheckIdempotentRetries(tc.h).Problems)
			rep = CheckNoPhantom(tc.h, map[string]map[string]string{"p": tc.final})
			assert.Equal(t, !tc.phantom, rep.OK, "CheckNoPhantom: %v", rep.Problems)
		})
	}
}

func TestVisualisationWrittenOnFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.html")
	res, err := CheckLinearizable(caseNamed(t, "duplicate allocation").h, 10*time.Second, path)
	require.Equal(t, porcupine.Illegal, res)
	require.Error(t, err)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), "<html")
}

func TestJSONLRoundTrip(t *testing.T) {
	h := caseNamed(t, "retry after unknown returns the first answer").h
	h = append(h, Op{Kind: "list", Pool: "p", Outcome: OK, Listed: map[string]string{"1": "a"}})
	var buf bytes.Buffer
	require.NoError(t, h.WriteJSONL(&buf))
	got, err := ReadJSONL(&buf)
	require.NoError(t, err)
	assert.Equal(t, h, got)
	_, err = ReadJSONL(bytes.NewReader([]byte("{\"outcome\":\"maybe\"}\n")))
	assert.Error(t, err)
}
