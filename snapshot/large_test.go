package snapshot

import (
	"bytes"
	"io"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// large1M is a full-size pool: a 2^20-bit bitmap (a /12) with the top
// 1,000,000 offsets [48576, 2^20) allocated, each with an owner. In the
// big-endian data that is 125,000 bytes of 0xff, then 6,072 zero bytes.
var large1M = sync.OnceValue(func() *State {
	const n, size = 1_000_000, 1 << 20
	data := make([]byte, size/8)
	for i := range n / 8 {
		data[i] = 0xff
	}
	allocs := make([]Allocation, n)
	for i := range allocs {
		allocs[i] = Allocation{Owner: "ns-" + strconv.Itoa(i%97) + "/svc-" + strconv.Itoa(i), Static: i%37 == 0, Revision: uint64(i + 1)}
	}
	return &State{
		Index: n, Term: 3,
		Pools:    []Pool{{Name: "cluster-ips", Range: "10.96.0.0/12", Data: data, Allocations: allocs}},
		Requests: sample().Requests,
		Members:  sample().Members,
	}
})

var large1MEncoded = sync.OnceValue(func() []byte {
	var buf bytes.Buffer
	if err := Write(&buf, large1M()); err != nil {
		panic(err)
	}
	return buf.Bytes()
})

// TestLarge1M round-trips the full-size pool and checks that Write streams:
// it hands the encoding over in buffer-sized pieces and allocates a small
// fraction of it.
func TestLarge1M(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a million allocations")
	}
	s := large1M()
	w := &recordingWriter{buf: make([]byte, 0, 32<<20)}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	require.NoError(t, Write(w, s))
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	enc := w.buf
	t.Logf("encoding: %d bytes in %d writes (largest %d); Write allocated %d bytes", len(enc), w.writes, w.largest, allocated)
	require.Less(t, allocated, uint64(1<<20), "Write allocated %d bytes for a %d-byte encoding", allocated, len(enc))
	require.Greater(t, w.writes, len(enc)/(2*bufSize), "Write did not stream")
	require.LessOrEqual(t, w.largest, len(s.Pools[0].Data)+bufSize)

	got, err := Read(iotestChunks(enc, 4096))
	require.NoError(t, err)
	// Compare the million records in a loop: reflection over them is slow
	// under the race detector.
	require.Len(t, got.Pools, 1)
	want, have := s.Pools[0].Allocations, got.Pools[0].Allocations
	require.Len(t, have, len(want))
	for i := range want {
		if want[i] != have[i] {
			require.Equal(t, want[i], have[i], "allocation %d", i)
		}
	}
	strip := func(s State) State {
		s.Pools = []Pool{s.Pools[0]}
		s.Pools[0].Allocations = nil
		return s
	}
	require.Equal(t, strip(*s), strip(*got))
}

// recordingWriter keeps what it is given in buf, which must have the
// capacity for it, counting the writes and noting the largest.
type recordingWriter struct {
	buf             []byte
	writes, largest int
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if len(w.buf)+len(p) > cap(w.buf) {
		return 0, io.ErrShortBuffer
	}
	w.buf = append(w.buf, p...)
	w.writes++
	w.largest = max(w.largest, len(p))
	return len(p), nil
}

// iotestChunks returns a reader that serves b at most n bytes at a time.
func iotestChunks(b []byte, n int) io.Reader { return &chunkReader{b: b, n: n} }

type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.b)
	r.b = r.b[k:]
	return k, nil
}

// BenchmarkWriteRead1M measures the full-size pool: encoding it, decoding
// it, and both in turn.
func BenchmarkWriteRead1M(b *testing.B) {
	s, enc := large1M(), large1MEncoded()
	b.Run("write", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if err := Write(io.Discard, s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := Read(bytes.NewReader(enc)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write+read", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(Write(pw, s)) }()
			if _, err := Read(pr); err != nil {
				b.Fatal(err)
			}
		}
	})
}
