package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// requireKind checks that err matches want and none of the other
// sentinels, and that its text contains msg.
func requireKind(t *testing.T, err, want error, msg string) {
	t.Helper()
	require.ErrorIs(t, err, want)
	for _, other := range []error{ErrMagic, ErrVersion, ErrCorrupt, ErrInvalid} {
		if other != want {
			require.NotErrorIs(t, err, other)
		}
	}
	require.Contains(t, err.Error(), msg)
}

// invalidStates break one rule each. Write must refuse them (ErrInvalid)
// and Read must refuse their well-sealed encoding (ErrCorrupt).
var invalidStates = []struct {
	name   string
	mutate func(s *State)
	msg    string
}{
	{"fewer records than set bits", func(s *State) { s.Pools[0].Allocations = s.Pools[0].Allocations[:2] },
		"2 allocation records for 3 set bits"},
	{"more records than set bits", func(s *State) { s.Pools[1].Allocations = allocations(1) },
		"1 allocation records for 0 set bits"},
	{"pool names unsorted", func(s *State) { s.Pools[0], s.Pools[1] = s.Pools[1], s.Pools[0] },
		`pool name "cluster-ips" sorts before "empty"`},
	{"pool name repeated", func(s *State) { s.Pools[1].Name = "cluster-ips" }, `pool name "cluster-ips" appears twice`},
	{"pool name uppercase", func(s *State) { s.Pools[0].Name = "Cluster-ips" }, "not a lowercase DNS label"},
	{"pool name starts with a dash", func(s *State) { s.Pools[0].Name = "-ips" }, "not a lowercase DNS label"},
	{"pool name ends with a dash", func(s *State) { s.Pools[0].Name = "ips-" }, "not a lowercase DNS label"},
	{"pool name with a dot", func(s *State) { s.Pools[0].Name = "a.b" }, "not a lowercase DNS label"},
	{"pool name empty", func(s *State) { s.Pools[0].Name = "" }, "pool name is 0 bytes, want 1 to 63"},
	{"pool name too long", func(s *State) { s.Pools[2].Name = strings.Repeat("z", 64) }, "pool name is 64 bytes"},
	{"range empty", func(s *State) { s.Pools[0].Range = "" }, "range is 0 bytes"},
	{"range too long", func(s *State) { s.Pools[0].Range = strings.Repeat("1", 65) }, "range is 65 bytes"},
	{"range with a space", func(s *State) { s.Pools[0].Range = "10.96.0.0 /24" }, "not printable ASCII"},
	{"data too long", func(s *State) { s.Pools[1].Data = make([]byte, maxData+1) }, "data is 131074 bytes, want at most 131073"},
	{"owner too long", func(s *State) { s.Pools[0].Allocations[1].Owner = strings.Repeat("o", 254) }, "owner is 254 bytes"},
	{"revision 0", func(s *State) { s.Pools[0].Allocations[2].Revision = 0 }, "revision 0"},
	{"request ID empty", func(s *State) { s.Requests[1].ID = "" }, "request ID is 0 bytes, want 1 to 128"},
	{"request ID too long", func(s *State) { s.Requests[1].ID = strings.Repeat("r", 129) }, "request ID is 129 bytes"},
	{"request ID repeated", func(s *State) { s.Requests[1].ID = s.Requests[0].ID }, `request ID "req-b" appears twice`},
	{"result too long", func(s *State) { s.Requests[0].Result = make([]byte, maxResult+1) }, "result is 1048577 bytes"},
	{"member ID empty", func(s *State) { s.Members[0].ID = "" }, "member ID is 0 bytes"},
	{"cluster ID too long", func(s *State) { s.ClusterID = strings.Repeat("c", 65) }, "cluster ID is 65 bytes, want at most 64"},
	{"cluster ID with a space", func(s *State) { s.ClusterID = "a b" }, "not printable ASCII"},
	{"member ID too long", func(s *State) { s.Members[1].ID = strings.Repeat("n", 129) }, "member ID is 129 bytes"},
	{"member IDs unsorted", func(s *State) { s.Members[0], s.Members[1] = s.Members[1], s.Members[0] }, "sorts before"},
	{"member ID repeated", func(s *State) { s.Members[1].ID = s.Members[0].ID }, `member ID "node-1" appears twice`},
	{"raft address too long", func(s *State) { s.Members[0].RaftAddr = strings.Repeat("h", 257) }, "raft address is 257 bytes"},
	{"API address too long", func(s *State) { s.Members[0].APIAddr = strings.Repeat("h", 257) }, "API address is 257 bytes"},
}

func TestWriteRefusesInvalidState(t *testing.T) {
	for _, tc := range invalidStates {
		t.Run(tc.name, func(t *testing.T) {
			s := sample()
			tc.mutate(s)
			var buf bytes.Buffer
			err := Write(&buf, s)
			requireKind(t, err, ErrInvalid, tc.msg)
			require.Zero(t, buf.Len(), "Write wrote %d bytes of an invalid state", buf.Len())
		})
	}
	requireKind(t, Write(io.Discard, nil), ErrInvalid, "nil state")
}

func TestReadRefusesInvalidState(t *testing.T) {
	for _, tc := range invalidStates {
		t.Run(tc.name, func(t *testing.T) {
			s := sample()
			tc.mutate(s)
			var buf bytes.Buffer
			require.NoError(t, encode(&buf, s))
			got, err := Read(&buf)
			requireKind(t, err, ErrCorrupt, tc.msg)
			require.Nil(t, got)
		})
	}
}

// raw builds encodings by hand, independently of the encoder.
type raw []byte

func header(version uint32) raw {
	b := raw(magic)
	b = binary.BigEndian.AppendUint32(b, version)
	return append(b, make([]byte, 16)...) // index 0, term 0
}

func (r raw) u8(c ...byte) raw        { return append(r, c...) }
func (r raw) uv(x uint64) raw         { return binary.AppendUvarint(r, x) }
func (r raw) str(s string) raw        { return append(r.uv(uint64(len(s))), s...) }
func (r raw) sealed() []byte          { return seal(bytes.Clone(r)) }
func (r raw) noRequests() raw         { return r.u8('R', 0, 'M', 0) }
func (r raw) onePool(data string) raw { return r.u8('P', 1).str("a").str("1-8").str(data) }

// damaged are byte streams that Read must refuse.
var damaged = []struct {
	name  string
	input func() []byte
	want  error
	msg   string
}{
	{"empty input", func() []byte { return nil }, ErrCorrupt, "truncated at byte 0, in magic"},
	{"not a snapshot", func() []byte { return []byte(`{"pools": []}`) }, ErrMagic, "starts with 7b 22 70"},
	{"short non-snapshot", func() []byte { return []byte("GIF") }, ErrMagic, "starts with 47 49 46"},
	{"wrong magic", func() []byte { b := encodedSample(); b[1] = 'r'; return b }, ErrMagic, "want 89 52 41 53 0d 0a 1a 0a"},
	{"unknown cluster flags", func() []byte { return header(2).u8('P', 0).noRequests().u8('C', 0, 2).sealed() }, ErrCorrupt,
		"cluster flags 0x02: unknown bits"},
	{"version 5", func() []byte { return header(5).u8('P', 0).noRequests().sealed() }, ErrVersion, "version 5: this build reads versions 1 to 4"},
	{"version 4 without its feature level", func() []byte { return header(4).u8('P', 0).noRequests().u8('C', 0, 0, 'S', 0, 0, 0).sealed() },
		ErrCorrupt, "where the feature level section tag 'F' belongs"},
	{"version 4 at feature level 1", func() []byte { return header(4).u8('P', 0).noRequests().u8('C', 0, 0, 'S', 0, 0, 0, 'F', 1).sealed() },
		ErrCorrupt, "feature level 1: a version 4 snapshot holds 2 to"},
	{"version 3 without its services section", func() []byte { return header(3).u8('P', 0).noRequests().u8('C', 0, 0).sealed() }, ErrCorrupt,
		"where the services section tag 'S' belongs"},
	{"unknown network flag", func() []byte { return header(3).u8('P', 0).noRequests().u8('C', 0, 0, 'S', 2, 0).sealed() }, ErrCorrupt,
		"service network flag 0x02"},
	{"Service revision 0", func() []byte {
		return header(3).u8('P', 0).noRequests().u8('C', 0, 0, 'S', 0, 1, 3, 'n', '/', 's', 0, 1, 1).sealed()
	}, ErrCorrupt, "revision 0"},
	{"Services out of order", func() []byte {
		return header(3).u8('P', 0).noRequests().u8('C', 0, 0, 'S', 0, 2, 3, 'n', '/', 't', 1, 1, 1, 3, 'n', '/', 's', 1, 1, 1).sealed()
	}, ErrCorrupt, "sorts before"},
	{"version 2 without its cluster section", func() []byte { return header(2).u8('P', 0).noRequests().sealed() }, ErrCorrupt,
		"found 0x40 where the cluster section tag 'C' belongs"},
	{"version 0", func() []byte { return header(0).u8('P', 0).noRequests().sealed() }, ErrVersion, "version 0"},
	{"checksum mismatch", func() []byte { b := encodedSample(); b[len(b)-1] ^= 1; return b }, ErrCorrupt,
		"checksum mismatch: stored 0x"},
	{"body byte changed", func() []byte { b := encodedSample(); b[len(b)-6] ^= 0x20; return b }, ErrCorrupt,
		"checksum mismatch"},
	{"trailing data", func() []byte { return append(encodedSample(), 0) }, ErrCorrupt, "trailing data after the checksum"},
	{"snapshot twice", func() []byte { return append(encodedSample(), encodedSample()...) }, ErrCorrupt, "trailing data"},
	{"missing checksum", func() []byte { return header(1).u8('P', 0).noRequests() }, ErrCorrupt, "truncated at byte 34, in checksum"},
	{"wrong section tag", func() []byte { return header(1).u8('Q', 0).noRequests().sealed() }, ErrCorrupt,
		`found 0x51 where the pools section tag 'P' belongs`},
	{"sections out of order", func() []byte { return header(1).u8('P', 0, 'M', 0, 'R', 0).sealed() }, ErrCorrupt,
		"requests section tag"},
	{"unknown flags", func() []byte { return header(1).onePool("\x01").uv(1).str("o").u8(2).uv(1).noRequests().sealed() },
		ErrCorrupt, `flags 0x02 has unknown bits (pool 0 "a", allocation 0)`},
	{"non-minimal varint", func() []byte { return header(1).u8('P', 0x80, 0x00).noRequests().sealed() }, ErrCorrupt,
		"pool count is a varint longer than needed"},
	{"varint overflow", func() []byte { return header(1).u8('P').u8(bytes.Repeat([]byte{0xff}, 10)...).u8(1).sealed() },
		ErrCorrupt, "pool count overflows 64 bits"},
	{"varint of ten continuation bytes", func() []byte { return header(1).u8('P').u8(bytes.Repeat([]byte{0x80}, 10)...) },
		ErrCorrupt, "pool count overflows 64 bits"},
	{"count above popcount", func() []byte { return header(1).onePool("\x03").uv(3).noRequests().sealed() }, ErrCorrupt,
		"3 allocation records for 2 set bits"},
	{"huge count", func() []byte { return header(1).onePool("\xff").uv(1 << 62).noRequests().sealed() }, ErrCorrupt,
		"4611686018427387904 allocation records for 8 set bits"},
	{"huge pool count", func() []byte { return header(1).u8('P').uv(1 << 63).noRequests().sealed() }, ErrCorrupt,
		"pool name is 82 bytes"}, // 'R' read as a length
	{"huge owner length", func() []byte { return header(1).onePool("\x01").uv(1).uv(1 << 62).sealed() }, ErrCorrupt,
		"owner is 4611686018427387904 bytes, want at most 253"},
	{"huge data length", func() []byte { return header(1).u8('P', 1).str("a").str("1-8").uv(1 << 40).sealed() }, ErrCorrupt,
		"data is 1099511627776 bytes"},
	{"huge result length", func() []byte {
		return header(1).u8('P', 0, 'R', 1).str("id").uv(1).u8(make([]byte, 8)...).uv(1 << 50).sealed()
	}, ErrCorrupt, "result is 1125899906842624 bytes"},
	{"huge request count", func() []byte { return header(1).u8('P', 0, 'R').uv(1<<64 - 1) }, ErrCorrupt,
		"truncated at byte 41, in request ID (request 0)"},
	{"data ends early", func() []byte { return header(1).u8('P', 1).str("a").str("1-8").uv(100000).u8(1, 2, 3) }, ErrCorrupt,
		"truncated at byte 42, in data (pool 0 \"a\")"},
}

func encodedSample() []byte {
	var buf bytes.Buffer
	if err := Write(&buf, sample()); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func TestReadRefusesDamage(t *testing.T) {
	for _, tc := range damaged {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(bytes.NewReader(tc.input()))
			requireKind(t, err, tc.want, tc.msg)
			require.Nil(t, got)
		})
	}
}

// TestReadRefusesEveryFlip changes each byte of an encoding in turn: the
// checksum covers them all, so every change must be refused.
func TestReadRefusesEveryFlip(t *testing.T) {
	enc := encodedSample()
	for i := range enc {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(enc)
			b[i] ^= mask
			got, err := Read(bytes.NewReader(b))
			require.Error(t, err, "Read with byte %d ^ %#02x", i, mask)
			require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersion) || errors.Is(err, ErrMagic),
				"Read with byte %d ^ %#02x = %v, want a sentinel", i, mask, err)
			require.Nil(t, got)
		}
	}
}

func TestReadRefusesEveryTruncation(t *testing.T) {
	enc := encodedSample()
	for n := range enc {
		got, err := Read(bytes.NewReader(enc[:n]))
		requireKind(t, err, ErrCorrupt, "truncated at byte")
		require.Nil(t, got, "Read of %d of %d bytes", n, len(enc))
	}
}

// TestReadShortReads feeds an encoding bigger than the buffer through
// readers that return little at a time, or data with io.EOF.
func TestReadShortReads(t *testing.T) {
	want := sample()
	want.Pools[0].Data = append(make([]byte, 100_000), want.Pools[0].Data...) // leading zeros past the buffer
	want.Requests[0].Result = bytes.Repeat([]byte("result"), 40_000)
	enc := encoded(t, want)
	for _, tc := range []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"one byte", iotest.OneByteReader},
		{"half", iotest.HalfReader},
		{"data with EOF", iotest.DataErrReader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(tc.wrap(bytes.NewReader(enc)))
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

// TestReadIOError checks that a reader's failure is passed on, not taken
// for damage.
func TestReadIOError(t *testing.T) {
	enc := encodedSample()
	for _, after := range []int{0, 5, 30, len(enc) - 2, len(enc)} {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			r := io.MultiReader(bytes.NewReader(enc[:after]), iotest.ErrReader(errBoom))
			got, err := Read(r)
			require.ErrorIs(t, err, errBoom)
			require.NotErrorIs(t, err, ErrCorrupt)
			require.NotErrorIs(t, err, ErrMagic)
			require.Nil(t, got)
		})
	}
	t.Run("no progress", func(t *testing.T) {
		_, err := Read(emptyReader{})
		require.ErrorIs(t, err, io.ErrNoProgress)
	})
}

type emptyReader struct{}

func (emptyReader) Read([]byte) (int, error) { return 0, nil }

// TestReadStreams checks that Read decides as the bytes arrive: a bad pool
// name followed by an endless stream is refused after reading little.
func TestReadStreams(t *testing.T) {
	prefix := header(1).u8('P', 2).str("Bad")
	src := &countingReader{r: io.MultiReader(bytes.NewReader(prefix), endless{})}
	_, err := Read(src)
	requireKind(t, err, ErrCorrupt, `pool name "Bad" is not a lowercase DNS label`)
	require.LessOrEqual(t, src.n, int64(2*bufSize), "Read consumed %d bytes before refusing", src.n)
}

type endless struct{}

func (endless) Read(p []byte) (int, error) { clear(p); return len(p), nil }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
