package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rangealloc/rangealloc/api/types"
)

// awkward are strings whose JSON needs care: escapes, HTML, unicode,
// invalid UTF-8, the line separators JavaScript chokes on.
var awkward = []string{
	"", "10.96.0.1", "30000", "fd00::1", `"`, `\`, `a"b\c`, "<script>&amp;</script>",
	"\x00\x01\x07\b\f\n\r\t\x1f\x7f", "é ü 漢字 🎉", "\u2028\u2029", "\xff", "a\xc3", "\xed\xa0\x80",
	"\uFFFD", "owner with spaces", strings.Repeat("x", 300),
}

func randString(r *rand.Rand) string {
	if r.IntN(3) == 0 {
		return awkward[r.IntN(len(awkward))]
	}
	b := make([]byte, r.IntN(12))
	for i := range b {
		switch r.IntN(4) {
		case 0:
			b[i] = byte(r.IntN(256))
		default:
			b[i] = byte(0x20 + r.IntN(0x5f))
		}
	}
	return string(b)
}

func randAllocations(r *rand.Rand) []types.Allocation {
	switch r.IntN(6) {
	case 0:
		return nil
	case 1:
		return []types.Allocation{}
	}
	as := make([]types.Allocation, 1+r.IntN(5))
	for i := range as {
		as[i] = types.Allocation{Pool: randString(r), Value: randString(r), Owner: randString(r), Band: randString(r),
			Mode: randString(r), Revision: []uint64{0, 1, 123456, math.MaxUint64, r.Uint64()}[r.IntN(5)]}
	}
	return as
}

func randOps(r *rand.Rand) []types.TxnOp {
	switch r.IntN(6) {
	case 0:
		return nil
	case 1:
		return []types.TxnOp{}
	}
	ops := make([]types.TxnOp, 1+r.IntN(5))
	for i := range ops {
		ops[i] = types.TxnOp{Op: randString(r), Pool: randString(r), Value: randString(r), Owner: randString(r)}
	}
	return ops
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}

func TestAppendMatchesEncodingJSON(t *testing.T) {
	next := "10.96.0.9"
	tests := []struct {
		name string
		list types.AllocationList
	}{
		{"nil", types.AllocationList{}},
		{"empty", types.AllocationList{Allocations: []types.Allocation{}}},
		{"next", types.AllocationList{Allocations: []types.Allocation{{Pool: "p", Value: "1", Revision: 7}}, Next: &next}},
		{"empty next", types.AllocationList{Allocations: []types.Allocation{}, Next: new(string)}},
	}
	for _, s := range awkward {
		tests = append(tests, struct {
			name string
			list types.AllocationList
		}{"string " + s, types.AllocationList{Allocations: []types.Allocation{{Pool: s, Value: s, Owner: s, Band: s, Mode: s, Revision: math.MaxUint64}}, Next: &s}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, string(mustMarshal(t, tc.list)), string(AppendAllocationList(nil, &tc.list)))
			res := types.TxnResults{Results: tc.list.Allocations}
			assert.Equal(t, string(mustMarshal(t, res)), string(AppendTxnResults(nil, &res)))
			ops := make([]types.TxnOp, len(tc.list.Allocations))
			for i, a := range tc.list.Allocations {
				ops[i] = types.TxnOp{Op: a.Mode, Pool: a.Pool, Value: a.Value, Owner: a.Owner}
			}
			req := types.TxnRequest{Ops: ops}
			assert.Equal(t, string(mustMarshal(t, req)), string(AppendTxnRequest(nil, &req)))
			for _, a := range tc.list.Allocations {
				assert.Equal(t, string(mustMarshal(t, a)), string(AppendAllocation(nil, &a)))
			}
		})
	}
}

func TestAppendAllocateRequestMatchesEncodingJSON(t *testing.T) {
	counts := []*int{nil, new(int), ptr(1), ptr(4096), ptr(-1), ptr(math.MaxInt), ptr(math.MinInt)}
	strs := append([]string{"", "x"}, awkward...)
	for _, v := range strs {
		for _, o := range strs {
			for _, c := range counts {
				r := types.AllocateRequest{Value: v, Owner: o, Count: c}
				require.Equal(t, string(mustMarshal(t, r)), string(AppendAllocateRequest(nil, &r)), "%+v", r)
			}
		}
	}
}

func ptr(n int) *int { return &n }

func TestAppendMatchesEncodingJSONRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		var next *string
		if r.IntN(2) == 0 {
			s := randString(r)
			next = &s
		}
		list := types.AllocationList{Allocations: randAllocations(r), Next: next}
		require.Equal(t, string(mustMarshal(t, list)), string(AppendAllocationList([]byte("prefix"), &list))[len("prefix"):])
		res := types.TxnResults{Results: randAllocations(r)}
		require.Equal(t, string(mustMarshal(t, res)), string(AppendTxnResults(nil, &res)))
		req := types.TxnRequest{Ops: randOps(r)}
		require.Equal(t, string(mustMarshal(t, req)), string(AppendTxnRequest(nil, &req)))
		for _, a := range randAllocations(r) {
			require.Equal(t, string(mustMarshal(t, a)), string(AppendAllocation([]byte("prefix"), &a))[len("prefix"):])
		}
	}
}

// strictDecode is how the server decodes a request body.
func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) > 0 {
		return assert.AnError
	}
	return nil
}

// decoded says which fast decoders accepted a message.
type decoded struct{ list, results, txn, alloc, allocReq bool }

// checkDecoder: if fast accepts data, reference (encoding/json's way)
// accepts it too and decodes it to the same value; a refusal leaves the
// destination as it was. It reports whether fast accepted data.
func checkDecoder[T any](t testing.TB, data []byte, fast func([]byte, *T) bool, reference func([]byte, any) error) bool {
	t.Helper()
	var got, want T
	ok := fast(data, &got)
	if ok {
		require.NoError(t, reference(data, &want), "%q", data)
		require.Equal(t, want, got, "%q", data)
	} else {
		require.Zero(t, got, "a refusal changed its destination")
	}
	return ok
}

// checkDecoders runs checkDecoder for every fast decoder: answers against
// json.Unmarshal, request bodies against the server's strict decoding.
func checkDecoders(t testing.TB, data []byte) decoded {
	t.Helper()
	return decoded{
		list:     checkDecoder(t, data, DecodeAllocationList, json.Unmarshal),
		results:  checkDecoder(t, data, DecodeTxnResults, json.Unmarshal),
		txn:      checkDecoder(t, data, DecodeTxnRequest, strictDecode),
		alloc:    checkDecoder(t, data, DecodeAllocation, json.Unmarshal),
		allocReq: checkDecoder(t, data, DecodeAllocateRequest, strictDecode),
	}
}

func TestDecodeAcceptsPlainForm(t *testing.T) {
	next := "10.96.0.9"
	list := types.AllocationList{Allocations: []types.Allocation{
		{Pool: "clusterip-ipv4", Value: "10.96.0.1", Owner: "bench-7", Band: "dynamic", Mode: "dynamic", Revision: 123456},
		{Pool: "clusterip-ipv4", Value: "10.96.0.2", Owner: "other", Band: "static", Mode: "static", Revision: 0},
		{Pool: "ports", Value: "30000", Owner: "", Band: "dynamic", Mode: "dynamic", Revision: 9999999999999999999},
	}, Next: &next}
	txn := types.TxnRequest{Ops: []types.TxnOp{{Op: "release", Pool: "p", Value: "10.96.0.1", Owner: "o"}, {Op: "allocate", Pool: "p"}}}
	one := list.Allocations[0]
	count := 4096
	tests := []struct {
		name string
		data string
		want decoded
	}{
		{"list", string(mustMarshal(t, list)), decoded{list: true}},
		{"list indented", "\n {\r\"allocations\" :\t[ ] , \"next\": \"x\" }\n", decoded{list: true}},
		{"list without next", `{"allocations":[{}]}`, decoded{list: true}},
		{"results", string(mustMarshal(t, types.TxnResults{Results: list.Allocations})), decoded{results: true}},
		{"results empty", `{"results":[]}`, decoded{results: true}},
		{"txn", string(mustMarshal(t, txn)), decoded{txn: true}},
		{"txn empty", ` {"ops": []} `, decoded{txn: true}},
		{"allocation", string(mustMarshal(t, one)), decoded{alloc: true}},
		{"allocation in another order", ` {"revision": 0, "owner":"o" ,"pool":"p"} `, decoded{alloc: true}},
		{"allocate request", string(mustMarshal(t, types.AllocateRequest{Owner: "default/web"})), decoded{alloc: true, allocReq: true}},
		{"allocate request, named value", `{"value":"10.96.0.10","owner":"kube-system/kube-dns"}`, decoded{alloc: true, allocReq: true}},
		{"allocate request, count", string(mustMarshal(t, types.AllocateRequest{Owner: "bench-7", Count: &count})), decoded{allocReq: true}},
		{"allocate request, count 0", ` {"count" : 0} `, decoded{allocReq: true}},
		{"empty object", `{}`, decoded{true, true, true, true, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, checkDecoders(t, []byte(tc.data)))
		})
	}
}

// TestDecodeLeavesTheRestToEncodingJSON: invalid JSON, and valid JSON
// outside the plain form, goes to encoding/json.
func TestDecodeLeavesTheRestToEncodingJSON(t *testing.T) {
	a := `{"pool":"p","value":"v","owner":"o","band":"dynamic","mode":"dynamic","revision":1}`
	for _, data := range []string{
		``, ` `, `null`, `[]`, `"x"`, `{`, `}`, `{"allocations":null}`, `{"allocations":[` + a + `]`,
		`{"allocations":[` + a + `]}x`, `{"allocations":[` + a + `]} {}`, `{"allocations":[` + a + `]}]`,
		`{"allocations":[` + a + `,]}`, `{"allocations":[` + a + `],}`, `{,}`, `{"allocations":[` + a + `]`,
		`{"Allocations":[]}`, `{"allocations":[],"allocations":[]}`, `{"allocations":[],"extra":1}`,
		`{"allocations":[{"pool":"a","pool":"b"}]}`, `{"allocations":[{"POOL":"a"}]}`,
		`{"allocations":[{"pool":"a\"b"}]}`, `{"allocations":[{"pool":"\u0041"}]}`, `{"allocations":[{"pool":"é"}]}`,
		"{\"allocations\":[{\"pool\":\"\xff\"}]}", "{\"allocations\":[{\"pool\":\"a\tb\"}]}",
		`{"allocations":[{"pool":null}]}`, `{"allocations":[{"pool":1}]}`, `{"allocations":[{"revision":"1"}]}`,
		`{"allocations":[{"revision":-1}]}`, `{"allocations":[{"revision":1.0}]}`, `{"allocations":[{"revision":1e3}]}`,
		`{"allocations":[{"revision":01}]}`, `{"allocations":[{"revision":18446744073709551616}]}`,
		`{"allocations":[{"revision":99999999999999999999999}]}`, `{"allocations":[{"revision":null}]}`,
		`{"next":null}`, `{"next":1}`, `{"results":null}`, `{"results":[1]}`, `{"results":[[]]}`,
		`{"ops":null}`, `{"ops":[null]}`, `{"ops":[{"op":"release","extra":true}]}`, `{"ops":[{"op":"release","op":"allocate"}]}`,
		`{"ops":[],"ops":[]}`, `{"ops":[{"op":1}]}`, `{"ops":{}}`, `{"Ops":[]}`, "\ufeff{}", `{"ops":[]}` + "\x00",
		`{"ops":[{"value":"10.96.0.1"}]}}`, `{"ops":[{"op":"release"}` + strings.Repeat(" ", 3),
		`{"pool":"a","pool":"b"}`, `{"POOL":"a"}`, `{"Owner":"o"}`, `{"owner":"o","owner":"p"}`, `{"owner":"o","bogus":1}`,
		`{"owner":"o"} {}`, `{"owner":"o"}x`, `{"owner":"o"`, `{"owner":null}`, `{"value":1}`, `{"owner":"a\"b"}`,
		`{"revision":-1}`, `{"count":-1}`, `{"count":1.5}`, `{"count":1e2}`, `{"count":01}`, `{"count":"1"}`,
		`{"count":null}`, `{"count":9223372036854775808}`, `{"count":99999999999999999999}`, `{"count":1,"count":2}`,
	} {
		t.Run(data, func(t *testing.T) {
			assert.Equal(t, decoded{}, checkDecoders(t, []byte(data)))
		})
	}
}

func TestDecodeRoundTripsPlainValues(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	// plain strings are those the encoder writes without an escape.
	plain := func() string {
		b := make([]byte, r.IntN(20))
		for i := range b {
			for b[i] = byte(0x20 + r.IntN(0x5f)); strings.IndexByte(`"\<>&`, b[i]) >= 0; b[i] = byte(0x20 + r.IntN(0x5f)) {
			}
		}
		return string(b)
	}
	for range 2000 {
		as := make([]types.Allocation, r.IntN(6))
		for i := range as {
			as[i] = types.Allocation{Pool: plain(), Value: plain(), Owner: plain(), Band: plain(), Mode: plain(), Revision: r.Uint64N(1e19)}
		}
		next := plain()
		in := types.AllocationList{Allocations: as, Next: &next}
		var out types.AllocationList
		require.True(t, DecodeAllocationList(AppendAllocationList(nil, &in), &out))
		require.Equal(t, in, out)
		res := types.TxnResults{Results: as}
		var outRes types.TxnResults
		require.True(t, DecodeTxnResults(AppendTxnResults(nil, &res), &outRes))
		require.Equal(t, res, outRes)
		req := types.TxnRequest{Ops: make([]types.TxnOp, len(as))}
		for i, a := range as {
			req.Ops[i] = types.TxnOp{Op: a.Band, Pool: a.Pool, Value: a.Value, Owner: a.Owner}
		}
		var outReq types.TxnRequest
		require.True(t, DecodeTxnRequest(AppendTxnRequest(nil, &req), &outReq))
		require.Equal(t, req, outReq)
		for _, a := range as {
			var outA types.Allocation
			require.True(t, DecodeAllocation(AppendAllocation(nil, &a), &outA))
			require.Equal(t, a, outA)
			n := r.IntN(5000)
			ar := types.AllocateRequest{Value: a.Value, Owner: a.Owner, Count: &n}
			var outAR types.AllocateRequest
			require.True(t, DecodeAllocateRequest(AppendAllocateRequest(nil, &ar), &outAR))
			require.Equal(t, ar, outAR)
		}
	}
}

// tokens are what the mutations below splice into valid messages.
var tokens = []string{"{", "}", "[", "]", ",", ":", `"`, `\`, " ", "\n", "null", "true", "0", "-1", "1.5", "1e2",
	"18446744073709551616", `"pool"`, `"value"`, `"owner"`, `"revision"`, `"ops"`, `"op"`, `"allocations"`, `"results"`,
	`"next"`, `"Pool"`, `"extra"`, `"\u00e9"`, "é", "\xff", "\x00", `"a"`, "12345678901234567890"}

func TestDecodeMutatedMessages(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	next := "n"
	seeds := [][]byte{
		mustMarshal(t, types.AllocationList{Allocations: []types.Allocation{{Pool: "p", Value: "1", Owner: "o", Band: "dynamic", Mode: "static", Revision: 12}, {Pool: "p", Value: "2"}}, Next: &next}),
		mustMarshal(t, types.TxnResults{Results: []types.Allocation{{Pool: "p", Value: "1", Owner: "o", Band: "dynamic", Mode: "dynamic", Revision: 3}}}),
		mustMarshal(t, types.TxnRequest{Ops: []types.TxnOp{{Op: "release", Pool: "p", Value: "1", Owner: "o"}, {Op: "allocate", Pool: "p"}}}),
		mustMarshal(t, types.Allocation{Pool: "p", Value: "1", Owner: "o", Band: "static", Mode: "dynamic", Revision: 3}),
		[]byte(`{"value":"10.96.0.1","owner":"o","count":12}`),
	}
	accepted := 0
	for range 30000 {
		data := bytes.Clone(seeds[r.IntN(len(seeds))])
		for range 1 + r.IntN(3) {
			i := r.IntN(len(data) + 1)
			tok := tokens[r.IntN(len(tokens))]
			switch r.IntN(3) {
			case 0: // insert
				data = append(data[:i:i], append([]byte(tok), data[i:]...)...)
			case 1: // delete a byte
				if i < len(data) {
					data = append(data[:i:i], data[i+1:]...)
				}
			default: // replace a byte
				if i < len(data) {
					data = append(data[:i:i], append([]byte(tok), data[i+1:]...)...)
				}
			}
		}
		if checkDecoders(t, data) != (decoded{}) {
			accepted++
		}
	}
	// The mutations leave many messages in the plain form: the fast paths
	// were exercised, not only the fallback.
	assert.Greater(t, accepted, 1000)
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"allocations":[{"pool":"p","value":"v","owner":"o","band":"dynamic","mode":"dynamic","revision":1}],"next":"x"}`))
	f.Add([]byte(`{"results":[{"pool":"p","value":"v","owner":"o","band":"static","mode":"dynamic","revision":0}]}`))
	f.Add([]byte(`{"ops":[{"op":"release","pool":"p","value":"v","owner":"o"}]}`))
	f.Add([]byte(`{"ops":[{"op":"release","pool":"p"}],"ops":[{"value":"v"}]}`))
	f.Add([]byte(`{"pool":"p","value":"v","owner":"o","band":"dynamic","mode":"dynamic","revision":1}`))
	f.Add([]byte(`{"owner":"o","count":4096}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkDecoders(t, data) })
}

func FuzzAppend(f *testing.F) {
	for _, s := range awkward {
		f.Add(s, s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, value, owner string, rev uint64) {
		list := types.AllocationList{Allocations: []types.Allocation{{Pool: owner, Value: value, Owner: owner, Band: value, Mode: owner, Revision: rev}}, Next: &value}
		require.Equal(t, string(mustMarshal(t, list)), string(AppendAllocationList(nil, &list)))
		req := types.TxnRequest{Ops: []types.TxnOp{{Op: value, Pool: owner, Value: value, Owner: owner}}}
		require.Equal(t, string(mustMarshal(t, req)), string(AppendTxnRequest(nil, &req)))
		a := list.Allocations[0]
		require.Equal(t, string(mustMarshal(t, a)), string(AppendAllocation(nil, &a)))
		count := int(rev)
		ar := types.AllocateRequest{Value: value, Owner: owner, Count: &count}
		require.Equal(t, string(mustMarshal(t, ar)), string(AppendAllocateRequest(nil, &ar)))
	})
}
