package human

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		256 << 20: "256.0 MiB", 3 << 30: "3.0 GiB", 1<<64 - 1: "16.0 EiB"} {
		assert.Equal(t, want, Bytes(n), "%d", n)
	}
}
