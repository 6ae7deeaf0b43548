package transport

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answerTerm marks a response that came from the fake peer.
const answerTerm = 7

// fakeTransport answers every call at once with Term answerTerm, and
// counts the requests that reached it. It has raft.WithPreVote.
type fakeTransport struct {
	calls atomic.Int32
}

func (f *fakeTransport) Consumer() <-chan raft.RPC     { return nil }
func (f *fakeTransport) LocalAddr() raft.ServerAddress { return addrA }
func (f *fakeTransport) EncodePeer(_ raft.ServerID, a raft.ServerAddress) []byte {
	return []byte(a)
}
func (f *fakeTransport) DecodePeer(b []byte) raft.ServerAddress { return raft.ServerAddress(b) }
func (f *fakeTransport) SetHeartbeatHandler(func(raft.RPC))     {}

func (f *fakeTransport) AppendEntries(_ raft.ServerID, _ raft.ServerAddress, _ *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	f.calls.Add(1)
	resp.Term, resp.Success = answerTerm, true
	return nil
}

func (f *fakeTransport) RequestVote(_ raft.ServerID, _ raft.ServerAddress, _ *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	f.calls.Add(1)
	resp.Term, resp.Granted = answerTerm, true
	return nil
}

func (f *fakeTransport) RequestPreVote(_ raft.ServerID, _ raft.ServerAddress, _ *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	f.calls.Add(1)
	resp.Term, resp.Granted = answerTerm, true
	return nil
}

func (f *fakeTransport) InstallSnapshot(_ raft.ServerID, _ raft.ServerAddress, _ *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	f.calls.Add(1)
	if _, err := io.Copy(io.Discard, data); err != nil {
		return err
	}
	resp.Term, resp.Success = answerTerm, true
	return nil
}

func (f *fakeTransport) TimeoutNow(_ raft.ServerID, _ raft.ServerAddress, _ *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	f.calls.Add(1)
	resp.ID = []byte("b") // TimeoutNowResponse has no term
	return nil
}

func (f *fakeTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return &fakePipeline{f: f, done: make(chan raft.AppendFuture, 16)}, nil
}

// fakePipeline answers each request at once, in order.
type fakePipeline struct {
	f    *fakeTransport
	done chan raft.AppendFuture
}

func (p *fakePipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	p.f.calls.Add(1)
	resp.Term, resp.Success = answerTerm, true
	fut := &fakeFuture{start: time.Now(), req: args, resp: resp}
	p.done <- fut
	return fut, nil
}

func (p *fakePipeline) Consumer() <-chan raft.AppendFuture { return p.done }
func (p *fakePipeline) Close() error                       { return nil }

type fakeFuture struct {
	start time.Time
	req   *raft.AppendEntriesRequest
	resp  *raft.AppendEntriesResponse
}

func (f *fakeFuture) Error() error                            { return nil }
func (f *fakeFuture) Start() time.Time                        { return f.start }
func (f *fakeFuture) Request() *raft.AppendEntriesRequest     { return f.req }
func (f *fakeFuture) Response() *raft.AppendEntriesResponse   { return f.resp }
func (f *fakeFuture) String() string                          { return "fake" }
func (f *fakeFuture) Index() uint64                           { return 0 }
func (f *fakeFuture) Respond(*raft.AppendEntriesResponse) any { return nil }

// errNoPreVote and errNoResponse are how an rpcs entry fails on its own.
var (
	errNoPreVote  = errors.New("the wrapper has no pre-vote")
	errNoResponse = errors.New("no pipelined response within 5s")
)

// rpcs are the outbound paths of a raft.Transport to addrB, each returning
// the response term the caller saw (0: none). They never touch a
// *testing.T, so tests may run them on other goroutines.
var rpcs = []struct {
	name string
	call func(w raft.Transport) (uint64, error)
}{
	{"AppendEntries", func(w raft.Transport) (uint64, error) {
		var resp raft.AppendEntriesResponse
		err := w.AppendEntries("b", addrB, &raft.AppendEntriesRequest{}, &resp)
		return resp.Term, err
	}},
	{"RequestVote", func(w raft.Transport) (uint64, error) {
		var resp raft.RequestVoteResponse
		err := w.RequestVote("b", addrB, &raft.RequestVoteRequest{}, &resp)
		return resp.Term, err
	}},
	{"RequestPreVote", func(w raft.Transport) (uint64, error) {
		pv, ok := w.(raft.WithPreVote)
		if !ok {
			return 0, errNoPreVote
		}
		var resp raft.RequestPreVoteResponse
		err := pv.RequestPreVote("b", addrB, &raft.RequestPreVoteRequest{}, &resp)
		return resp.Term, err
	}},
	{"InstallSnapshot", func(w raft.Transport) (uint64, error) {
		var resp raft.InstallSnapshotResponse
		err := w.InstallSnapshot("b", addrB, &raft.InstallSnapshotRequest{}, &resp, strings.NewReader("snapshot"))
		return resp.Term, err
	}},
	{"TimeoutNow", func(w raft.Transport) (uint64, error) {
		var resp raft.TimeoutNowResponse
		err := w.TimeoutNow("b", addrB, &raft.TimeoutNowRequest{}, &resp)
		if resp.ID != nil {
			return answerTerm, err
		}
		return 0, err
	}},
	{"pipelined AppendEntries", func(w raft.Transport) (uint64, error) {
		p, err := w.AppendEntriesPipeline("b", addrB)
		if err != nil {
			return 0, err
		}
		defer p.Close()
		if _, err := p.AppendEntries(&raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{}); err != nil {
			return 0, err
		}
		select {
		case fut := <-p.Consumer():
			err := fut.Error()
			return fut.Response().Term, err
		case <-time.After(5 * time.Second):
			return 0, errNoResponse
		}
	}},
}

// TestWrapGatesEveryPath runs every outbound path of the wrapper (local a,
// peer b) through every kind of fault.
func TestWrapGatesEveryPath(t *testing.T) {
	noLeak(t)
	// timeout bounds the calls that must time out, short to keep the test
	// quick; a call expected to succeed gets ample time, so that a loaded
	// machine (the race detector, other packages' tests) cannot fail it.
	const timeout, ample = 50 * time.Millisecond, 5 * time.Second
	delayBoth := func(f *Faults) {
		f.Delay(addrA, addrB, 10*time.Millisecond)
		f.Delay(addrB, addrA, 10*time.Millisecond)
	}
	faults := []struct {
		name     string
		set      func(f *Faults)
		wantErr  []error       // all must match; none: success
		reachesB bool          // the request reached the peer
		atLeast  time.Duration // the call takes at least this long
	}{
		{"healthy", func(*Faults) {}, nil, true, 0},
		{"request cut", func(f *Faults) { f.Cut(addrA, addrB) }, []error{ErrCut, os.ErrDeadlineExceeded}, false, timeout},
		{"response cut", func(f *Faults) { f.Cut(addrB, addrA) }, []error{ErrCut, os.ErrDeadlineExceeded}, true, timeout},
		{"request dropped", func(f *Faults) { f.Drop(addrA, addrB, 1) }, []error{ErrDropped}, false, 0},
		{"response dropped", func(f *Faults) { f.Drop(addrB, addrA, 1) }, []error{ErrDropped}, true, 0},
		{"delayed both ways", delayBoth, nil, true, 20 * time.Millisecond},
		{"delayed past the timeout", func(f *Faults) { f.Delay(addrA, addrB, time.Hour) }, []error{os.ErrDeadlineExceeded}, false, timeout},
		{"other links cut", func(f *Faults) { f.Isolate(addrC, []raft.ServerAddress{addrA, addrB, addrC}) }, nil, true, 0},
	}
	for _, rpc := range rpcs {
		for _, fault := range faults {
			t.Run(rpc.name+"/"+fault.name, func(t *testing.T) {
				f := NewFaults(1)
				f.SetTimeout(timeout)
				if fault.wantErr == nil {
					f.SetTimeout(ample)
				}
				fault.set(f)
				inner := &fakeTransport{}
				w := Wrap(inner, addrA, f)
				start := time.Now()
				term, err := rpc.call(w)
				elapsed := time.Since(start)
				if fault.wantErr == nil {
					require.NoError(t, err)
					assert.EqualValues(t, answerTerm, term, "the peer's response is delivered")
				} else {
					for _, want := range fault.wantErr {
						assert.ErrorIs(t, err, want)
					}
					assert.Zero(t, term, "no response is delivered across a fault")
				}
				assert.Equal(t, fault.reachesB, inner.calls.Load() == 1, "the request reached the peer")
				assert.GreaterOrEqual(t, elapsed, fault.atLeast)
				assert.Less(t, elapsed, fault.atLeast+2*time.Second)
			})
		}
	}
}

// TestWrapHealReleasesHeld: a message held by a cut is delivered, late,
// once the cut heals, as TCP retransmits across a healed partition.
func TestWrapHealReleasesHeld(t *testing.T) {
	noLeak(t)
	for _, rpc := range rpcs {
		for _, dir := range []struct {
			name     string
			from, to raft.ServerAddress
		}{{"request", addrA, addrB}, {"response", addrB, addrA}} {
			t.Run(rpc.name+"/"+dir.name, func(t *testing.T) {
				f := NewFaults(1) // DefaultTimeout: held far longer than the test
				f.Cut(dir.from, dir.to)
				inner := &fakeTransport{}
				w := Wrap(inner, addrA, f)
				type result struct {
					term uint64
					err  error
				}
				done := make(chan result, 1)
				go func() {
					term, err := rpc.call(w)
					done <- result{term, err}
				}()
				select {
				case r := <-done:
					t.Fatalf("call returned across a cut: %v", r)
				case <-time.After(50 * time.Millisecond):
				}
				f.Heal()
				select {
				case r := <-done:
					require.NoError(t, r.err)
					assert.EqualValues(t, answerTerm, r.term)
				case <-time.After(2 * time.Second):
					t.Fatal("Heal did not release the held call")
				}
				assert.EqualValues(t, 1, inner.calls.Load())
			})
		}
	}
}

func TestWrapZeroTimeoutFailsAtOnce(t *testing.T) {
	f := NewFaults(1)
	f.SetTimeout(0)
	f.Cut(addrA, addrB)
	f.Delay(addrB, addrA, 20*time.Millisecond)
	w := Wrap(&fakeTransport{}, addrA, f)
	start := time.Now()
	err := w.AppendEntries("b", addrB, &raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{})
	require.ErrorIs(t, err, ErrCut)
	assert.NotErrorIs(t, err, os.ErrDeadlineExceeded, "a refused call, not a timeout")
	assert.Less(t, time.Since(start), time.Second, "at once, not after DefaultTimeout (10 s)")

	f.Heal()
	f.Delay(addrA, addrB, 20*time.Millisecond)
	start = time.Now()
	require.NoError(t, w.AppendEntries("b", addrB, &raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{}),
		"without a timeout a delay is never cut short")
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
}

// TestWrapCloseFailsHeld: closing the transport, or the pipeline, ends the
// calls a cut holds.
func TestWrapCloseFailsHeld(t *testing.T) {
	noLeak(t)
	f := NewFaults(1)
	f.Cut(addrA, addrB)
	f.Cut(addrB, addrA)
	w := Wrap(&fakeTransport{}, addrA, f)

	p, err := w.AppendEntriesPipeline("b", addrB)
	require.NoError(t, err)
	pipeErr := make(chan error, 1)
	go func() {
		_, err := p.AppendEntries(&raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{})
		pipeErr <- err
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, p.Close())
	select {
	case err := <-pipeErr:
		assert.ErrorIs(t, err, raft.ErrPipelineShutdown)
	case <-time.After(2 * time.Second):
		t.Fatal("pipeline Close left a request held")
	}

	callErr := make(chan error, 1)
	go func() {
		callErr <- w.RequestVote("b", addrB, &raft.RequestVoteRequest{}, &raft.RequestVoteResponse{})
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, w.(raft.WithClose).Close())
	select {
	case err := <-callErr:
		assert.ErrorIs(t, err, raft.ErrTransportShutdown)
	case <-time.After(2 * time.Second):
		t.Fatal("Close left a call held")
	}
}

// TestWrapPipelineHoldsInOrder: responses held by a cut come out after the
// heal, all of them, in the order sent; a pipeline closed with a response
// held fails the future its AppendEntries returned.
func TestWrapPipelineHoldsInOrder(t *testing.T) {
	noLeak(t)
	f := NewFaults(1)
	f.Cut(addrB, addrA)
	w := Wrap(&fakeTransport{}, addrA, f)
	p, err := w.AppendEntriesPipeline("b", addrB)
	require.NoError(t, err)
	var sent []raft.AppendFuture
	for i := range 3 {
		fut, err := p.AppendEntries(&raft.AppendEntriesRequest{PrevLogEntry: uint64(i)}, &raft.AppendEntriesResponse{})
		require.NoError(t, err, "requests pass a one-way cut of responses")
		sent = append(sent, fut)
	}
	select {
	case fut := <-p.Consumer():
		t.Fatalf("a response crossed the cut: %+v", fut.Response())
	case <-time.After(50 * time.Millisecond):
	}
	f.Heal()
	for i := range 3 {
		select {
		case fut := <-p.Consumer():
			require.NoError(t, fut.Error())
			assert.EqualValues(t, i, fut.Request().PrevLogEntry, "in order")
			assert.True(t, fut.Response().Success)
			assert.Same(t, sent[i], fut, "Consumer yields the futures AppendEntries returned")
		case <-time.After(2 * time.Second):
			t.Fatalf("response %d not released by Heal", i)
		}
	}

	f.Cut(addrB, addrA)
	fut, err := p.AppendEntries(&raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	assert.ErrorIs(t, fut.Error(), raft.ErrPipelineShutdown)
	assert.False(t, fut.Response().Success)
}

// bareTransport has the methods of raft.Transport and no others.
type bareTransport struct{ raft.Transport }

func TestWrapOptionalInterfaces(t *testing.T) {
	_, inmem := raft.NewInmemTransport("a")
	m := listenT(t, DefaultHandshakeTimeout)
	network := NewTCPTransport(m.Raft(), nil)
	t.Cleanup(func() { _ = network.Close() })
	tests := []struct {
		name               string
		inner              raft.Transport
		preVote, withPeers bool
	}{
		{"NetworkTransport", network, true, false},
		{"InmemTransport", inmem, true, true},
		{"bare", bareTransport{&fakeTransport{}}, false, false},
		{"pre-vote only", &fakeTransport{}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, innerPreVote := tt.inner.(raft.WithPreVote)
			_, innerPeers := tt.inner.(raft.WithPeers)
			require.Equal(t, tt.preVote, innerPreVote, "the test's premise")
			require.Equal(t, tt.withPeers, innerPeers, "the test's premise")
			w := Wrap(tt.inner, "a", NewFaults(1))
			_, ok := w.(raft.WithPreVote)
			assert.Equal(t, tt.preVote, ok, "WithPreVote")
			_, ok = w.(raft.WithPeers)
			assert.Equal(t, tt.withPeers, ok, "WithPeers")
			_, ok = w.(raft.WithClose)
			assert.True(t, ok, "WithClose")
			assert.Equal(t, tt.inner.LocalAddr(), w.LocalAddr())
			assert.Equal(t, tt.inner.EncodePeer("x", "y"), w.EncodePeer("x", "y"))
		})
	}
}

// TestWrapInmemPeers: wrapped InmemTransports connect to each other (the
// wrapper unwraps the peer for InmemTransport) and calls pass the table.
func TestWrapInmemPeers(t *testing.T) {
	f := NewFaults(1)
	f.SetTimeout(50 * time.Millisecond)
	_, ia := raft.NewInmemTransport(addrA)
	_, ib := raft.NewInmemTransport(addrB)
	wa, wb := Wrap(ia, addrA, f), Wrap(ib, addrB, f)
	wa.(raft.WithPeers).Connect(addrB, wb)
	t.Cleanup(func() { _ = wa.(raft.WithClose).Close(); _ = wb.(raft.WithClose).Close() })

	stop := make(chan struct{})
	defer close(stop)
	go func() { // b answers every call
		for {
			select {
			case rpc := <-wb.Consumer():
				rpc.Respond(&raft.RequestVoteResponse{Term: answerTerm, Granted: true}, nil)
			case <-stop:
				return
			}
		}
	}()
	var resp raft.RequestVoteResponse
	require.NoError(t, wa.RequestVote("b", addrB, &raft.RequestVoteRequest{}, &resp))
	assert.True(t, resp.Granted)

	f.Cut(addrA, addrB)
	resp = raft.RequestVoteResponse{}
	err := wa.RequestVote("b", addrB, &raft.RequestVoteRequest{}, &resp)
	assert.ErrorIs(t, err, ErrCut)
	assert.False(t, resp.Granted)

	f.Heal()
	wa.(raft.WithPeers).Disconnect(addrB)
	err = wa.RequestVote("b", addrB, &raft.RequestVoteRequest{}, &resp)
	assert.Error(t, err, "Disconnect reaches the InmemTransport")
	assert.False(t, errors.Is(err, ErrCut), "and is not a fault of the table")
}
