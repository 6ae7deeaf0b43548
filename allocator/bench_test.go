package allocator

import (
	"fmt"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"
)

// refBitmap is Kubernetes' algorithm (pkg/registry/core/service/allocator:
// a math/big.Int bitmap with randomScanStrategyWithOffset), written from the
// semantics of SPEC §2.4, as the baseline for the benchmarks. Like ours it
// takes the random start from the caller.
type refBitmap struct {
	allocated *big.Int
	max       int // size
	offset    int // B
	count     int
}

func newRef(size, static int) *refBitmap {
	return &refBitmap{allocated: new(big.Int), max: size, offset: static}
}

func (r *refBitmap) allocate(off int) bool {
	if r.allocated.Bit(off) == 1 {
		return false
	}
	r.allocated.SetBit(r.allocated, off, 1)
	r.count++
	return true
}

func (r *refBitmap) release(off int) {
	if r.allocated.Bit(off) == 0 {
		return
	}
	r.allocated.SetBit(r.allocated, off, 0)
	r.count--
}

// allocateNext scans bit by bit: the dynamic band from a random start with
// wrap-around, then the static band.
func (r *refBitmap) allocateNext(rnd uint64) (int, bool) {
	if r.count >= r.max {
		return 0, false
	}
	dyn := r.max - r.offset
	start := int(rnd % uint64(dyn))
	for i := 0; i < dyn; i++ {
		at := (start+i)%dyn + r.offset
		if r.allocated.Bit(at) == 0 {
			r.allocated.SetBit(r.allocated, at, 1)
			r.count++
			return at, true
		}
	}
	if r.offset > 0 {
		start = int(rnd % uint64(r.offset))
		for i := 0; i < r.offset; i++ {
			at := (start + i) % r.offset
			if r.allocated.Bit(at) == 0 {
				r.allocated.SetBit(r.allocated, at, 1)
				r.count++
				return at, true
			}
		}
	}
	return 0, false
}

// splitmix64 is a deterministic generator for benchmark inputs.
func splitmix64(x *uint64) uint64 {
	*x += 0x9e3779b97f4a7c15
	z := *x
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// filled returns both implementations holding the same pseudo-random
// fraction fill of r's offsets.
func filled(tb testing.TB, rng string, fill float64) (*Bitmap, *refBitmap) {
	r, err := ParseRange(rng)
	require.NoError(tb, err)
	ours, ref := NewBitmap(r.Size(), r.StaticSize()), newRef(r.Size(), r.StaticSize())
	threshold := uint64(fill * (1 << 63))
	seed := uint64(42)
	for off := 0; off < r.Size(); off++ {
		if splitmix64(&seed)>>1 < threshold {
			ours.Allocate(off)
			ref.allocate(off)
		}
	}
	return ours, ref
}

func randoms(n int) []uint64 {
	out := make([]uint64, n)
	seed := uint64(7)
	for i := range out {
		out[i] = splitmix64(&seed)
	}
	return out
}

var benchFills = []float64{0, 0.5, 0.9, 0.999}

// BenchmarkAllocateNext allocates a dynamic value and releases it again, so
// the fill level stays put, for our bitmap (impl=bitmap) and the reference
// (impl=reference) side by side.
func BenchmarkAllocateNext(b *testing.B) {
	rnds := randoms(1 << 16)
	for _, rng := range []string{"10.96.0.0/12", "30000-32767"} {
		for _, fill := range benchFills {
			ours, ref := filled(b, rng, fill)
			name := fmt.Sprintf("range=%s/fill=%g", rng, fill*100)
			b.Run(name+"/impl=bitmap", func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					off, ok := ours.AllocateNext(rnds[i&(1<<16-1)])
					if !ok {
						b.Fatal("full")
					}
					ours.Release(off)
				}
			})
			b.Run(name+"/impl=reference", func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					off, ok := ref.allocateNext(rnds[i&(1<<16-1)])
					if !ok {
						b.Fatal("full")
					}
					ref.release(off)
				}
			})
		}
	}
}

// BenchmarkAllocateRelease takes and frees named offsets on a half-full /12.
func BenchmarkAllocateRelease(b *testing.B) {
	ours, ref := filled(b, "10.96.0.0/12", 0.5)
	rnds := randoms(1 << 16)
	size := uint64(ours.Size())
	b.Run("impl=bitmap", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			off := int(rnds[i&(1<<16-1)] % size)
			if ours.Allocate(off) {
				ours.Release(off)
			}
		}
	})
	b.Run("impl=reference", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			off := int(rnds[i&(1<<16-1)] % size)
			if ref.allocate(off) {
				ref.release(off)
			}
		}
	})
}

// BenchmarkSnapshotRestore encodes a full /12 to RangeAllocation bytes and
// decodes them again.
func BenchmarkSnapshotRestore(b *testing.B) {
	ours, ref := filled(b, "10.96.0.0/12", 1)
	b.Run("impl=bitmap", func(b *testing.B) {
		b.ReportAllocs()
		dst := NewBitmap(ours.Size(), ours.StaticSize())
		for i := 0; i < b.N; i++ {
			if err := dst.SetBytes(ours.Bytes()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=reference", func(b *testing.B) {
		b.ReportAllocs()
		dst := new(big.Int)
		for i := 0; i < b.N; i++ {
			dst.SetBytes(ref.allocated.Bytes())
		}
	})
}

// TestBenchmarkInputs checks that the benchmarks measure what they claim:
// both implementations hold the same offsets at the stated fill.
func TestBenchmarkInputs(t *testing.T) {
	for _, fill := range benchFills {
		ours, ref := filled(t, "30000-32767", fill)
		require.Equal(t, ref.allocated.Bytes(), ours.Bytes())
		require.InDelta(t, fill, float64(ours.Used())/float64(ours.Size()), 0.02)
	}
	rnds := randoms(64)
	ours, ref := filled(t, "30000-32767", 0.9)
	for _, rnd := range rnds {
		a, okA := ours.AllocateNext(rnd)
		r, okR := ref.allocateNext(rnd)
		require.Equal(t, okR, okA)
		require.Equal(t, r, a, "the reference and the bitmap choose the same offset")
	}
}

// TestFootprint: a full /12 bitmap takes at most 130 KiB.
func TestFootprint(t *testing.T) {
	ours, _ := filled(t, "10.96.0.0/12", 1)
	require.Equal(t, ours.Size(), ours.Used())
	require.LessOrEqual(t, 8*cap(ours.words), 130*1024)
	require.LessOrEqual(t, len(ours.Bytes()), 130*1024)
}
