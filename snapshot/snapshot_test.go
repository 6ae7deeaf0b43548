package snapshot

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// bitmap returns the RangeAllocation bytes of a set of offsets the way
// Kubernetes computes them, with math/big; nil for the empty set (Read
// decodes an empty field as nil).
func bitmap(offsets ...int) []byte {
	b := new(big.Int)
	for _, o := range offsets {
		b.SetBit(b, o, 1)
	}
	if b.Sign() == 0 {
		return nil
	}
	return b.Bytes()
}

// allocations returns n records with distinct owners, every third static.
func allocations(n int) []Allocation {
	var out []Allocation
	for i := 0; i < n; i++ {
		out = append(out, Allocation{Owner: fmt.Sprintf("default/svc-%d", i), Static: i%3 == 0, Revision: uint64(10 + i)})
	}
	return out
}

// sample is a small state that uses every field; the damage tests flip and
// cut its encoding.
func sample() *State {
	return &State{
		Index: 1234, Term: 5,
		Pools: []Pool{
			{Name: "cluster-ips", Range: "10.96.0.0/24", Data: bitmap(0, 9, 16), Allocations: allocations(3)},
			{Name: "empty", Range: "fd00::/112"},
			{Name: "node-ports", Range: "30000-32767", Data: bitmap(86), Allocations: []Allocation{{Owner: "", Revision: 7}}},
		},
		Requests: []Request{
			{ID: "req-b", Index: 10, Fingerprint: 0xfeedfacecafebeef, Result: []byte(`{"ok":true}`)},
			{ID: "req-a", Index: 11, Fingerprint: 1},
		},
		Members: []Member{
			{ID: "node-1", RaftAddr: "10.0.0.1:7000", APIAddr: "10.0.0.1:8080"},
			{ID: "node-2", RaftAddr: "10.0.0.2:7000"},
		},
		Network: &Network{Families: []string{"IPv4", "IPv6"}, IPv4Pool: "cluster-ips", IPv6Pool: "empty", NodePortPool: "node-ports"},
		Services: []Service{
			{Key: "default/dns", Revision: 9, Spec: []byte("spec bytes of default/dns")},
			{Key: "kube-system/web", Revision: 12, Spec: []byte{1, 2, 3}},
		},
	}
}

func encoded(t testing.TB, s *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, s))
	return buf.Bytes()
}

// roundTrips are states that must survive Write then Read unchanged.
var roundTrips = []struct {
	name  string
	state func() *State
}{
	{"empty", func() *State { return &State{} }},
	{"header only", func() *State { return &State{Index: math.MaxUint64, Term: 1 << 40} }},
	{"pool without allocations", func() *State {
		return &State{Pools: []Pool{{Name: "a", Range: "30000-30015"}}}
	}},
	{"leading zero bytes in data", func() *State {
		return &State{Pools: []Pool{{Name: "a", Range: "10.96.0.0/24", Data: []byte{0, 0, 2, 1}, Allocations: allocations(2)}}}
	}},
	{"sample", sample},
	{"limits", func() *State {
		data := make([]byte, maxData) // one set bit at offset 0, behind 131072 zero bytes
		data[len(data)-1] = 1
		return &State{
			Pools: []Pool{{Name: strings.Repeat("a", maxName), Range: strings.Repeat("1", maxRange), Data: data,
				Allocations: []Allocation{{Owner: strings.Repeat("o", maxOwner), Static: true, Revision: math.MaxUint64}}}},
			Requests: []Request{{ID: strings.Repeat("r", maxReqID), Index: math.MaxUint64, Fingerprint: math.MaxUint64,
				Result: bytes.Repeat([]byte{0xa5}, maxResult)}},
			Members: []Member{{ID: strings.Repeat("m", maxMemberID), RaftAddr: strings.Repeat("r", maxAddr), APIAddr: strings.Repeat("a", maxAddr)}},
		}
	}},
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range roundTrips {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.state()
			enc := encoded(t, want)
			got, err := Read(bytes.NewReader(enc))
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.Equal(t, enc, encoded(t, got), "re-encoding differs")
		})
	}
}

// TestSpecBitmaps checks SPEC §4's vectors: the test's math/big oracle
// yields them, and a pool carrying them round-trips with one record per bit.
func TestSpecBitmaps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offsets []int
		data    string // hex
	}{
		{"{0}", []int{0}, "01"},
		{"{8}", []int{8}, "0100"},
		{"{0,9}", []int{0, 9}, "0201"},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := hex.DecodeString(tc.data)
			require.NoError(t, err)
			require.Equal(t, tc.data, hex.EncodeToString(bitmap(tc.offsets...)), "bitmap(%v)", tc.offsets)
			if len(data) == 0 {
				data = nil
			}
			want := &State{Pools: []Pool{{Name: "p", Range: "30000-30015", Data: data, Allocations: allocations(len(tc.offsets))}}}
			got, err := Read(bytes.NewReader(encoded(t, want)))
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

// layoutState and layoutBody pin the byte layout that doc.go draws.
var layoutState = &State{
	Index: 0x0102030405060708, Term: 9,
	Pools: []Pool{{Name: "a", Range: "1-2", Data: []byte{0x02, 0x01},
		Allocations: []Allocation{{Owner: "x", Static: true, Revision: 300}, {Revision: 1}}}},
	Requests: []Request{{ID: "r", Index: 5, Fingerprint: 0xaabbccddeeff0011, Result: []byte{0xde}}},
	Members:  []Member{{ID: "n1", RaftAddr: "h:1", APIAddr: "h:2"}},
}

func layoutBody(version string, tail ...string) []byte {
	return []byte(strings.Join(append([]string{
		"89524153 0d0a1a0a",                 // magic
		version,                             // version
		"0102030405060708 0000000000000009", // index, term
		"50 01",                             // 'P', 1 pool
		"01 61  03 312d32  02 0201  02",     // "a", "1-2", data 02 01, 2 allocations
		"01 78 01 ac02  00 00 01",           // "x" static rev 300; "" dynamic rev 1
		"52 01",                             // 'R', 1 request
		"01 72 05 aabbccddeeff0011 01 de",   // "r", index 5, fingerprint, result de
		"4d 01",                             // 'M', 1 member
		"02 6e31 03 683a31 03 683a32",       // "n1", "h:1", "h:2"
	}, tail...), ""))
}

func sealedHex(t *testing.T, body []byte) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(string(body), " ", ""))
	require.NoError(t, err)
	return seal(b)
}

func TestLayout(t *testing.T) {
	s := *layoutState
	s.ClusterID, s.FromBackup = "c1", true
	want := sealedHex(t, layoutBody("00000003", "43 02 6331 01", "53 00 00 00")) // 'C', "c1", from a backup; 'S', no network, no Services, nothing freed
	require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(encoded(t, &s)))

	s.Network = &Network{Families: []string{"IPv4"}, IPv4Pool: "a", NodePortPool: "p"}
	s.Services = []Service{{Key: "n/s", Revision: 7, Spec: []byte{0xee}}}
	s.ServicesFreed = 5
	want = sealedHex(t, layoutBody("00000003", "43 02 6331 01",
		"53 01 01 0449507634 01 61 00 01 70", // 'S', a network: ["IPv4"], "a", "", "p"
		"01 03 6e2f73 07 01 ee",              // 1 Service: "n/s", revision 7, spec ee
		"05"))                                // freed at index 5
	require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(encoded(t, &s)))
	got, err := Read(bytes.NewReader(want))
	require.NoError(t, err)
	require.Equal(t, &s, got)
}

// TestLayoutFeatureLevel: feature level 1 writes version 3, which the
// release before feature levels reads; level 2 writes version 4 with the
// level after the services section.
func TestLayoutFeatureLevel(t *testing.T) {
	s := *layoutState
	s.ClusterID, s.FeatureLevel = "c1", 1
	want := sealedHex(t, layoutBody("00000003", "43 02 6331 00", "53 00 00 00"))
	require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(encoded(t, &s)))
	nonvoter := s
	nonvoter.Members = []Member{{ID: "n1", Nonvoter: true}}
	require.ErrorIs(t, Write(io.Discard, &nonvoter), ErrInvalid, "format 3 cannot keep a non-voter")

	s.FeatureLevel = 2
	s.Members = []Member{{ID: "n1", RaftAddr: "h:1", APIAddr: "h:2", Nonvoter: true}}
	body := strings.Replace(string(layoutBody("00000004", "43 02 6331 00", "53 00 00 00", "46 02")), // 'F', level 2
		"02 6e31 03 683a31 03 683a32", "02 6e31 03 683a31 03 683a32 01", 1) // a member's flags: stays a non-voter
	want = sealedHex(t, []byte(body))
	require.Equal(t, hex.EncodeToString(want), hex.EncodeToString(encoded(t, &s)))
	got, err := Read(bytes.NewReader(want))
	require.NoError(t, err)
	require.Equal(t, &s, got)
}

// TestReadsVersion2: a snapshot written before the services section
// existed still restores, with no service network and no Services.
func TestReadsVersion2(t *testing.T) {
	got, err := Read(bytes.NewReader(sealedHex(t, layoutBody("00000002", "43 02 6331 01"))))
	require.NoError(t, err)
	want := *layoutState
	want.ClusterID, want.FromBackup = "c1", true
	require.Equal(t, &want, got)
}

// TestReadsVersion1: a snapshot written before the cluster section
// existed still restores, with no cluster ID.
func TestReadsVersion1(t *testing.T) {
	got, err := Read(bytes.NewReader(sealedHex(t, layoutBody("00000001"))))
	require.NoError(t, err)
	require.Equal(t, layoutState, got)
}

// TestChecksumIsCastagnoli pins the polynomial with its check value.
func TestChecksumIsCastagnoli(t *testing.T) {
	require.Equal(t, uint32(0xe3069283), crc32.Checksum([]byte("123456789"), castagnoli))
}

func TestWriteError(t *testing.T) {
	enc := encoded(t, sample())
	for _, after := range []int{0, 10, len(enc) - 4, len(enc) - 1} {
		t.Run(fmt.Sprint(after), func(t *testing.T) {
			err := Write(&failingWriter{after: after}, sample())
			require.ErrorIs(t, err, errBoom)
		})
	}
}

// seal appends the CRC-32C trailer to body.
func seal(body []byte) []byte {
	sum := crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli))
	return binary.BigEndian.AppendUint32(body, sum)
}

var errBoom = errors.New("boom")

// failingWriter accepts after bytes, then fails.
type failingWriter struct{ after, n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > w.after {
		k := w.after - w.n
		w.n = w.after
		return k, errBoom
	}
	w.n += len(p)
	return len(p), nil
}
