package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuSample is what the machine's and this process's CPUs had done at one
// moment. The bench reports the difference between two samples: how busy
// the machine was, and the CPU time an operation cost it and the load
// generator. A busy machine means the figures measure what the CPUs can
// do, not what the cluster can.
type cpuSample struct {
	busy, total uint64        // clock ticks of every CPU, from /proc/stat
	self        time.Duration // user and system time of this process
	ok          bool          // /proc/stat was read (Linux)
}

// clockTicks is USER_HZ, the unit of /proc/stat, which Linux fixes at 100
// for user space.
const clockTicks = 100

func sampleCPU() cpuSample {
	s := cpuSample{self: selfCPU()}
	f, err := os.Open("/proc/stat")
	if err != nil {
		return s
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return s
	}
	s.busy, s.total, s.ok = parseCPULine(sc.Text())
	return s
}

// parseCPULine reads the aggregate line of /proc/stat: "cpu user nice
// system idle iowait irq softirq steal ...". Idle and iowait count as not
// busy, and steal too: it is time the hypervisor gave to someone else.
func parseCPULine(line string) (busy, total uint64, ok bool) {
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, false
	}
	for i, f := range fields[1:] {
		if i >= 8 { // guest time is already in user
			break
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i != 3 && i != 4 && i != 7 {
			busy += v
		}
	}
	return busy, total, total > 0
}

// cpuUse is the CPU a run cost between two samples.
type cpuUse struct {
	Busy       float64 // fraction of all the machine's CPUs that was busy
	PerOp      time.Duration
	BenchPerOp time.Duration // the load generator's own share of PerOp
	known      bool
}

func cpuBetween(a, b cpuSample, ops int64) cpuUse {
	var u cpuUse
	if ops > 0 {
		u.BenchPerOp = (b.self - a.self) / time.Duration(ops)
	}
	if !a.ok || !b.ok || b.total <= a.total {
		return u
	}
	u.known = true
	u.Busy = float64(b.busy-a.busy) / float64(b.total-a.total)
	if ops > 0 {
		secs := float64(b.busy-a.busy) / clockTicks
		u.PerOp = time.Duration(secs / float64(ops) * float64(time.Second))
	}
	return u
}

// columns are the table's CPU, CPU/OP and BENCH/OP cells.
func (u cpuUse) columns() (busy, perOp, benchPerOp string) {
	busy, perOp = "-", "-"
	if u.known {
		busy, perOp = fmt.Sprintf("%.0f%%", 100*u.Busy), fmt.Sprintf("%dµs", u.PerOp.Microseconds())
	}
	return busy, perOp, fmt.Sprintf("%dµs", u.BenchPerOp.Microseconds())
}
