package allocator

import (
	"encoding/binary"
	"errors"
	"math/big"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseRange: ParseRange never panics, and what it accepts is canonical,
// re-parses to itself, and maps its edge values to their offsets.
func FuzzParseRange(f *testing.F) {
	for _, tc := range bandCases {
		f.Add(tc.rng)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRange(s)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidRange)
			return
		}
		require.Positive(t, r.Size())
		require.LessOrEqual(t, r.Size(), 1<<MaxHostBits)
		require.Less(t, r.StaticSize(), r.Size())
		again, err := ParseRange(r.String())
		require.NoError(t, err)
		require.Equal(t, r.String(), again.String())
		for _, off := range []int{0, r.StaticSize(), r.Size() - 1} {
			got, err := r.Offset(r.Value(off))
			require.NoError(t, err)
			require.Equal(t, off, got)
		}
	})
}

// FuzzOffset: Offset never panics, and an accepted value maps back to its
// canonical form, which maps to the same offset.
func FuzzOffset(f *testing.F) {
	for _, s := range []struct{ rng, v string }{
		{"10.96.0.0/24", "10.96.0.10"}, {"10.96.0.0/12", "10.111.255.255"}, {"fd00::/108", "fd00::f:ffff"},
		{"30000-32767", "30080"}, {"30000-32767", "99999999"}, {"fd00::/112", "::ffff:10.0.0.1"},
	} {
		f.Add(s.rng, s.v)
	}
	f.Fuzz(func(t *testing.T, rng, v string) {
		r, err := ParseRange(rng)
		if err != nil {
			return
		}
		off, err := r.Offset(v)
		if err != nil {
			require.True(t, isOneOf(err, ErrInvalidValue, ErrNotInRange), "Offset(%q) = %v", v, err)
			return
		}
		require.True(t, off >= 0 && off < r.Size(), "Offset(%q) = %d outside [0,%d)", v, off, r.Size())
		back, err := r.Offset(r.Value(off))
		require.NoError(t, err)
		require.Equal(t, off, back)
	})
}

func isOneOf(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// FuzzRestore: Restore on arbitrary bytes never panics; it accepts exactly
// the data whose integer fits in the pool, and what it accepts re-encodes
// to math/big's minimal bytes.
func FuzzRestore(f *testing.F) {
	for _, v := range snapshotVectors {
		f.Add(v.data)
	}
	f.Add([]byte{0, 0, 1})
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := mustPool(t, "10.96.0.0/24") // 254 offsets
		_, err := p.Allocate("10.96.0.3")
		require.NoError(t, err)
		before := p.Bitmap().Clone()
		ref := new(big.Int).SetBytes(data)
		err = p.Restore("10.96.0.0/24", data)
		if ref.BitLen() > 254 {
			require.ErrorIs(t, err, ErrCorruptData)
			require.True(t, before.Equal(p.Bitmap()))
			return
		}
		require.NoError(t, err)
		require.Equal(t, ref.Bytes(), p.Bitmap().Bytes())
		n := 0
		for i := 0; i < ref.BitLen(); i++ {
			n += int(ref.Bit(i))
		}
		require.Equal(t, n, p.Bitmap().Used())
		require.Equal(t, p.Bitmap().countRange(0, 16), p.Bitmap().UsedStatic())
	})
}

// FuzzOperations runs a random operation sequence against a pool and a
// naive reference model (a map of held offsets), comparing after every step.
// The ops are decoded from the fuzz bytes, 9 bytes per op: a kind byte and
// a uint64 argument.
func FuzzOperations(f *testing.F) {
	f.Add("30000-30127", []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Add("10.96.0.0/27", make([]byte, 9*64))
	f.Add("fd00::/120", []byte("some random bytes to drive the sequence of operations here"))
	f.Fuzz(func(t *testing.T, rng string, ops []byte) {
		r, err := ParseRange(rng)
		if err != nil || r.Size() > 4096 {
			return
		}
		checkAgainstModel(t, r, ops)
	})
}

// checkAgainstModel is FuzzOperations' body; TestModel drives it with seeds.
func checkAgainstModel(t testing.TB, r Range, ops []byte) {
	p := NewPool(r)
	model := map[int]bool{}
	size, b := r.Size(), r.StaticSize()
	for len(ops) >= 9 {
		kind, arg := ops[0]%4, binary.LittleEndian.Uint64(ops[1:9])
		ops = ops[9:]
		off := int(arg % uint64(size))
		switch kind {
		case 0: // dynamic
			got, err := p.AllocateNext(arg)
			if len(model) == size {
				require.ErrorIs(t, err, ErrFull)
				continue
			}
			require.NoError(t, err)
			require.False(t, model[got], "AllocateNext handed out held offset %d", got)
			dynFree := false
			for o := b; o < size; o++ {
				dynFree = dynFree || !model[o]
			}
			if dynFree {
				require.GreaterOrEqual(t, got, b, "took static offset %d while the dynamic band had room", got)
				require.Equal(t, modelScan(model, b, size, arg), got)
			} else {
				require.Equal(t, modelScan(model, 0, b, arg), got)
			}
			model[got] = true
		case 1: // static
			_, err := p.Allocate(r.Value(off))
			if model[off] {
				require.ErrorIs(t, err, ErrAllocated)
			} else {
				require.NoError(t, err)
				model[off] = true
			}
		case 2, 3: // release
			_, err := p.Release(r.Value(off))
			if model[off] {
				require.NoError(t, err)
				delete(model, off)
			} else {
				require.ErrorIs(t, err, ErrNotAllocated)
			}
		}
		require.Equal(t, len(model), p.Bitmap().Used())
		st := 0
		for o := range model {
			if o < b {
				st++
			}
		}
		require.Equal(t, st, p.Bitmap().UsedStatic())
	}
	var got []int
	p.Bitmap().ForEach(func(off int) bool { got = append(got, off); return true })
	require.Len(t, got, len(model))
	for _, o := range got {
		require.True(t, model[o])
	}
}

// modelScan is the reference scan: from lo+rnd%(hi-lo) upward, wrapping in [lo,hi).
func modelScan(model map[int]bool, lo, hi int, rnd uint64) int {
	n := hi - lo
	start := int(rnd % uint64(n))
	for i := 0; i < n; i++ {
		o := lo + (start+i)%n
		if !model[o] {
			return o
		}
	}
	return -1
}

func TestModel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		for _, rng := range []string{"30000-30127", "10.96.0.0/27", "30000", "fd00::/120", "30000-30200"} {
			r, err := ParseRange(rng)
			require.NoError(t, err)
			ops := make([]byte, 9*2000)
			x := seed
			for i := range ops {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				ops[i] = byte(x)
			}
			t.Logf("seed %d range %s", seed, rng)
			checkAgainstModel(t, r, ops)
		}
	}
}
