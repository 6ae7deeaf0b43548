package transport

import (
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Wrap returns inner with every call the node at local makes judged by f:
// the request by (local -> target), then the response by (target -> local).
// Gating both directions at the caller covers each link both ways, since
// every node of the cluster wraps its own transport. Calls coming in are not
// judged here: their sender's wrapper judged them.
//
// Every outbound path is gated: AppendEntries (heartbeats included),
// RequestVote, RequestPreVote, InstallSnapshot, TimeoutNow, and
// AppendEntriesPipeline, whose pipeline is wrapped so that each pipelined
// request and each pipelined response is judged too (see
// AppendEntriesPipeline). A call whose request does not pass never reaches
// inner; a call whose response does not pass reaches the peer, but the
// caller gets an error and a zeroed response.
//
// Optional interfaces, each implemented only as far as inner does, because
// raft probes them with type assertions:
//   - raft.WithPreVote (probed by raft.NewRaft): when inner has it, so
//     pre-vote stays on and is gated like RequestVote. Claiming it over an
//     inner transport without it would fail every pre-vote and so every
//     election.
//   - raft.WithPeers (InmemTransport's Connect/Disconnect): delegated, with
//     Connect unwrapping a wrapped peer transport, which InmemTransport
//     requires. NetworkTransport does not have it.
//   - raft.WithClose (probed by Raft's shutdown): always. Close stops the
//     calls still held by a fault, then closes inner if it can be closed.
//
// Consumer, LocalAddr, EncodePeer, DecodePeer and SetHeartbeatHandler are
// inner's.
func Wrap(inner raft.Transport, local raft.ServerAddress, f *Faults) raft.Transport {
	t := &faulty{inner: inner, local: local, f: f, stop: make(chan struct{})}
	pv, hasPreVote := inner.(raft.WithPreVote)
	wp, hasPeers := inner.(raft.WithPeers)
	switch {
	case hasPreVote && hasPeers:
		return &faultyPreVotePeers{faulty: t, preVote: preVote{t, pv}, peers: peers{wp}}
	case hasPreVote:
		return &faultyPreVote{faulty: t, preVote: preVote{t, pv}}
	case hasPeers:
		return &faultyPeers{faulty: t, peers: peers{wp}}
	default:
		return t
	}
}

// The four shapes Wrap returns, by the optional interfaces of inner.
type (
	faultyPreVote struct {
		*faulty
		preVote
	}
	faultyPeers struct {
		*faulty
		peers
	}
	faultyPreVotePeers struct {
		*faulty
		preVote
		peers
	}
)

var (
	_ raft.Transport         = (*faulty)(nil)
	_ raft.WithClose         = (*faulty)(nil)
	_ raft.WithPreVote       = (*faultyPreVote)(nil)
	_ raft.WithPeers         = (*faultyPeers)(nil)
	_ raft.LoopbackTransport = (*faultyPreVotePeers)(nil)
)

// faulty is a raft.Transport whose outbound calls pass a fault table.
type faulty struct {
	inner     raft.Transport
	local     raft.ServerAddress
	f         *Faults
	stop      chan struct{} // closed by Close: fails the calls held by a fault
	closeOnce sync.Once
}

// call makes one call to target through the table: the request
// local -> target, send, then the response target -> local, all within one
// deadline, as a connection deadline covers a whole RPC. A response that
// does not pass leaves *resp zeroed.
func call[R any](t *faulty, target raft.ServerAddress, resp *R, send func() error) error {
	deadline := t.f.deadline(time.Now())
	stop := abort{ch: t.stop, err: raft.ErrTransportShutdown}
	if err := t.f.pass(dirRequest, t.local, target, deadline, stop, abort{}); err != nil {
		return err
	}
	if err := send(); err != nil {
		return err
	}
	if err := t.f.pass(dirResponse, target, t.local, deadline, stop, abort{}); err != nil {
		var zero R
		*resp = zero
		return err
	}
	return nil
}

// AppendEntries gates an AppendEntries call, heartbeats included.
func (t *faulty) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return call(t, target, resp, func() error { return t.inner.AppendEntries(id, target, args, resp) })
}

// RequestVote gates a vote request.
func (t *faulty) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return call(t, target, resp, func() error { return t.inner.RequestVote(id, target, args, resp) })
}

// InstallSnapshot gates a snapshot transfer; data is not read when the
// request does not pass.
func (t *faulty) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return call(t, target, resp, func() error { return t.inner.InstallSnapshot(id, target, args, resp, data) })
}

// TimeoutNow gates the start of a leadership transfer.
func (t *faulty) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return call(t, target, resp, func() error { return t.inner.TimeoutNow(id, target, args, resp) })
}

// AppendEntriesPipeline opens inner's pipeline to target and wraps it:
// each pipelined request passes (local -> target) before inner sends it,
// blocking the sender while a cut holds it (the back-pressure the
// AppendPipeline contract allows), and each response passes
// (target -> local) before its future reaches Consumer, in order, as on
// one TCP stream. A response that does not pass is handed on as a failed
// future with a zero response, as raft's netPipeline hands on a read that
// timed out, so raft aborts the pipeline and never counts the entries as
// replicated. Opening carries no Raft message and is not judged; inner's
// error is returned as is (raft compares it with
// raft.ErrPipelineReplicationNotSupported).
func (t *faulty) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	inner, err := t.inner.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newPipeline(t, target, inner), nil
}

// Consumer returns inner's channel of inbound calls.
func (t *faulty) Consumer() <-chan raft.RPC { return t.inner.Consumer() }

// LocalAddr returns inner's address.
func (t *faulty) LocalAddr() raft.ServerAddress { return t.inner.LocalAddr() }

// EncodePeer is inner's.
func (t *faulty) EncodePeer(id raft.ServerID, addr raft.ServerAddress) []byte {
	return t.inner.EncodePeer(id, addr)
}

// DecodePeer is inner's.
func (t *faulty) DecodePeer(b []byte) raft.ServerAddress { return t.inner.DecodePeer(b) }

// SetHeartbeatHandler is inner's: heartbeats come in, and were judged by
// their sender's wrapper.
func (t *faulty) SetHeartbeatHandler(cb func(rpc raft.RPC)) { t.inner.SetHeartbeatHandler(cb) }

// Close fails the calls still held by a fault with
// raft.ErrTransportShutdown, then closes inner if it has raft.WithClose.
func (t *faulty) Close() error {
	t.closeOnce.Do(func() { close(t.stop) })
	if c, ok := t.inner.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

func (t *faulty) unwrap() raft.Transport { return t.inner }

// unwrap returns the transport a Wrap result wraps, or t itself.
func unwrap(t raft.Transport) raft.Transport {
	if w, ok := t.(interface{ unwrap() raft.Transport }); ok {
		return w.unwrap()
	}
	return t
}

// preVote gates inner's pre-vote.
type preVote struct {
	t  *faulty
	pv raft.WithPreVote
}

// RequestPreVote gates a pre-vote request like a vote request.
func (p preVote) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return call(p.t, target, resp, func() error { return p.pv.RequestPreVote(id, target, args, resp) })
}

// peers delegates inner's peer management.
type peers struct{ wp raft.WithPeers }

// Connect connects inner to peer's transport, unwrapped if Wrap made it.
func (p peers) Connect(peer raft.ServerAddress, t raft.Transport) { p.wp.Connect(peer, unwrap(t)) }

// Disconnect is inner's.
func (p peers) Disconnect(peer raft.ServerAddress) { p.wp.Disconnect(peer) }

// DisconnectAll is inner's.
func (p peers) DisconnectAll() { p.wp.DisconnectAll() }
