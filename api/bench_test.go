package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/rangealloc/rangealloc/api/internal/wire"
)

// discard is a ResponseWriter that drops the body.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// BenchmarkCountJSON measures the JSON that one value of `rangealloc bench
// --count 4096 --mix allocate=1,release=1` passes through, in the shapes of
// SPEC §5 and the way each side handles it: the server encodes the count
// allocation's answer (writeJSON) and the client decodes it (the wire
// fast path, encoding/json for what it leaves); the client encodes its
// release transaction and the server decodes it strictly (decodeBody);
// the server encodes the transaction's answer, an allocation per released
// value, and the client decodes that. One op is one message of 4,096 values; ns/value is
// per value.
func BenchmarkCountJSON(b *testing.B) {
	const n = 4096
	list := AllocationList{Allocations: make([]Allocation, n)}
	txn := TxnRequest{Ops: make([]TxnOp, n)}
	for i := range n {
		v := fmt.Sprintf("10.%d.%d.%d", 96+i>>16, i>>8&255, i&255)
		list.Allocations[i] = Allocation{Pool: "clusterip-ipv4", Value: v, Owner: "bench-7", Band: "dynamic", Mode: "dynamic", Revision: 123456}
		txn.Ops[i] = TxnOp{Op: "release", Pool: "clusterip-ipv4", Value: v, Owner: "bench-7"}
	}
	results := TxnResults{Results: list.Allocations}
	serverEncode := func(v any) func() error {
		return func() error { writeJSON(discard{}, 200, v); return nil }
	}
	clientEncode := func(v TxnRequest) func() error {
		return func() error { _ = wire.AppendTxnRequest(make([]byte, 0, wire.TxnRequestSize(&v)), &v); return nil }
	}
	serverDecode := func(data []byte) func() error {
		return func() error { var req TxnRequest; return decodeBody(data, &req, false) }
	}
	// clientDecode decodes as api/client does: the fast path, and
	// encoding/json for what it leaves.
	clientDecode := func(data []byte, fast func([]byte, any) bool, out func() any) func() error {
		return func() error {
			v := out()
			if fast(data, v) {
				return nil
			}
			return json.Unmarshal(data, v)
		}
	}
	mustMarshal := func(v any) []byte {
		data, err := json.Marshal(v)
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	listData, txnData, resultsData := mustMarshal(list), mustMarshal(txn), mustMarshal(results)
	for _, tc := range []struct {
		name string
		size int
		run  func() error
	}{
		{"allocations/server-encode", len(listData), serverEncode(list)},
		{"allocations/client-decode", len(listData), clientDecode(listData,
			func(d []byte, v any) bool { return wire.DecodeAllocationList(d, v.(*AllocationList)) }, func() any { return &AllocationList{} })},
		{"release-txn/client-encode", len(txnData), clientEncode(txn)},
		{"release-txn/server-decode", len(txnData), serverDecode(txnData)},
		{"release-results/server-encode", len(resultsData), serverEncode(results)},
		{"release-results/client-decode", len(resultsData), clientDecode(resultsData,
			func(d []byte, v any) bool { return wire.DecodeTxnResults(d, v.(*TxnResults)) }, func() any { return &TxnResults{} })},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := tc.run(); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(tc.size))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/value")
		})
	}
}

// BenchmarkAllocationJSON measures the JSON one allocation passes through
// (`rangealloc bench --mix allocate=1`), each side's way and, beside it,
// encoding/json's: the client encodes the allocate request, the server
// decodes it strictly, encodes the allocation it answers, and the client
// decodes that.
func BenchmarkAllocationJSON(b *testing.B) {
	a := Allocation{Pool: "clusterip-ipv4", Value: "10.96.12.7", Owner: "bench-7", Band: "dynamic", Mode: "dynamic", Revision: 123456}
	req := AllocateRequest{Owner: "bench-7"}
	aData, _ := json.Marshal(a)
	reqData, _ := json.Marshal(req)
	var boxed, boxedPtr any = a, &a
	for _, tc := range []struct {
		name string
		run  func() error
	}{
		{"request/client-encode", func() error { _ = wire.AppendAllocateRequest(make([]byte, 0, 64), &req); return nil }},
		{"request/client-encode-encoding-json", func() error { _, err := json.Marshal(req); return err }},
		{"request/server-decode", func() error { var r AllocateRequest; return decodeBody(reqData, &r, false) }},
		{"request/server-decode-encoding-json", func() error { var r AllocateRequest; return decodeStrict(reqData, &r) }},
		// Both boxed once: a handler's value is boxed either way. A pointer
		// takes writeJSON's encoding/json path.
		{"allocation/server-encode", func() error { writeJSON(discard{}, 201, boxed); return nil }},
		{"allocation/server-encode-encoding-json", func() error { writeJSON(discard{}, 201, boxedPtr); return nil }},
		{"allocation/client-decode", func() error {
			var out Allocation
			if !wire.DecodeAllocation(aData, &out) {
				return fmt.Errorf("not decoded")
			}
			return nil
		}},
		{"allocation/client-decode-encoding-json", func() error { var out Allocation; return json.Unmarshal(aData, &out) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := tc.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
