package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestByteSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		str  string
	}{
		{"0", 0, "0"},
		{"268435456", 256 << 20, "256MiB"},
		{"256MiB", 256 << 20, "256MiB"},
		{"256mib", 256 << 20, "256MiB"},
		{"1GiB", 1 << 30, "1GiB"},
		{" 64 MiB ", 64 << 20, "64MiB"},
		{"1500", 1500, "1500"},
		{"2KiB", 2048, "2KiB"},
		{"1GB", 1e9, "1000000000"},
		{"10kB", 10000, "10000"},
		{"16TiB", 16 << 40, "16TiB"},
		{"7B", 7, "7"},
	} {
		var s byteSize
		require.NoError(t, s.Set(c.in), "Set(%q)", c.in)
		assert.Equal(t, c.want, uint64(s), "Set(%q)", c.in)
		assert.Equal(t, c.str, s.String(), "String of Set(%q)", c.in)
	}
	for _, bad := range []string{"", "MiB", "-1", "1.5GiB", "12 parsecs", "1XiB", "99999999999TiB", "18446744073709551616"} {
		s := byteSize(42)
		err := s.Set(bad)
		require.Error(t, err, "Set(%q)", bad)
		assert.Contains(t, err.Error(), "\""+bad+"\"", "the error names the input")
		assert.Equal(t, byteSize(42), s, "Set(%q) changes nothing", bad)
	}
}
