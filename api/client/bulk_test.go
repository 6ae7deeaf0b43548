package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rangealloc/rangealloc/api/types"
)

// TestBulkAnswers: a count allocation's and a transaction's answers,
// plain or not, decode as json.Unmarshal decodes them, and a transaction
// sends what json.Marshal writes.
func TestBulkAnswers(t *testing.T) {
	a := `{"pool":"p","value":"10.96.0.1","owner":"o","band":"dynamic","mode":"dynamic","revision":5}`
	tests := []struct {
		name, body string
		status     int
		wantErr    string
	}{
		{name: "plain", body: `[` + a + `,` + strings.Replace(a, "10.96.0.1", "10.96.0.2", 1) + `]`, status: 200},
		{name: "escaped", body: `[{"pool":"p","value":"10.96.0.\u0031","owner":"<o>","REVISION":7,"extra":true}]`, status: 200},
		{name: "empty", body: `[]`, status: 200},
		{name: "null", body: `null`, status: 200},
		{name: "malformed", body: `[` + a, status: 200, wantErr: "decode"},
		{name: "wrong type", body: `[{"revision":"5"}]`, status: 200, wantErr: "decode"},
		{name: "error answer", body: `x`, status: 409, wantErr: "AlreadyAllocated: taken"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sent []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sent, _ = io.ReadAll(r.Body)
				w.WriteHeader(tc.status)
				if tc.status >= 400 {
					_, _ = io.WriteString(w, `{"error":{"code":"AlreadyAllocated","message":"taken","details":{"owner":"x"}}}`)
					return
				}
				if r.URL.Path == "/v1/txn" {
					_, _ = io.WriteString(w, `{"results":`+tc.body+`}`)
					return
				}
				_, _ = io.WriteString(w, `{"allocations":`+tc.body+`}`)
			}))
			defer srv.Close()
			c := New(srv.URL, nil)
			ctx := context.Background()
			var want []types.Allocation
			if tc.wantErr == "" {
				require.NoError(t, json.Unmarshal([]byte(tc.body), &want))
			}
			for range 2 { // the second reads into a pooled buffer
				got, _, err := c.AllocateCount(ctx, "p", "o", 2, Options{})
				ops := []types.TxnOp{{Op: "release", Pool: "p", Value: "10.96.0.1", Owner: "<&>"}, {Op: "release", Pool: "p", Value: "\u2028"}}
				gotTxn, errTxn := c.Txn(ctx, ops, Options{})
				wantSent, merr := json.Marshal(types.TxnRequest{Ops: ops})
				require.NoError(t, merr)
				assert.Equal(t, string(wantSent), string(sent))
				if tc.wantErr != "" {
					require.ErrorContains(t, err, tc.wantErr)
					require.ErrorContains(t, errTxn, tc.wantErr)
					if tc.status >= 400 {
						var ae *Error
						require.True(t, errors.As(errTxn, &ae))
						assert.Equal(t, map[string]any{"owner": "x"}, ae.Details)
					}
					continue
				}
				require.NoError(t, err)
				require.NoError(t, errTxn)
				assert.Equal(t, want, got)
				assert.Equal(t, want, gotTxn)
			}
		})
	}
}

// TestAllocationAnswer: one allocation's answer, plain or not, decodes as
// json.Unmarshal decodes it, and an allocate request sends what
// json.Marshal writes.
func TestAllocationAnswer(t *testing.T) {
	a := `{"pool":"p","value":"10.96.0.1","owner":"o","band":"dynamic","mode":"dynamic","revision":5}`
	for _, tc := range []struct{ name, body, wantErr string }{
		{name: "plain", body: a},
		{name: "escaped", body: `{"pool":"p","value":"10.96.0.\u0031","owner":"<o>","REVISION":7,"extra":true}`},
		{name: "malformed", body: a[:len(a)-1], wantErr: "decode"},
		{name: "wrong type", body: `{"revision":"5"}`, wantErr: "decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sent, _ = io.ReadAll(r.Body)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			c := New(srv.URL, nil)
			got, _, err := c.Allocate(context.Background(), "p", "10.96.0.1", "<&>\u2028", Options{})
			wantSent, merr := json.Marshal(types.AllocateRequest{Value: "10.96.0.1", Owner: "<&>\u2028"})
			require.NoError(t, merr)
			assert.Equal(t, string(wantSent), string(sent))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			var want types.Allocation
			require.NoError(t, json.Unmarshal([]byte(tc.body), &want))
			assert.Equal(t, want, got)
		})
	}
}
