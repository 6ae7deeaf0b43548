package main

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// byteSize is a flag holding a number of bytes, written as plain bytes
// (268435456), or with a unit: binary KiB, MiB, GiB, TiB (powers of 1024)
// or decimal B, kB, MB, GB, TB (powers of 1000); units ignore case.
type byteSize uint64

// sizeUnits are the units byteSize accepts, by lowercased name.
var sizeUnits = map[string]uint64{
	"": 1, "b": 1,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

func (s *byteSize) Set(v string) error {
	t := strings.TrimSpace(v)
	i := strings.IndexFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return fmt.Errorf("size %q: want a whole number of bytes, optionally with a unit (KiB, MiB, GiB, TiB, kB, MB, GB, TB), such as 256MiB", v)
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return fmt.Errorf("size %q: %v", v, err)
	}
	hi, lo := bits.Mul64(n, mult)
	if hi != 0 {
		return fmt.Errorf("size %q: more than %d bytes", v, uint64(1<<64-1))
	}
	*s = byteSize(lo)
	return nil
}

// String writes the size with the largest binary unit that divides it.
func (s *byteSize) String() string {
	n := uint64(*s)
	for _, u := range []struct {
		name string
		size uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatUint(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10)
}

func (s *byteSize) Type() string { return "size" }
