package fsm

import (
	"fmt"
	"testing"
)

// BenchmarkCountAllocateRelease applies what `rangealloc bench --count
// 4096 --mix allocate=1,release=1` sends: one entry allocating 4,096
// dynamic values of a /12, keyed, then one keyed transaction releasing
// them, each value by its owner. One op is the pair: 8,192 values.
func BenchmarkCountAllocateRelease(b *testing.B) {
	h := newHarness(b)
	h.pool("clusterip-ipv4", "10.96.0.0/12")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		owner := fmt.Sprintf("bench-%d", i)
		res := h.one(&Request{ID: "a" + owner, Kind: KindTxn, Seed: uint64(i) + 1,
			Ops: []Op{{Kind: OpAllocate, Pool: "clusterip-ipv4", Owner: owner, Count: MaxCount}}})
		if res.Err != nil {
			b.Fatal(res.Err)
		}
		rel := &Request{ID: "r" + owner, Kind: KindTxn, Seed: uint64(i) + 1}
		for _, a := range res.Ops[0] {
			rel.Ops = append(rel.Ops, release("clusterip-ipv4", a.Value, owner))
		}
		if res := h.one(rel); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	b.ReportMetric(float64(b.N)*2*MaxCount/b.Elapsed().Seconds(), "values/s")
}
