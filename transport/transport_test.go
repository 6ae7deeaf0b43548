package transport

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func listen(t *testing.T) *Mux {
	t.Helper()
	m, err := Listen("127.0.0.1:0", nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// accept returns the next connection of l, or fails after a second.
func accept(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			ch <- c
		}
	}()
	select {
	case c := <-ch:
		return c
	case <-time.After(time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

func TestMuxRoutesByFirstByte(t *testing.T) {
	m := listen(t)
	addr := m.Raft().Addr().String()

	rc, err := m.Raft().Dial(raft.ServerAddress(addr), time.Second)
	require.NoError(t, err)
	defer rc.Close()
	got := accept(t, m.Raft())
	defer got.Close()
	_, err = rc.Write([]byte("raft"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(got, buf)
	require.NoError(t, err)
	assert.Equal(t, "raft", string(buf), "the protocol byte is consumed, the rest arrives")

	fc, err := DialRPC(addr, time.Second)
	require.NoError(t, err)
	defer fc.Close()
	got2 := accept(t, m.RPC())
	defer got2.Close()
	_, err = fc.Write([]byte("F1"))
	require.NoError(t, err)
	buf = make([]byte, 2)
	_, err = io.ReadFull(got2, buf)
	require.NoError(t, err)
	assert.Equal(t, "F1", string(buf))
}

func TestMuxClosesGarbage(t *testing.T) {
	m := listen(t)
	conn, err := net.Dial("tcp", m.Raft().Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	require.NoError(t, err)
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	assert.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET),
		"a connection with an unknown protocol byte is closed, got %v", err)
	// Neither protocol saw it: both listeners are still empty and working.
	rc, err := m.Raft().Dial(raft.ServerAddress(m.Raft().Addr().String()), time.Second)
	require.NoError(t, err)
	defer rc.Close()
	accept(t, m.Raft()).Close()
}

func TestMuxCloseUnblocksAccept(t *testing.T) {
	m, err := Listen("127.0.0.1:0", nil, nil)
	require.NoError(t, err)
	errs := make(chan error, 2)
	for _, l := range []net.Listener{m.Raft(), m.RPC()} {
		go func(l net.Listener) {
			_, err := l.Accept()
			errs <- err
		}(l)
	}
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, m.Close())
	for i := 0; i < 2; i++ {
		select {
		case err := <-errs:
			assert.ErrorIs(t, err, net.ErrClosed)
		case <-time.After(time.Second):
			t.Fatal("Accept still blocked after Close")
		}
	}
	assert.NoError(t, m.Close(), "Close twice is fine")
}

func TestListenAdvertise(t *testing.T) {
	_, err := Listen("127.0.0.1:0", &net.TCPAddr{IP: net.IPv4zero, Port: 7000}, nil)
	require.Error(t, err, "an unspecified advertise IP cannot be dialed")
	assert.Contains(t, err.Error(), "not dialable")
	m, err := Listen("127.0.0.1:0", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, nil)
	require.NoError(t, err)
	defer m.Close()
	assert.NotEqual(t, 0, m.Raft().Addr().(*net.TCPAddr).Port, "port 0 advertises the port it got")
}

func TestFaults(t *testing.T) {
	a, b, c := raft.ServerAddress("a"), raft.ServerAddress("b"), raft.ServerAddress("c")
	f := NewFaults(1)
	f.Cut(a, b)
	assert.False(t, f.Allowed(a, b))
	assert.True(t, f.Allowed(b, a), "a cut is one direction")
	f.Heal()
	f.Partition([]raft.ServerAddress{a}, []raft.ServerAddress{b, c})
	for _, l := range [][2]raft.ServerAddress{{a, b}, {b, a}, {a, c}, {c, a}} {
		assert.False(t, f.Allowed(l[0], l[1]), "%s -> %s cut", l[0], l[1])
	}
	assert.True(t, f.Allowed(b, c), "inside a group nothing is cut")
	f.Heal()
	f.Drop(a, b, 1)
	ok, _ := f.pass(a, b)
	assert.False(t, ok, "p=1 drops everything")
	assert.True(t, f.Allowed(a, b), "a lossy link is not a cut")
	f.Heal()
	f.Delay(a, b, 5*time.Millisecond)
	ok, d := f.pass(a, b)
	assert.True(t, ok)
	assert.Equal(t, 5*time.Millisecond, d)
}

// stubTransport answers every RPC and counts them.
type stubTransport struct {
	raft.Transport
	calls int
}

func (s *stubTransport) AppendEntries(raft.ServerID, raft.ServerAddress, *raft.AppendEntriesRequest, *raft.AppendEntriesResponse) error {
	s.calls++
	return nil
}

func (s *stubTransport) RequestVote(raft.ServerID, raft.ServerAddress, *raft.RequestVoteRequest, *raft.RequestVoteResponse) error {
	s.calls++
	return nil
}

func (s *stubTransport) RequestPreVote(raft.ServerID, raft.ServerAddress, *raft.RequestPreVoteRequest, *raft.RequestPreVoteResponse) error {
	s.calls++
	return nil
}

// TestWrapGatesBothDirections: a cut request never reaches the inner
// transport; a cut response reaches it but the caller sees a failure.
func TestWrapGatesBothDirections(t *testing.T) {
	a, b := raft.ServerAddress("a"), raft.ServerAddress("b")
	f := NewFaults(1)
	inner := &stubTransport{}
	w := Wrap(inner, a, f)
	pv, ok := w.(raft.WithPreVote)
	require.True(t, ok, "pre-vote stays on behind the wrapper")

	require.NoError(t, w.AppendEntries("b", b, &raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{}))
	assert.Equal(t, 1, inner.calls)

	f.Cut(a, b)
	err := w.RequestVote("b", b, &raft.RequestVoteRequest{}, &raft.RequestVoteResponse{})
	require.Error(t, err)
	require.Error(t, pv.RequestPreVote("b", b, &raft.RequestPreVoteRequest{}, &raft.RequestPreVoteResponse{}))
	assert.Equal(t, 1, inner.calls, "requests across a cut never leave")

	f.Heal()
	f.Cut(b, a)
	err = w.AppendEntries("b", b, &raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{})
	require.Error(t, err, "the response is lost")
	assert.Equal(t, 2, inner.calls, "but the request arrived")
}
