package transport

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Faults is a fault table shared by every node of an in-process cluster:
// which directed links are cut, lossy or slow. It is safe for concurrent use.
type Faults struct {
	mu sync.Mutex
	// mu guards the following
	rng   *rand.Rand
	cut   map[link]bool
	drop  map[link]float64
	delay map[link]time.Duration
}

type link struct{ from, to raft.ServerAddress }

// NewFaults returns an empty table whose random drops follow seed.
func NewFaults(seed int64) *Faults {
	return &Faults{rng: rand.New(rand.NewPCG(uint64(seed), 0x5eed)), cut: map[link]bool{},
		drop: map[link]float64{}, delay: map[link]time.Duration{}}
}

// Cut loses every message from -> to.
func (f *Faults) Cut(from, to raft.ServerAddress) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut[link{from, to}] = true
}

// Drop loses each message from -> to with probability p.
func (f *Faults) Drop(from, to raft.ServerAddress, p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drop[link{from, to}] = p
}

// Delay holds each message from -> to for d before sending it.
func (f *Faults) Delay(from, to raft.ServerAddress, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay[link{from, to}] = d
}

// Partition cuts both directions between every pair in different groups.
func (f *Faults) Partition(groups ...[]raft.ServerAddress) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, a := range groups {
		for j, b := range groups {
			if i == j {
				continue
			}
			for _, x := range a {
				for _, y := range b {
					f.cut[link{x, y}] = true
				}
			}
		}
	}
}

// Isolate cuts addr off from every other address of all.
func (f *Faults) Isolate(addr raft.ServerAddress, all []raft.ServerAddress) {
	var rest []raft.ServerAddress
	for _, a := range all {
		if a != addr {
			rest = append(rest, a)
		}
	}
	f.Partition([]raft.ServerAddress{addr}, rest)
}

// Heal clears every fault.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.cut)
	clear(f.drop)
	clear(f.delay)
}

// Allowed reports whether from -> to is not cut (drops and delays aside).
func (f *Faults) Allowed(from, to raft.ServerAddress) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.cut[link{from, to}]
}

// pass decides the fate of one message from -> to: lost, or sent after a delay.
func (f *Faults) pass(from, to raft.ServerAddress) (bool, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := link{from, to}
	if f.cut[l] {
		return false, 0
	}
	if p := f.drop[l]; p > 0 && f.rng.Float64() < p {
		return false, 0
	}
	return true, f.delay[l]
}

// Wrap returns inner with every outbound RPC of the node at local gated by
// the fault table: the request by local -> target, the response by
// target -> local. A lost request or response fails the call at once with
// an error, as raft's own InmemTransport does for a disconnected peer;
// raft treats it like a timeout (backs off, retries, and a leader that
// hears from no quorum steps down). Each node wraps its own transport, so
// gating the sender's side covers both directions of every link.
//
// Every path is gated: AppendEntries, RequestVote, RequestPreVote (the
// wrapper implements raft.WithPreVote, so pre-vote stays on),
// InstallSnapshot, TimeoutNow, and pipelined AppendEntries: the pipeline is
// wrapped too, and so are the futures it hands back, so that pipelined
// replication cannot bypass a cut.
func Wrap(inner raft.Transport, local raft.ServerAddress, f *Faults) raft.Transport {
	return &faulty{inner: inner, local: local, f: f}
}

type faulty struct {
	inner raft.Transport
	local raft.ServerAddress
	f     *Faults
}

var (
	_ raft.Transport   = (*faulty)(nil)
	_ raft.WithPreVote = (*faulty)(nil)
	_ raft.WithClose   = (*faulty)(nil)
)

// request gates the request direction of an RPC to target.
func (t *faulty) request(target raft.ServerAddress) error {
	ok, d := t.f.pass(t.local, target)
	if !ok {
		return fmt.Errorf("transport: request %s -> %s lost (fault injection)", t.local, target)
	}
	if d > 0 {
		time.Sleep(d)
	}
	return nil
}

// response gates the response direction of an RPC to target.
func (t *faulty) response(target raft.ServerAddress, err error) error {
	if err != nil {
		return err
	}
	ok, d := t.f.pass(target, t.local)
	if !ok {
		return fmt.Errorf("transport: response %s -> %s lost (fault injection)", target, t.local)
	}
	if d > 0 {
		time.Sleep(d)
	}
	return nil
}

func (t *faulty) Consumer() <-chan raft.RPC     { return t.inner.Consumer() }
func (t *faulty) LocalAddr() raft.ServerAddress { return t.inner.LocalAddr() }
func (t *faulty) EncodePeer(id raft.ServerID, a raft.ServerAddress) []byte {
	return t.inner.EncodePeer(id, a)
}
func (t *faulty) DecodePeer(b []byte) raft.ServerAddress    { return t.inner.DecodePeer(b) }
func (t *faulty) SetHeartbeatHandler(cb func(rpc raft.RPC)) { t.inner.SetHeartbeatHandler(cb) }

func (t *faulty) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if err := t.request(target); err != nil {
		return err
	}
	return t.response(target, t.inner.AppendEntries(id, target, args, resp))
}

func (t *faulty) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := t.request(target); err != nil {
		return err
	}
	return t.response(target, t.inner.RequestVote(id, target, args, resp))
}

// RequestPreVote gates pre-vote like a vote; an inner transport without
// pre-vote fails the call, which raft treats as a lost vote.
func (t *faulty) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	pv, ok := t.inner.(raft.WithPreVote)
	if !ok {
		return fmt.Errorf("transport: inner transport has no pre-vote")
	}
	if err := t.request(target); err != nil {
		return err
	}
	return t.response(target, pv.RequestPreVote(id, target, args, resp))
}

func (t *faulty) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if err := t.request(target); err != nil {
		return err
	}
	return t.response(target, t.inner.InstallSnapshot(id, target, args, resp, data))
}

func (t *faulty) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if err := t.request(target); err != nil {
		return err
	}
	return t.response(target, t.inner.TimeoutNow(id, target, args, resp))
}

// Close closes the inner transport if it can be closed.
func (t *faulty) Close() error {
	if c, ok := t.inner.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// AppendEntriesPipeline wraps the inner pipeline so each pipelined request
// and each response future passes the fault table.
func (t *faulty) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if err := t.request(target); err != nil {
		return nil, err
	}
	inner, err := t.inner.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	p := &faultyPipeline{t: t, target: target, inner: inner, ch: make(chan raft.AppendFuture, 128), done: make(chan struct{})}
	p.wg.Add(1)
	go p.relay()
	return p, nil
}

type faultyPipeline struct {
	t      *faulty
	target raft.ServerAddress
	inner  raft.AppendPipeline
	ch     chan raft.AppendFuture
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// relay hands the inner pipeline's futures on, wrapped, in order.
func (p *faultyPipeline) relay() {
	defer p.wg.Done()
	for {
		select {
		case fut := <-p.inner.Consumer():
			select {
			case p.ch <- &faultyFuture{AppendFuture: fut, p: p}:
			case <-p.done:
				return
			}
		case <-p.done:
			return
		}
	}
}

func (p *faultyPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if err := p.t.request(p.target); err != nil {
		return nil, err
	}
	return p.inner.AppendEntries(args, resp)
}

func (p *faultyPipeline) Consumer() <-chan raft.AppendFuture { return p.ch }

func (p *faultyPipeline) Close() error {
	err := p.inner.Close()
	p.once.Do(func() { close(p.done) })
	p.wg.Wait()
	return err
}

// faultyFuture loses a pipelined response whose return direction is cut.
type faultyFuture struct {
	raft.AppendFuture
	p *faultyPipeline
}

func (f *faultyFuture) Error() error {
	return f.p.t.response(f.p.target, f.AppendFuture.Error())
}
