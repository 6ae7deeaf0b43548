package forward

import (
	"context"
	"net"
	"net/rpc"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oldLeader serves Submit only, as a leader of a release before
// SubmitBatch does.
type oldLeader struct{}

func (oldLeader) Submit(args *wire.SubmitArgs, reply *wire.SubmitReply) error {
	reply.Result = fsm.EncodeResult(&fsm.Result{Created: true})
	return nil
}

// newLeader serves SubmitBatch too.
type newLeader struct{ oldLeader }

func (newLeader) SubmitBatch(args *wire.SubmitBatchArgs, reply *wire.SubmitBatchReply) error {
	reqs, err := fsm.DecodeEntry(args.Entry)
	if err != nil {
		return err
	}
	reply.Results = make([]wire.SubmitReply, len(reqs))
	for i := range reqs {
		reply.Results[i].Result = fsm.EncodeResult(&fsm.Result{Created: true})
	}
	return nil
}

// newClient returns a Client that dials through dial (nil: TCP), with
// the given BatchWait; it closes, and its goroutines end, with the test.
func newClient(t *testing.T, dial func(string, time.Duration) (net.Conn, error), batchWait time.Duration) *Client {
	t.Helper()
	if dial == nil {
		dial = func(a string, d time.Duration) (net.Conn, error) { return net.DialTimeout("tcp", a, d) }
	}
	shutdown := make(chan struct{})
	var wg sync.WaitGroup
	c := New(Config{Dial: dial, BatchWait: batchWait, Shutdown: shutdown, Leader: func() string { return "" },
		Go: func(fn func()) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fn()
			}()
		}})
	t.Cleanup(func() { close(shutdown); c.Close(); wg.Wait() })
	return c
}

// serveFake serves rcvr as "Node" on addr ("" for a free port) until the
// test ends or stop is called, which also closes its connections.
func serveFake(t *testing.T, addr string, rcvr any) (string, func()) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := rpc.NewServer()
	require.NoError(t, srv.RegisterName("Node", rcvr))
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- c
			go srv.ServeConn(c)
		}
	}()
	stop := func() {
		l.Close()
		for {
			select {
			case c := <-conns:
				c.Close()
			default:
				return
			}
		}
	}
	t.Cleanup(stop)
	return l.Addr().String(), stop
}

// TestBatcherOlderLeader: a leader without SubmitBatch answers a batch
// with net/rpc's "can't find method", a definite failure (nothing was
// proposed) that sends the writes one by one while that connection
// lasts; once the leader restarts (upgraded), the next write is batched
// again.
func TestBatcherOlderLeader(t *testing.T) {
	addr, stop := serveFake(t, "", oldLeader{})
	c := newClient(t, nil, 0)
	b := c.batcher(addr)
	write := func() Outcome {
		it := &item{req: &fsm.Request{Kind: fsm.KindTxn, ID: "w"}, done: make(chan Outcome, 1)}
		require.True(t, b.enqueue(it), "batched")
		select {
		case o := <-it.done:
			return o
		case <-time.After(10 * time.Second):
			t.Fatal("no answer")
		}
		return Outcome{}
	}

	o := write()
	require.ErrorIs(t, o.Err, errNoBatch)
	assert.True(t, o.Definite, "a call the leader does not have proposed nothing")
	assert.False(t, b.enqueue(&item{done: make(chan Outcome, 1)}), "the same connection: one Submit per write")
	var reply wire.SubmitReply
	_, err := c.Call(context.Background(), addr, wire.MethodSubmit, &wire.SubmitArgs{Entry: fsm.EncodeBatch([]*fsm.Request{{Kind: fsm.KindTxn, ID: "w"}})}, &reply, nil)
	require.NoError(t, err, "Submit works on the older leader")

	stop() // the leader restarts, upgraded, on the same address
	serveFake(t, addr, newLeader{})
	_, err = c.Call(context.Background(), addr, wire.MethodSubmit, &wire.SubmitArgs{}, &reply, nil)
	require.Error(t, err, "the old connection broke; the client drops it")
	o = write()
	require.NoError(t, o.Err, "a new connection asks for SubmitBatch again")
	assert.True(t, o.Result.Created)
}

// TestBatcherAbandon: a write its caller gives up while it waits in the
// queue was never sent, a definite failure; one the sender has taken may
// have reached the leader, an unknown outcome. The sender skips the
// first and still answers the second.
func TestBatcherAbandon(t *testing.T) {
	addr, _ := serveFake(t, "", newLeader{})
	release := make(chan struct{})
	c := newClient(t, func(a string, d time.Duration) (net.Conn, error) {
		<-release // the sender is held in its first dial
		return net.DialTimeout("tcp", a, d)
	}, 0)
	b := c.batcher(addr)
	item := func() *item {
		return &item{req: &fsm.Request{Kind: fsm.KindTxn, ID: "w"}, done: make(chan Outcome, 1)}
	}
	taken, queued := item(), item()
	require.True(t, b.enqueue(taken))
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return taken.state == itemSent
	}, 5*time.Second, time.Millisecond, "the sender takes the first write")
	require.True(t, b.enqueue(queued))

	o := b.abandon(queued, context.Canceled)
	assert.True(t, o.Definite, "a write still queued was never sent: %v", o.Err)
	o = b.abandon(taken, context.Canceled)
	assert.False(t, o.Definite, "a write the sender took may have been sent: %v", o.Err)

	close(release)
	select {
	case o := <-taken.done:
		require.NoError(t, o.Err, "the taken write is still answered")
	case <-time.After(10 * time.Second):
		t.Fatal("no answer for the taken write")
	}
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return !b.running && len(b.queue) == 0
	}, 5*time.Second, time.Millisecond, "the sender skips the abandoned write and stops")
	assert.Empty(t, queued.done, "the abandoned write was not sent")
}

// sizedLeader serves SubmitBatch and tells the test how many writes
// each call carried.
type sizedLeader struct {
	newLeader
	sizes chan int
}

func (l sizedLeader) SubmitBatch(args *wire.SubmitBatchArgs, reply *wire.SubmitBatchReply) error {
	if err := l.newLeader.SubmitBatch(args, reply); err != nil {
		return err
	}
	l.sizes <- len(reply.Results)
	return nil
}

// TestBatcherGathersExpected: the sender holds a batch open for the
// writes it expects back (those of the call answered last), sends as
// soon as they are there, and sends what it has once the oldest write
// has waited the hold. An answered call sets what is expected next.
func TestBatcherGathersExpected(t *testing.T) {
	leader := sizedLeader{sizes: make(chan int, 16)}
	addr, _ := serveFake(t, "", leader)
	c := newClient(t, nil, time.Minute)
	b := c.batcher(addr)
	write := func() *item {
		it := &item{req: &fsm.Request{Kind: fsm.KindTxn, ID: "w"}, done: make(chan Outcome, 1), queued: time.Now()}
		require.True(t, b.enqueue(it))
		return it
	}
	answered := func(its ...*item) {
		t.Helper()
		for _, it := range its {
			select {
			case o := <-it.done:
				require.NoError(t, o.Err)
			case <-time.After(10 * time.Second):
				t.Fatal("no answer")
			}
		}
	}

	b.mu.Lock()
	b.expect, b.hold = 3, time.Minute // three callers expected back
	b.mu.Unlock()
	first := write()
	select {
	case got := <-leader.sizes:
		t.Fatalf("a call of %d writes went before the expected three were there", got)
	case <-time.After(300 * time.Millisecond):
	}
	second, third := write(), write()
	require.Equal(t, 3, <-leader.sizes, "the three share one call")
	answered(first, second, third)
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.expect == 3 && b.hold > 0 && b.hold < time.Minute
	}, 5*time.Second, time.Millisecond, "the answer sets the next wait: its call's writes, its call's time")

	b.mu.Lock()
	b.expect, b.hold = 3, 200*time.Millisecond
	b.mu.Unlock()
	lone := write()
	require.Equal(t, 1, <-leader.sizes, "after the hold, what is there goes")
	answered(lone)
}

// recordingLeader serves SubmitBatch as a new leader would and records the
// request IDs each call carried.
type recordingLeader struct {
	newLeader
	mu  sync.Mutex
	ids []string
}

func (l *recordingLeader) SubmitBatch(args *wire.SubmitBatchArgs, reply *wire.SubmitBatchReply) error {
	reqs, err := fsm.DecodeEntry(args.Entry)
	if err != nil {
		return err
	}
	l.mu.Lock()
	for _, r := range reqs {
		l.ids = append(l.ids, r.ID)
	}
	l.mu.Unlock()
	return l.newLeader.SubmitBatch(args, reply)
}

func (l *recordingLeader) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}

// TestAbandonedBeforeSendIsNotSent: a write whose caller gives up while
// the sender is taking it into a call is either left out of the call (its
// caller told it was never sent) or in it (told the outcome is unknown).
// send used to encode the batch before it looked at which writes were
// given up: the write of a caller told "never sent" (503 NoLeader, which a
// client without a key answers with a new write) reached the leader too.
func TestAbandonedBeforeSendIsNotSent(t *testing.T) {
	leader := &recordingLeader{}
	addr, _ := serveFake(t, "", leader)
	c := newClient(t, nil, 0)
	b := c.batcher(addr)
	live := &item{req: &fsm.Request{Kind: fsm.KindTxn, ID: "live"}, done: make(chan Outcome, 1)}
	gone := &item{req: &fsm.Request{Kind: fsm.KindTxn, ID: "gone"}, done: make(chan Outcome, 1)}

	// The sender has taken both writes from the queue (run) and enters
	// send while the caller of one gives up (Submit -> abandon),
	// which waits for the lock first and so takes it first.
	b.mu.Lock()
	abandoned := make(chan Outcome, 1)
	go func() { abandoned <- b.abandon(gone, context.DeadlineExceeded) }()
	time.Sleep(100 * time.Millisecond)
	sent := make(chan struct{})
	go func() { b.send([]*item{live, gone}); close(sent) }()
	time.Sleep(100 * time.Millisecond)
	b.mu.Unlock()

	o := <-abandoned
	<-sent
	require.True(t, o.Definite, "the caller gave up before the write was taken: %v", o.Err)
	select {
	case o := <-live.done:
		require.NoError(t, o.Err, "the write still wanted is answered")
	case <-time.After(10 * time.Second):
		t.Fatal("no answer for the live write")
	}
	assert.Equal(t, []string{"live"}, leader.seen(), "a write answered as never sent must not reach the leader")
}
