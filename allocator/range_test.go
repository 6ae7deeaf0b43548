package allocator

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bandCases holds every row of SPEC §2.3 and the edges around it.
var bandCases = []struct {
	rng           string
	canonical     string
	usable, b     int
	first, last   string // values at offsets 0 and usable-1
	staticLast    string // value at offset b-1 ("" when b == 0)
	dynamicFirst  string // value at offset b
	family        string
	wantRangeErr  bool
	wantKind      Kind
	nonCanonInput bool
}{
	// SPEC §2.3, IPs.
	{rng: "10.96.0.0/24", usable: 254, b: 16, first: "10.96.0.1", last: "10.96.0.254", staticLast: "10.96.0.16", dynamicFirst: "10.96.0.17", family: "IPv4"},
	{rng: "10.96.0.0/20", usable: 4094, b: 256, first: "10.96.0.1", last: "10.96.15.254", staticLast: "10.96.1.0", dynamicFirst: "10.96.1.1", family: "IPv4"},
	{rng: "10.96.0.0/16", usable: 65534, b: 256, first: "10.96.0.1", last: "10.96.255.254", staticLast: "10.96.1.0", dynamicFirst: "10.96.1.1", family: "IPv4"},
	{rng: "10.96.0.0/28", usable: 14, b: 0, first: "10.96.0.1", last: "10.96.0.14", dynamicFirst: "10.96.0.1", family: "IPv4"},
	{rng: "10.96.0.0/27", usable: 30, b: 16, first: "10.96.0.1", last: "10.96.0.30", staticLast: "10.96.0.16", dynamicFirst: "10.96.0.17", family: "IPv4"},
	{rng: "fd00::/112", usable: 65535, b: 256, first: "fd00::1", last: "fd00::ffff", staticLast: "fd00::100", dynamicFirst: "fd00::101", family: "IPv6"},
	// SPEC §2.3, ports.
	{rng: "30000-32767", usable: 2768, b: 86, first: "30000", last: "32767", staticLast: "30085", dynamicFirst: "30086"},
	{rng: "30000-30015", usable: 16, b: 0, first: "30000", last: "30015", dynamicFirst: "30000"},
	{rng: "30000-30127", usable: 128, b: 16, first: "30000", last: "30127", staticLast: "30015", dynamicFirst: "30016"},
	{rng: "30000-34095", usable: 4096, b: 128, first: "30000", last: "34095", staticLast: "30127", dynamicFirst: "30128"},
	{rng: "20000-32767", usable: 12768, b: 128, first: "20000", last: "32767", staticLast: "20127", dynamicFirst: "20128"},
	{rng: "32567-32767", usable: 201, b: 16, first: "32567", last: "32767", staticLast: "32582", dynamicFirst: "32583"},
	// IPv4 edges /12 and /27–/32.
	{rng: "10.96.0.0/12", usable: 1<<20 - 2, b: 256, first: "10.96.0.1", last: "10.111.255.254", staticLast: "10.96.1.0", dynamicFirst: "10.96.1.1", family: "IPv4"},
	{rng: "10.96.0.5/12", canonical: "10.96.0.0/12", usable: 1<<20 - 2, b: 256, first: "10.96.0.1", last: "10.111.255.254", staticLast: "10.96.1.0", dynamicFirst: "10.96.1.1", family: "IPv4", nonCanonInput: true},
	{rng: "10.0.0.0/11", wantRangeErr: true},
	{rng: "10.96.0.0/29", usable: 6, b: 0, first: "10.96.0.1", last: "10.96.0.6", dynamicFirst: "10.96.0.1", family: "IPv4"},
	{rng: "10.96.0.0/30", usable: 2, b: 0, first: "10.96.0.1", last: "10.96.0.2", dynamicFirst: "10.96.0.1", family: "IPv4"},
	{rng: "10.96.0.0/31", wantRangeErr: true},
	{rng: "10.96.0.0/32", wantRangeErr: true},
	// IPv6 edges /108–/128.
	{rng: "fd00::/108", usable: 1<<20 - 1, b: 256, first: "fd00::1", last: "fd00::f:ffff", staticLast: "fd00::100", dynamicFirst: "fd00::101", family: "IPv6"},
	{rng: "fd00::/107", wantRangeErr: true},
	{rng: "fd00::/123", usable: 31, b: 16, first: "fd00::1", last: "fd00::1f", staticLast: "fd00::10", dynamicFirst: "fd00::11", family: "IPv6"},
	{rng: "fd00::/124", usable: 15, b: 0, first: "fd00::1", last: "fd00::f", dynamicFirst: "fd00::1", family: "IPv6"},
	{rng: "fd00::/127", usable: 1, b: 0, first: "fd00::1", last: "fd00::1", dynamicFirst: "fd00::1", family: "IPv6"},
	{rng: "fd00::/128", wantRangeErr: true},
	// Port sizes 1, 16, 17, 1024, 65535.
	{rng: "30000", canonical: "30000-30000", usable: 1, b: 0, first: "30000", last: "30000", dynamicFirst: "30000", nonCanonInput: true},
	{rng: "30000-30016", usable: 17, b: 16, first: "30000", last: "30016", staticLast: "30015", dynamicFirst: "30016"},
	{rng: "30000-31023", usable: 1024, b: 32, first: "30000", last: "31023", staticLast: "30031", dynamicFirst: "30032"},
	{rng: "1-65535", usable: 65535, b: 128, first: "1", last: "65535", staticLast: "128", dynamicFirst: "129"},
	// Bad ranges.
	{rng: "0-10", wantRangeErr: true},
	{rng: "10-5", wantRangeErr: true},
	{rng: "30000-65536", wantRangeErr: true},
	{rng: "", wantRangeErr: true},
	{rng: "-", wantRangeErr: true},
	{rng: "+1-5", wantRangeErr: true},
	{rng: "1-2-3", wantRangeErr: true},
	{rng: "10.96.0.0/33", wantRangeErr: true},
	{rng: "10.96.0.0", wantRangeErr: true},
	{rng: "fe80::%eth0/120", wantRangeErr: true},
}

func TestParseRangeBands(t *testing.T) {
	for _, tc := range bandCases {
		t.Run(tc.rng, func(t *testing.T) {
			r, err := ParseRange(tc.rng)
			if tc.wantRangeErr {
				require.ErrorIs(t, err, ErrInvalidRange, "ParseRange(%q)", tc.rng)
				assert.Contains(t, err.Error(), fmt.Sprintf("%q", tc.rng), "the error names the input")
				return
			}
			require.NoError(t, err, "ParseRange(%q)", tc.rng)
			want := tc.rng
			if tc.canonical != "" {
				want = tc.canonical
			}
			assert.Equal(t, want, r.String(), "canonical range")
			assert.Equal(t, tc.usable, r.Size(), "Size()")
			assert.Equal(t, tc.b, r.StaticSize(), "StaticSize()")
			assert.Equal(t, tc.family, r.Family(), "Family()")
			assert.Equal(t, tc.first, r.Value(0), "Value(0)")
			assert.Equal(t, tc.last, r.Value(tc.usable-1), "Value(size-1)")
			assert.Equal(t, tc.dynamicFirst, r.Value(tc.b), "first value of the dynamic band")
			if tc.b > 0 {
				assert.Equal(t, tc.staticLast, r.Value(tc.b-1), "last value of the static band")
			}
			// Round trips at the edges.
			for _, off := range []int{0, tc.b, tc.usable - 1} {
				got, err := r.Offset(r.Value(off))
				require.NoError(t, err)
				assert.Equal(t, off, got, "Offset(Value(%d))", off)
			}
			// Re-parsing the canonical string gives the same range.
			again, err := ParseRange(r.String())
			require.NoError(t, err)
			assert.Equal(t, r, again)
		})
	}
}

func TestOffsetErrors(t *testing.T) {
	cases := []struct {
		rng, value string
		want       error
		text       string
	}{
		{rng: "10.96.0.0/12", value: "10.0.0.1", want: ErrNotInRange,
			text: "the provided IP (10.0.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12"},
		{rng: "10.96.0.0/24", value: "10.96.0.0", want: ErrNotInRange, text: "the provided IP (10.96.0.0) is not in the valid range. The range of valid IPs is 10.96.0.0/24"},
		{rng: "10.96.0.0/24", value: "10.96.0.255", want: ErrNotInRange},
		{rng: "10.96.0.0/24", value: "fd00::1", want: ErrNotInRange},
		{rng: "fd00::/112", value: "fd00::", want: ErrNotInRange},
		{rng: "fd00::/112", value: "fd00::1:0", want: ErrNotInRange},
		{rng: "fd00::/112", value: "10.96.0.1", want: ErrNotInRange},
		{rng: "10.96.0.0/24", value: "10.96.0.x", want: ErrInvalidValue},
		{rng: "10.96.0.0/24", value: "", want: ErrInvalidValue},
		{rng: "10.96.0.0/24", value: "010.96.0.1", want: ErrInvalidValue},
		{rng: "fd00::/112", value: "fd00::1%eth0", want: ErrInvalidValue},
		{rng: "30000-32767", value: "29999", want: ErrNotInRange,
			text: "provided port is not in the valid range. The range of valid ports is 30000-32767"},
		{rng: "30000-32767", value: "32768", want: ErrNotInRange},
		{rng: "30000-32767", value: "70000", want: ErrNotInRange},
		{rng: "30000-32767", value: "0", want: ErrNotInRange},
		{rng: "30000-32767", value: "-1", want: ErrInvalidValue},
		{rng: "30000-32767", value: "30k", want: ErrInvalidValue},
		{rng: "30000-32767", value: "", want: ErrInvalidValue},
	}
	for _, tc := range cases {
		t.Run(tc.rng+"/"+tc.value, func(t *testing.T) {
			r, err := ParseRange(tc.rng)
			require.NoError(t, err)
			_, err = r.Offset(tc.value)
			require.ErrorIs(t, err, tc.want, "Offset(%q)", tc.value)
			if tc.text != "" {
				assert.Equal(t, tc.text, err.Error())
			}
			var nir *NotInRangeError
			if errors.As(err, &nir) {
				assert.Equal(t, tc.value, nir.Value)
				assert.Equal(t, r.String(), nir.Range)
			}
		})
	}
}

func TestIPv4MappedAddressInIPv4Range(t *testing.T) {
	r, err := ParseRange("10.96.0.0/24")
	require.NoError(t, err)
	off, err := r.Offset("::ffff:10.96.0.7")
	require.NoError(t, err)
	assert.Equal(t, 6, off)
	assert.Equal(t, "10.96.0.7", r.Value(off))
}

func TestOverlaps(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"10.96.0.0/12", "10.96.0.0/16", true},
		{"10.96.0.0/16", "10.96.0.0/12", true},
		{"10.96.0.0/24", "10.96.0.0/24", true},
		{"10.96.0.0/24", "10.96.1.0/24", false},
		{"10.96.0.0/12", "10.112.0.0/12", false},
		{"fd00::/112", "fd00::/120", true},
		{"fd00::/112", "fd00::1:0/112", false},
		{"10.96.0.0/12", "fd00::/112", false},
		{"30000-32767", "32767-40000", true},
		{"30000-32767", "29000-30000", true},
		{"30000-32767", "31000-31010", true},
		{"30000-32767", "32768-40000", false},
		{"30000-32767", "1-29999", false},
		{"30000", "30000", true},
		{"30000-32767", "10.96.0.0/12", false},
	}
	for _, c := range cases {
		a, err := ParseRange(c.a)
		require.NoError(t, err)
		b, err := ParseRange(c.b)
		require.NoError(t, err)
		assert.Equal(t, c.want, Overlaps(a, b), "Overlaps(%s, %s)", c.a, c.b)
	}
}
