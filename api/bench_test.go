package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkCountJSON measures the JSON that one value of `rangealloc bench
// --count 4096 --mix allocate=1,release=1` passes through, in the shapes of
// SPEC §5 and the way each side handles it: the server encodes the count
// allocation's answer (json.Encoder) and the client decodes it
// (json.Unmarshal); the client encodes its release transaction
// (json.Marshal) and the server decodes it strictly; the server encodes
// the transaction's answer, an allocation per released value, and the
// client decodes that. One op is one message of 4,096 values; ns/value is
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
		var buf bytes.Buffer
		return func() error { buf.Reset(); return json.NewEncoder(&buf).Encode(v) }
	}
	clientEncode := func(v any) func() error {
		return func() error { _, err := json.Marshal(v); return err }
	}
	serverDecode := func(data []byte, out func() any) func() error {
		return func() error {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			return dec.Decode(out())
		}
	}
	clientDecode := func(data []byte, out func() any) func() error {
		return func() error { return json.Unmarshal(data, out()) }
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
		{"allocations/client-decode", len(listData), clientDecode(listData, func() any { return &AllocationList{} })},
		{"release-txn/client-encode", len(txnData), clientEncode(txn)},
		{"release-txn/server-decode", len(txnData), serverDecode(txnData, func() any { return &TxnRequest{} })},
		{"release-results/server-encode", len(resultsData), serverEncode(results)},
		{"release-results/client-decode", len(resultsData), clientDecode(resultsData, func() any { return &TxnResults{} })},
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
