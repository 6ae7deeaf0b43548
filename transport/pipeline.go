package transport

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// faultyPipeline is a raft.AppendPipeline whose requests and responses pass
// a fault table (see faulty.AppendEntriesPipeline).
type faultyPipeline struct {
	t      *faulty
	target raft.ServerAddress
	inner  raft.AppendPipeline
	out    chan raft.AppendFuture // judged futures, in inner's order

	done      chan struct{} // closed by Close: stops the relay and held messages
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup // the relay

	mu sync.Mutex
	// mu guards the following
	futures map[raft.AppendFuture]*pipeFuture // by inner future, until both AppendEntries and the relay have seen it
}

var _ raft.AppendPipeline = (*faultyPipeline)(nil)

func newPipeline(t *faulty, target raft.ServerAddress, inner raft.AppendPipeline) *faultyPipeline {
	p := &faultyPipeline{
		t:       t,
		target:  target,
		inner:   inner,
		out:     make(chan raft.AppendFuture),
		done:    make(chan struct{}),
		futures: map[raft.AppendFuture]*pipeFuture{},
	}
	p.wg.Add(1)
	go p.relay()
	return p
}

// aborts are what ends a held message: this pipeline's Close, or the
// transport's.
func (p *faultyPipeline) aborts() (abort, abort) {
	return abort{ch: p.done, err: raft.ErrPipelineShutdown}, abort{ch: p.t.stop, err: raft.ErrTransportShutdown}
}

// AppendEntries passes the request (local -> target), then hands it to
// inner. The future it returns is the one Consumer yields.
func (p *faultyPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	a, b := p.aborts()
	if err := p.t.f.pass(dirRequest, p.t.local, p.target, p.t.f.deadline(time.Now()), a, b); err != nil {
		return nil, err
	}
	inner, err := p.inner.AppendEntries(args, resp)
	if err != nil {
		return nil, err
	}
	return p.wrapper(inner), nil
}

// Consumer yields each future once its response has been judged.
func (p *faultyPipeline) Consumer() <-chan raft.AppendFuture { return p.out }

// Close stops the relay and the messages held for this pipeline, closes
// inner, and fails the futures never judged with raft.ErrPipelineShutdown.
func (p *faultyPipeline) Close() error {
	p.closeOnce.Do(func() {
		close(p.done)
		p.closeErr = p.inner.Close()
		p.wg.Wait()
		p.mu.Lock()
		defer p.mu.Unlock()
		for inner, w := range p.futures {
			w.resolve(&raft.AppendEntriesResponse{}, raft.ErrPipelineShutdown)
			delete(p.futures, inner)
		}
	})
	return p.closeErr
}

// relay judges the response of each of inner's futures, in order, and
// hands the future on. A held response holds the ones behind it, as on one
// TCP stream.
func (p *faultyPipeline) relay() {
	defer p.wg.Done()
	a, b := p.aborts()
	for {
		var inner raft.AppendFuture
		select {
		case inner = <-p.inner.Consumer():
		case <-p.done:
			return
		}
		w := p.wrapper(inner)
		err := inner.Error()
		resp := inner.Response()
		if err == nil {
			deadline := p.t.f.deadline(inner.Start())
			if err = p.t.f.pass(dirResponse, p.target, p.t.local, deadline, a, b); err != nil {
				resp = &raft.AppendEntriesResponse{} // never hand on what crossed a cut
			}
		}
		w.resolve(resp, err)
		select {
		case p.out <- w:
		case <-p.done:
			return
		}
	}
}

// wrapper returns the wrapper of inner: made by whichever of AppendEntries
// and the relay comes first, forgotten when the other comes.
func (p *faultyPipeline) wrapper(inner raft.AppendFuture) *pipeFuture {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.futures[inner]; ok {
		delete(p.futures, inner)
		return w
	}
	w := &pipeFuture{inner: inner, ready: make(chan struct{})}
	p.futures[inner] = w
	return w
}

// pipeFuture is a pipelined AppendEntries whose response has been judged:
// Error and Response wait for the verdict.
type pipeFuture struct {
	inner raft.AppendFuture
	ready chan struct{} // closed by resolve
	once  sync.Once
	err   error
	resp  *raft.AppendEntriesResponse
}

var _ raft.AppendFuture = (*pipeFuture)(nil)

func (w *pipeFuture) resolve(resp *raft.AppendEntriesResponse, err error) {
	w.once.Do(func() {
		w.resp, w.err = resp, err
		close(w.ready)
	})
}

// Error waits for the verdict: nil, inner's error, or why the response did
// not pass.
func (w *pipeFuture) Error() error {
	<-w.ready
	return w.err
}

// Start is when the request was handed to the pipeline.
func (w *pipeFuture) Start() time.Time { return w.inner.Start() }

// Request is the request sent.
func (w *pipeFuture) Request() *raft.AppendEntriesRequest { return w.inner.Request() }

// Response waits for the verdict: the peer's response if it passed, else a
// zero response.
func (w *pipeFuture) Response() *raft.AppendEntriesResponse {
	<-w.ready
	return w.resp
}
