package snapshot

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzRead checks that Read never panics, refuses only with a sentinel, and
// that whatever it accepts re-encodes to the same bytes and reads back to
// an equal State. Random bytes rarely pass the checksum, so each input is
// also tried resealed (its last 4 bytes replaced by the right checksum),
// which lets the fuzzer reach the structural checks.
func FuzzRead(f *testing.F) {
	for _, tc := range roundTrips {
		if enc := encoded(f, tc.state()); len(enc) < 4096 {
			f.Add(enc)
		}
	}
	for _, tc := range damaged {
		f.Add(tc.input())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRead(t, data)
		if len(data) >= 4 {
			checkRead(t, seal(bytes.Clone(data[:len(data)-4])))
		}
	})
}

func checkRead(t *testing.T, data []byte) {
	s, err := Read(bytes.NewReader(data))
	if err != nil {
		require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersion) || errors.Is(err, ErrMagic),
			"Read = %v, want an error matching a sentinel", err)
		require.Nil(t, s)
		return
	}
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, s), "Write of an accepted State")
	require.Equal(t, data, buf.Bytes(), "re-encoding differs from the input")
	again, err := Read(&buf)
	require.NoError(t, err)
	require.Equal(t, s, again)
}
