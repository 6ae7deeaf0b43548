package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseCPULine(t *testing.T) {
	for _, tc := range []struct {
		line        string
		busy, total uint64
		ok          bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  100 5 50 800 40 1 2 3 70 0", 158, 1001, true},
		{"cpu 10 0 10 80", 20, 100, true}, // old kernels: four fields
		{"cpu0 100 5 50 800 40 1 2 3", 0, 0, false},
		{"cpu 10 x 10 80", 0, 0, false},
		{"cpu 1 2", 0, 0, false},
		{"", 0, 0, false},
	} {
		busy, total, ok := parseCPULine(tc.line)
		assert.Equal(t, tc.ok, ok, tc.line)
		assert.Equal(t, tc.busy, busy, tc.line)
		assert.Equal(t, tc.total, total, tc.line)
	}
}

func TestCPUBetween(t *testing.T) {
	a := cpuSample{busy: 1000, total: 5000, self: time.Second, ok: true}
	b := cpuSample{busy: 1300, total: 5400, self: 3 * time.Second, ok: true}
	u := cpuBetween(a, b, 1000)
	assert.InDelta(t, 0.75, u.Busy, 1e-9, "300 of 400 ticks busy")
	assert.Equal(t, 3*time.Millisecond, u.PerOp, "3 CPU-seconds over 1000 operations")
	assert.Equal(t, 2*time.Millisecond, u.BenchPerOp, "2 seconds of this process over 1000 operations")
	busy, perOp, bench := u.columns()
	assert.Equal(t, []string{"75%", "3000µs", "2000µs"}, []string{busy, perOp, bench})

	u = cpuBetween(cpuSample{self: time.Second}, cpuSample{self: 2 * time.Second}, 10)
	busy, perOp, bench = u.columns()
	assert.Equal(t, []string{"-", "-", "100000µs"}, []string{busy, perOp, bench}, "no /proc/stat: only the load generator's share")
	assert.NotPanics(t, func() { cpuBetween(a, b, 0) }, "no operations")
}
