package api

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteJSONBulkAnswers: the hand-written answers (bulk and single
// allocations) are what json.Encoder wrote for them.
func TestWriteJSONBulkAnswers(t *testing.T) {
	next := "10.96.0.3"
	as := []Allocation{{Pool: "p", Value: "10.96.0.1", Owner: "<o&\"\u2028>", Band: "dynamic", Mode: "static", Revision: 1 << 63},
		{Pool: "p", Value: "10.96.0.2", Owner: "\xff", Band: "static", Mode: "dynamic"}}
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"list", AllocationList{Allocations: as, Next: &next}},
		{"list nil", AllocationList{}},
		{"results", TxnResults{Results: as}},
		{"results empty", TxnResults{Results: []Allocation{}}},
		{"allocation", as[0]},
		{"allocation zero", Allocation{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want bytes.Buffer
			require.NoError(t, json.NewEncoder(&want).Encode(tc.v))
			for range 2 { // the second answer reuses a pooled buffer
				rec := httptest.NewRecorder()
				writeJSON(rec, 201, tc.v)
				assert.Equal(t, 201, rec.Code)
				assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
				assert.Equal(t, want.String(), rec.Body.String())
			}
		})
	}
}

// TestDecodeBodyTxnRequest: a transaction decodes, or is refused with the
// same message, as the strict json.Decoder did before the fast path.
func TestDecodeBodyTxnRequest(t *testing.T) {
	checkDecodeBody[TxnRequest](t,
		`{"ops":[{"op":"release","pool":"p","value":"10.96.0.1","owner":"o"}]}`,
		` {"ops":[]} `, `{}`, `{"ops":null}`, `{"ops":[{"op":"release","pool":"p","bogus":1}]}`,
		`{"ops":[{"op":"release","pool":"p"}]} {}`, `{"ops":[{"op":"release","pool":"p"}]}]`,
		`{"ops":[{"op":"release","pool":7}]}`, `{"ops":[{"op":"release"}],"ops":[{"pool":"q"}]}`,
		`{"OPS":[{"OP":"release","Pool":"p"}]}`, `{"ops":[{"op":"rel\u0065ase","pool":"p\"q"}]}`,
		`{"ops":[{"op":"release","pool":"p"}]`, ``, `null`, `[]`,
	)
}

// TestDecodeBodyAllocateRequest: an allocate request decodes, or is
// refused with the same message, as the strict json.Decoder did before
// the fast path.
func TestDecodeBodyAllocateRequest(t *testing.T) {
	checkDecodeBody[AllocateRequest](t,
		`{"owner":"default/web"}`, `{"value":"10.96.0.10","owner":"kube-system/kube-dns"}`, ` {"owner":"o","count":4096} `,
		`{}`, `{"count":0}`, `{"count":-1}`, `{"count":1.5}`, `{"count":99999999999999999999}`, `{"count":null}`,
		`{"owner":"o","bogus":1}`, `{"Owner":"o"}`, `{"owner":"o","owner":"p"}`, `{"owner":"o"} {}`, `{"owner":"o"}]`,
		`{"owner":7}`, `{"owner":"a\u0062"}`, `{"owner":"o"`, ``, `null`, `[]`, `"o"`,
	)
}

// checkDecodeBody: each body decodes into a T through decodeBody (its
// fast path, where it has one) to what decodeStrict, the path every body
// took before, decodes it to, with the same error.
func checkDecodeBody[T any](t *testing.T, bodies ...string) {
	t.Helper()
	for _, body := range bodies {
		t.Run(body, func(t *testing.T) {
			var got, want T
			gotErr, wantErr := decodeBody([]byte(body), &got, false), decodeStrict([]byte(body), &want)
			assert.Equal(t, want, got)
			assert.Equal(t, wantErr, gotErr)
		})
	}
}

// TestAllocateRequestFastPath: a plain allocate request decodes without
// encoding/json (which takes nine allocations for it): the fast path is
// in use, not only correct. (The request itself escapes, and its owner is
// copied: two allocations.)
func TestAllocateRequestFastPath(t *testing.T) {
	body := []byte(`{"owner":"default/web"}`)
	allocs := testing.AllocsPerRun(100, func() {
		var r AllocateRequest
		if err := decodeBody(body, &r, false); err != nil || r.Owner != "default/web" {
			t.Fatalf("decoded %+v, %v", r, err)
		}
	})
	assert.LessOrEqual(t, allocs, 2.0, "the request and its owner string, no more")
}

// TestDecodeStrictRefusesTrailingData: a body is one object and white
// space, nothing else, whatever follows the object.
func TestDecodeStrictRefusesTrailingData(t *testing.T) {
	for _, body := range []string{`{}]`, `{}}`, `{} ]`, "{}\n}", `{} {}`, `{}x`, `{}0`, `{},`, "{}\f"} {
		t.Run(body, func(t *testing.T) {
			var req AllocateRequest
			err := decodeStrict([]byte(body), &req)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "invalid JSON body")
		})
	}
	for _, body := range []string{`{}`, "{} \t\r\n", ` {"owner":"o"} `} {
		var req AllocateRequest
		assert.NoError(t, decodeStrict([]byte(body), &req), "%q", body)
	}
}
