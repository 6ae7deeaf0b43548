package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkCountJSON measures the JSON that one value of `rangealloc bench
// --count 4096 --mix allocate=1,release=1` passes through, in the shapes of
// SPEC §5: the server encodes it in a count allocation's answer and the
// client decodes it; the client encodes its release in a transaction and
// the server decodes that (strictly, as the server does). One op is one
// message of 4,096 values; ns/value is per value.
func BenchmarkCountJSON(b *testing.B) {
	const n = 4096
	list := AllocationList{Allocations: make([]Allocation, n)}
	txn := TxnRequest{Ops: make([]TxnOp, n)}
	for i := range n {
		v := fmt.Sprintf("10.%d.%d.%d", 96+i>>16, i>>8&255, i&255)
		list.Allocations[i] = Allocation{Pool: "clusterip-ipv4", Value: v, Owner: "bench-7", Band: "dynamic", Mode: "dynamic", Revision: 123456}
		txn.Ops[i] = TxnOp{Op: "release", Pool: "clusterip-ipv4", Value: v, Owner: "bench-7"}
	}
	for _, tc := range []struct {
		name string
		v    any
		out  func() any
	}{
		{"allocations", list, func() any { return &AllocationList{} }},
		{"release-txn", txn, func() any { return &TxnRequest{} }},
	} {
		data, err := json.Marshal(tc.v)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name+"/encode", func(b *testing.B) {
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := json.NewEncoder(&buf).Encode(tc.v); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(data)))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/value")
		})
		b.Run(tc.name+"/decode", func(b *testing.B) {
			for b.Loop() {
				dec := json.NewDecoder(bytes.NewReader(data))
				dec.DisallowUnknownFields()
				if err := dec.Decode(tc.out()); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(data)))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/value")
		})
	}
}
