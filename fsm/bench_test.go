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
		for _, a := range res.Allocations()[0] {
			rel.Ops = append(rel.Ops, release("clusterip-ipv4", a.Value, owner))
		}
		if res := h.one(rel); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	b.ReportMetric(float64(b.N)*2*MaxCount/b.Elapsed().Seconds(), "values/s")
}

// BenchmarkApplyGroup applies what the leader's group commit makes of 64
// callers each allocating one dynamic value: one entry of 64 keyed
// requests. One op is the entry; the fill stays near where it started
// because the pool is a /12.
func BenchmarkApplyGroup(b *testing.B) {
	h := newHarness(b)
	h.pool("clusterip-ipv4", "10.96.0.0/12")
	reqs := make([]*Request, 64)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range reqs {
			reqs[j] = &Request{ID: fmt.Sprintf("%08d-%02d-0000-0000-000000000000", i, j), Kind: KindTxn, Seed: uint64(i*64 + j + 1),
				Ops: []Op{{Kind: OpAllocate, Pool: "clusterip-ipv4", Owner: fmt.Sprintf("caller-%d", j)}}}
		}
		if res := h.apply(reqs...); res[0].Err != nil {
			b.Fatal(res[0].Err)
		}
	}
	b.ReportMetric(float64(b.N)*64/b.Elapsed().Seconds(), "requests/s")
}
