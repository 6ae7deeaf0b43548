package rangealloc

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAdvancedReachesTheNode: each Advanced field reaches the node's
// config; zero takes the default; the disk floor and the stall watch can
// be turned off; a floor that is set and turned off at once is refused.
func TestAdvancedReachesTheNode(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir, cfg.RaftAddr = t.TempDir(), "127.0.0.1:0"
	nc, err := cfg.node()
	require.NoError(t, err)
	assert.EqualValues(t, 256<<20, nc.MinFreeDisk)
	assert.Equal(t, 2*time.Second, nc.DiskStallTimeout)
	assert.Zero(t, nc.CleanupDeadAfter)
	assert.False(t, nc.FoundEmpty)

	cfg.Advanced = Advanced{MinFreeDisk: 1 << 30, DiskStallTimeout: 5 * time.Second, CleanupDeadAfter: time.Hour, FoundEmpty: true}
	nc, err = cfg.node()
	require.NoError(t, err)
	assert.EqualValues(t, 1<<30, nc.MinFreeDisk)
	assert.Equal(t, 5*time.Second, nc.DiskStallTimeout)
	assert.Equal(t, time.Hour, nc.CleanupDeadAfter)
	assert.True(t, nc.FoundEmpty)
	require.NoError(t, nc.Validate())

	cfg.Advanced = Advanced{NoMinFreeDisk: true, DiskStallTimeout: -1}
	nc, err = cfg.node()
	require.NoError(t, err)
	assert.Zero(t, nc.MinFreeDisk, "the floor is off")
	assert.Zero(t, nc.DiskStallTimeout, "the stall watch is off")
	require.NoError(t, nc.Validate())

	cfg.Advanced = Advanced{NoMinFreeDisk: true, MinFreeDisk: 1 << 20}
	_, err = cfg.node()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Advanced.MinFreeDisk and Advanced.NoMinFreeDisk")

	for _, d := range []time.Duration{-time.Second, time.Second, 9 * time.Second} {
		cfg.Advanced = Advanced{CleanupDeadAfter: d}
		_, err = cfg.node()
		require.Error(t, err, "CleanupDeadAfter %v", d)
		assert.Contains(t, err.Error(), "Advanced.CleanupDeadAfter is "+d.String())
	}
}
