package node

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// BenchmarkPhysicalFloor measures the two costs no write can avoid, on
// this machine now: one fdatasync of a small append (a durable log write
// costs at least one; a bolt commit costs two), and one round trip of a
// small message over loopback TCP (replication costs at least one, and a
// forwarded call or an HTTP request one more each). The latency budget
// in docs/PERFORMANCE.md reads the stages against them.
func BenchmarkPhysicalFloor(b *testing.B) {
	b.Run("fsync", func(b *testing.B) {
		f, err := os.OpenFile(filepath.Join(b.TempDir(), "floor"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		data := make([]byte, 100)
		lats := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			if _, err := f.Write(data); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil { // an append grows the file, so fdatasync would flush its size too
				b.Fatal(err)
			}
			lats = append(lats, time.Since(t0))
		}
		b.StopTimer()
		reportLatencies(b, lats)
	})
	b.Run("loopback-rtt", func(b *testing.B) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = io.Copy(c, c) // echo
		}()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		msg, back := make([]byte, 100), make([]byte, 100)
		lats := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			if _, err := c.Write(msg); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, back); err != nil {
				b.Fatal(err)
			}
			lats = append(lats, time.Since(t0))
		}
		b.StopTimer()
		reportLatencies(b, lats)
	})
}

// reportLatencies reports the mean and p50 of lats in µs.
func reportLatencies(b *testing.B, lats []time.Duration) {
	var sum time.Duration
	for _, d := range lats {
		sum += d
	}
	slices.Sort(lats)
	b.ReportMetric(float64(sum.Microseconds())/float64(len(lats)), "mean-µs")
	b.ReportMetric(float64(lats[len(lats)/2].Nanoseconds())/1000, "p50-µs")
}
