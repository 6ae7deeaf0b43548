package fsm

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rangealloc/rangealloc/allocator"
)

func TestValueFormatterMatchesRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, cidr := range []string{"10.96.0.0/12", "10.0.0.0/30", "192.168.1.0/24", "255.255.255.0/24", "fd00::/108",
		"fd00:1:2:3::/112", "2001:db8::/120", "::/108", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:0/112",
		"30000-32767", "1-65535", "80", "65535"} {
		t.Run(cidr, func(t *testing.T) {
			r, err := allocator.ParseRange(cidr)
			require.NoError(t, err)
			f := newValueFormatter(r)
			assert.NotZero(t, f.kind, "a range this package formats itself")
			offs := []int{0, r.Size() - 1, r.Size() / 2}
			for range 200 {
				offs = append(offs, rng.IntN(r.Size()))
			}
			for _, off := range offs {
				want := r.Value(off)
				assert.Equal(t, want, string(f.appendValue([]byte("x"), off))[1:], "offset %d", off)
				assert.Equal(t, want, f.value(off, "other"), "offset %d", off)
				assert.Equal(t, want, f.value(off, want), "offset %d", off)
			}
		})
	}
}

// TestCountAndReleaseValuesAreCanonical: the values a count allocation
// formats into one string, and those a release answers, are the range's
// own, also when the release named the value another way.
func TestCountAndReleaseValuesAreCanonical(t *testing.T) {
	for _, tc := range []struct {
		rng, other string // other names the first value another way, or ""
	}{
		{"10.96.0.0/12", "::ffff:10.96.0.1"},
		{"fd00::/108", "fd00:0:0:0:0:0:0:1"},
		{"1000-65535", ""},
	} {
		t.Run(tc.rng, func(t *testing.T) {
			h := newHarness(t)
			h.pool("p", tc.rng)
			r, err := allocator.ParseRange(tc.rng)
			require.NoError(t, err)
			res := h.one(&Request{ID: "a", Kind: KindTxn, Seed: 3, Ops: []Op{{Kind: OpAllocate, Pool: "p", Owner: "o", Count: MaxCount}}})
			require.Nil(t, res.Err)
			require.Len(t, res.Allocations()[0], MaxCount)
			rel := &Request{ID: "r", Kind: KindTxn, Seed: 4}
			for _, a := range res.Allocations()[0] {
				off, err := r.Offset(a.Value)
				require.NoError(t, err)
				require.Equal(t, r.Value(off), a.Value)
				require.Equal(t, Allocation{Pool: "p", Value: a.Value, Owner: "o", InStatic: off < r.StaticSize(), Revision: 2}, a)
				rel.Ops = append(rel.Ops, release("p", a.Value, "o"))
			}
			if tc.other != "" {
				h.one(txn(alloc("p", r.Value(0), "s")))
				rel.Ops = append(rel.Ops[:MaxOps-1], release("p", tc.other, "s"))
			}
			out := h.one(rel)
			require.Nil(t, out.Err)
			require.Len(t, out.Allocations(), len(rel.Ops))
			for i, op := range out.Allocations() {
				require.Len(t, op, 1)
				off, err := r.Offset(rel.Ops[i].Value)
				require.NoError(t, err)
				assert.Equal(t, r.Value(off), op[0].Value)
			}
			if tc.other != "" {
				assert.Equal(t, Allocation{Pool: "p", Value: r.Value(0), Owner: "s", Static: true, InStatic: true, Revision: 3}, out.Allocations()[MaxOps-1][0])
			}
		})
	}
}

// TestLargeTxnEntryRoundTrip: a transaction large enough for shared
// values decodes to what was encoded, next to other requests, and a
// truncated one is refused.
func TestLargeTxnEntryRoundTrip(t *testing.T) {
	ops := make([]Op, MaxOps)
	for i := range ops {
		ops[i] = release("p"+strconv.Itoa(i/1000), "10.96."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256), "owner-"+strconv.Itoa(i%3))
		if i%7 == 0 {
			ops[i] = Op{Kind: OpAllocate, Pool: ops[i].Pool, Count: i % 5}
		}
	}
	reqs := []*Request{
		{Kind: KindTxn, ID: "big", Seed: 9, Ops: ops},
		{Kind: KindTxn, ID: "small", Ops: []Op{alloc("q", "30001", "")}},
		{Kind: KindTxn, ID: "big2", Ops: ops[:sharedValuesFrom]},
	}
	data := EncodeBatch(reqs)
	got, err := DecodeEntry(data)
	require.NoError(t, err)
	require.Equal(t, reqs, got)
	for _, n := range []int{len(data) - 1, len(data) / 2, 40} {
		_, err := DecodeEntry(data[:n])
		assert.ErrorContains(t, err, "undecodable log entry", "cut to %d bytes", n)
	}
}

// wordRange is a range of another kind than IP or port, whose values are
// as long as its offsets say: the formatter's generic path.
type wordRange struct{ allocator.Range }

func (wordRange) Value(off int) string { return strings.Repeat("v", off) }

// TestEncoderValueMatchesStr: a value formatted in place encodes as str
// encodes it, whether its length takes one varint byte or more.
func TestEncoderValueMatchesStr(t *testing.T) {
	f := newValueFormatter(wordRange{})
	require.Zero(t, f.kind, "the generic path")
	for _, n := range []int{0, 1, 127, 128, 300, 20000} {
		var got, want encoder
		got.u8(7)
		got.value(&f, n)
		got.u8(9)
		want.u8(7)
		want.str(strings.Repeat("v", n))
		want.u8(9)
		assert.Equal(t, want.b, got.b, "value of %d bytes", n)
	}
	for _, r := range []string{"10.96.0.0/12", "fd00::/108", "30000-32767"} {
		rng, err := allocator.ParseRange(r)
		require.NoError(t, err)
		f := newValueFormatter(rng)
		for _, off := range []int{0, 1, rng.Size() - 1} {
			var got, want encoder
			got.value(&f, off)
			want.str(rng.Value(off))
			assert.Equal(t, want.b, got.b, "%s offset %d", r, off)
			assert.LessOrEqual(t, len(rng.Value(off)), f.maxLen())
		}
	}
}
