package allocator

import (
	"fmt"
	"math/big"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustPool(t testing.TB, rng string) *Pool {
	t.Helper()
	r, err := ParseRange(rng)
	require.NoError(t, err, "ParseRange(%q)", rng)
	return NewPool(r)
}

// TestExhaustion allocates every value of small pools dynamically: each value
// exactly once, the whole dynamic band before any static value, then RangeFull.
func TestExhaustion(t *testing.T) {
	for _, rng := range []string{"10.96.0.0/27", "10.96.0.0/28", "10.96.0.0/30", "fd00::/123", "fd00::/127",
		"30000", "30000-30015", "30000-30016", "30000-30127", "32567-32767"} {
		t.Run(rng, func(t *testing.T) {
			p := mustPool(t, rng)
			size, b := p.Range().Size(), p.Range().StaticSize()
			seen := map[int]bool{}
			rnd := uint64(0x9e3779b97f4a7c15)
			for i := 0; i < size; i++ {
				rnd = rnd*6364136223846793005 + 1442695040888963407
				off, err := p.AllocateNext(rnd)
				require.NoError(t, err, "AllocateNext #%d", i)
				require.False(t, seen[off], "offset %d handed out twice", off)
				seen[off] = true
				if i < size-b {
					assert.Equal(t, BandDynamic, p.Band(off), "#%d: offset %d taken from the static band while the dynamic band had room", i, off)
				} else {
					assert.Equal(t, BandStatic, p.Band(off), "#%d: offset %d", i, off)
				}
				assert.Equal(t, i+1, p.Bitmap().Used())
			}
			_, err := p.AllocateNext(rnd)
			require.ErrorIs(t, err, ErrFull)
			assert.Equal(t, "range is full", err.Error())
			assert.Equal(t, 0, p.Bitmap().Free())
			assert.Equal(t, b, p.Bitmap().UsedStatic())
			assert.Equal(t, size-b, p.Bitmap().UsedDynamic())
		})
	}
}

// TestAllocateNextScan pins the scan: start at rnd mod the band, go up, wrap inside the band.
func TestAllocateNextScan(t *testing.T) {
	p := mustPool(t, "30000-30127") // B = 16, dynamic band offsets 16..127 (112 values)
	off, err := p.AllocateNext(5)
	require.NoError(t, err)
	assert.Equal(t, 21, off, "start = B + 5")
	off, err = p.AllocateNext(5)
	require.NoError(t, err)
	assert.Equal(t, 22, off, "taken start: the next one up")
	off, err = p.AllocateNext(111)
	require.NoError(t, err)
	assert.Equal(t, 127, off, "last offset of the band")
	off, err = p.AllocateNext(111)
	require.NoError(t, err)
	assert.Equal(t, 16, off, "wraps to the first offset of the dynamic band, never into the static band")
	off, err = p.AllocateNext(112 + 3)
	require.NoError(t, err)
	assert.Equal(t, 19, off, "rnd is reduced modulo the band size")
}

func TestStaticAllocateOrderAndTexts(t *testing.T) {
	cases := []struct {
		rng, value string
		want       error
		text       string
	}{
		{rng: "10.96.0.0/24", value: "10.96.0.10", want: ErrAllocated, text: "provided IP is already allocated"},
		{rng: "30000-32767", value: "30080", want: ErrAllocated, text: "provided port is already allocated"},
		{rng: "30000-32767", value: "40000", want: ErrNotInRange, text: "provided port is not in the valid range. The range of valid ports is 30000-32767"},
		{rng: "10.96.0.0/24", value: "nope", want: ErrInvalidValue},
	}
	for _, tc := range cases {
		t.Run(tc.rng+"/"+tc.value, func(t *testing.T) {
			p := mustPool(t, tc.rng)
			if tc.want == ErrAllocated {
				_, err := p.Allocate(tc.value)
				require.NoError(t, err)
			}
			before := p.Bitmap().Clone()
			_, err := p.Allocate(tc.value)
			require.ErrorIs(t, err, tc.want, "Allocate(%q)", tc.value)
			if tc.text != "" {
				assert.Equal(t, tc.text, err.Error())
			}
			assert.True(t, before.Equal(p.Bitmap()), "a failed Allocate changed the pool")
		})
	}
}

func TestStaticAllocateEitherBand(t *testing.T) {
	p := mustPool(t, "10.96.0.0/24")
	for _, v := range []string{"10.96.0.1", "10.96.0.16", "10.96.0.17", "10.96.0.254"} {
		off, err := p.Allocate(v)
		require.NoError(t, err, "Allocate(%q)", v)
		assert.Equal(t, v, p.Range().Value(off))
	}
	assert.Equal(t, 2, p.Bitmap().UsedStatic())
	assert.Equal(t, 2, p.Bitmap().UsedDynamic())
}

func TestRelease(t *testing.T) {
	p := mustPool(t, "30000-32767")
	_, err := p.Release("30001")
	require.ErrorIs(t, err, ErrNotAllocated)
	_, err = p.Release("1")
	require.ErrorIs(t, err, ErrNotInRange)
	_, err = p.Allocate("30001")
	require.NoError(t, err)
	require.True(t, p.Has("30001"))
	off, err := p.Release("30001")
	require.NoError(t, err)
	assert.Equal(t, 1, off)
	assert.False(t, p.Has("30001"))
	assert.Equal(t, 0, p.Bitmap().Used())
}

// snapshotVectors are SPEC §4's byte vectors.
var snapshotVectors = []struct {
	name    string
	offsets []int
	data    []byte
}{
	{"none", nil, []byte{}},
	{"{0}", []int{0}, []byte{0x01}},
	{"{8}", []int{8}, []byte{0x01, 0x00}},
	{"{0,9}", []int{0, 9}, []byte{0x02, 0x01}},
	{"{63}", []int{63}, []byte{0x80, 0, 0, 0, 0, 0, 0, 0}},
	{"{64}", []int{64}, []byte{0x01, 0, 0, 0, 0, 0, 0, 0, 0}},
	{"{0,127}", []int{0, 127}, append([]byte{0x80}, append(make([]byte, 14), 0x01)...)},
}

func TestSnapshotBytes(t *testing.T) {
	for _, tc := range snapshotVectors {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, "10.96.0.0/24")
			ref := new(big.Int)
			for _, off := range tc.offsets {
				require.True(t, p.Bitmap().Allocate(off))
				ref.SetBit(ref, off, 1)
			}
			rng, data := p.Snapshot()
			assert.Equal(t, "10.96.0.0/24", rng)
			assert.Equal(t, tc.data, data, "Bytes() for %v", tc.offsets)
			assert.Equal(t, ref.Bytes(), data, "same bytes as math/big.Int.Bytes()")

			q := mustPool(t, "10.96.0.0/24")
			require.NoError(t, q.Restore(rng, data))
			assert.True(t, p.Bitmap().Equal(q.Bitmap()), "round trip")
			// Leading zero bytes are accepted.
			q2 := mustPool(t, "10.96.0.0/24")
			require.NoError(t, q2.Restore(rng, append([]byte{0, 0, 0}, data...)))
			assert.True(t, p.Bitmap().Equal(q2.Bitmap()), "round trip with leading zeros")
		})
	}
}

func TestRestoreRefusals(t *testing.T) {
	cases := []struct {
		name, rng string
		data      []byte
		want      error
	}{
		{"other range", "10.96.0.0/23", []byte{1}, ErrRangeMismatch},
		{"non-canonical range string", "10.96.0.5/24", []byte{1}, ErrRangeMismatch},
		{"bit at size", "10.96.0.0/24", new(big.Int).SetBit(new(big.Int), 254, 1).Bytes(), ErrCorruptData},
		{"empty data clears the pool", "10.96.0.0/24", []byte{}, nil},
		{"whole extra byte", "10.96.0.0/24", append([]byte{0x01}, make([]byte, 32)...), ErrCorruptData},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, "10.96.0.0/24")
			_, err := p.Allocate("10.96.0.9")
			require.NoError(t, err)
			before := p.Bitmap().Clone()
			err = p.Restore(tc.rng, tc.data)
			if tc.want == nil {
				require.NoError(t, err)
				assert.Equal(t, 0, p.Bitmap().Used())
				return
			}
			require.ErrorIs(t, err, tc.want)
			assert.True(t, before.Equal(p.Bitmap()), "a refused Restore changed the pool")
			assert.Equal(t, 1, p.Bitmap().Used())
		})
	}
	// The last offset itself is fine.
	p := mustPool(t, "10.96.0.0/24")
	require.NoError(t, p.Restore("10.96.0.0/24", new(big.Int).SetBit(new(big.Int), 253, 1).Bytes()))
	assert.True(t, p.Has("10.96.0.254"))
	assert.Equal(t, 1, p.Bitmap().UsedDynamic())
}

func TestBitmapForEachNextSet(t *testing.T) {
	b := NewBitmap(300, 16)
	offs := []int{0, 1, 63, 64, 127, 128, 200, 299}
	for _, o := range offs {
		require.True(t, b.Allocate(o))
	}
	var got []int
	b.ForEach(func(off int) bool { got = append(got, off); return true })
	assert.Equal(t, offs, got)
	got = got[:0]
	for o := b.NextSet(0); o >= 0; o = b.NextSet(o + 1) {
		got = append(got, o)
	}
	assert.Equal(t, offs, got)
	assert.Equal(t, -1, b.NextSet(300))
	assert.Equal(t, 64, b.NextSet(64))
	assert.Equal(t, 200, b.NextSet(129))
	var first []int
	b.ForEach(func(off int) bool { first = append(first, off); return len(first) < 3 })
	assert.Equal(t, []int{0, 1, 63}, first, "ForEach stops when fn returns false")
	assert.False(t, b.Allocate(300), "beyond size")
	assert.False(t, b.Allocate(-1))
	assert.False(t, b.Release(5), "not set")
	assert.Equal(t, 2, b.UsedStatic())
	assert.Equal(t, 6, b.UsedDynamic())
}

func ExamplePool() {
	r, _ := ParseRange("10.96.0.0/24")
	p := NewPool(r)
	off, _ := p.Allocate("10.96.0.10")
	fmt.Println(off, p.Band(off))
	off, _ = p.AllocateNext(0)
	fmt.Println(r.Value(off), p.Band(off))
	_, err := p.Allocate("10.96.0.10")
	fmt.Println(err)
	// Output:
	// 9 static
	// 10.96.0.17 dynamic
	// provided IP is already allocated
}

// TestOffsetMethods: the offset methods agree with the bitmap they keep,
// fail with the package's typed errors (Kubernetes' texts where the value
// methods give them), and change nothing when they fail.
func TestOffsetMethods(t *testing.T) {
	for _, tc := range []struct{ rng, allocated string }{
		{"10.96.0.0/24", "provided IP is already allocated"},
		{"30000-30127", "provided port is already allocated"},
	} {
		t.Run(tc.rng, func(t *testing.T) {
			p := mustPool(t, tc.rng)
			size := p.Range().Size()
			require.NoError(t, p.AllocateOffset(3))
			assert.True(t, p.HasOffset(3))
			err := p.AllocateOffset(3)
			require.ErrorIs(t, err, ErrAllocated)
			assert.Equal(t, tc.allocated, err.Error())
			for _, off := range []int{-1, size} {
				assert.False(t, p.HasOffset(off))
				require.ErrorIs(t, p.AllocateOffset(off), ErrNotInRange)
				require.ErrorIs(t, p.ReleaseOffset(off), ErrNotInRange)
			}
			require.ErrorIs(t, p.ReleaseOffset(4), ErrNotAllocated)
			assert.Equal(t, 1, p.Used())
			assert.Equal(t, 1, p.UsedStatic())
			assert.Equal(t, 0, p.UsedDynamic())
			assert.Equal(t, size-1, p.Free())

			rnds := []uint64{7, 7, 1 << 40}
			calls := 0
			offs, err := p.AllocateNextN(len(rnds), func() uint64 { calls++; return rnds[calls-1] })
			require.NoError(t, err)
			ref := mustPool(t, tc.rng)
			require.NoError(t, ref.AllocateOffset(3))
			for i, rnd := range rnds {
				off, err := ref.AllocateNext(rnd)
				require.NoError(t, err)
				assert.Equal(t, off, offs[i], "the %d-th offset, as AllocateNext takes it", i)
			}
			assert.True(t, p.Bitmap().Equal(ref.Bitmap()))

			var used []int
			p.ForEachUsed(func(off int) bool { used = append(used, off); return true })
			var next []int
			for off := p.NextUsed(0); off >= 0; off = p.NextUsed(off + 1) {
				next = append(next, off)
			}
			assert.Equal(t, used, next)
			assert.Len(t, used, 4)

			before := p.Bitmap().Clone()
			_, err = p.AllocateNextN(p.Free()+1, func() uint64 { t.Fatal("rnd called"); return 0 })
			require.ErrorIs(t, err, ErrFull)
			assert.Equal(t, "range is full", err.Error())
			assert.True(t, before.Equal(p.Bitmap()), "a refused AllocateNextN changed the pool")

			for _, off := range used {
				require.NoError(t, p.ReleaseOffset(off))
			}
			assert.Equal(t, 0, p.Used())
			assert.Equal(t, -1, p.NextUsed(0))
		})
	}
}
