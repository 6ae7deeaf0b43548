package jepsen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/test/checker"
)

// PoolSet is the two small pools of a run: few values, so that concurrent
// allocations collide and released values are taken again.
type PoolSet struct {
	IPPool, IPRange     string
	PortPool, PortRange string
	IPValues            []string // every value of the IP pool
	PortValues          []string // every value of the port pool
}

// DefaultPools is a /28 (14 addresses, no static band) and 16 ports (no
// static band). The addresses are data: nothing is ever sent to them.
func DefaultPools() PoolSet {
	ps := PoolSet{IPPool: "clusterip-ipv4", IPRange: "10.96.0.0/28", PortPool: "nodeport", PortRange: "30000-30015"}
	for i := 1; i <= 14; i++ {
		ps.IPValues = append(ps.IPValues, fmt.Sprintf("10.96.0.%d", i))
	}
	for p := 30000; p <= 30015; p++ {
		ps.PortValues = append(ps.PortValues, fmt.Sprint(p))
	}
	return ps
}

// Names returns the two pools' names.
func (ps PoolSet) Names() []string { return []string{ps.IPPool, ps.PortPool} }

// Values returns every value of pool.
func (ps PoolSet) Values(pool string) []string {
	if pool == ps.IPPool {
		return ps.IPValues
	}
	return ps.PortValues
}

// Workload is concurrent clients, each issuing one operation at a time:
// Clients that pick a node per operation and write and read, Readers per
// node bound to it that only read, and the bursts of reads the nemesis
// asks for. Every attempt is recorded in the history.
type Workload struct {
	Addrs []string // the nodes' API URLs
	// Sec dials the nodes and gives the tokens: the clients that write
	// send the write token, the readers and the bursts the read token.
	Sec     *Security
	Pools   PoolSet
	Clients int // clients that pick a node per operation
	// Readers is the number of read-only clients bound to each node, as
	// Jepsen binds its clients: one on a paused leader keeps a read in
	// flight there through the pause.
	Readers int
	Seed    uint64
	// OpTimeout bounds a write attempt of the even-numbered clients: longer
	// than the server's 5 s, so that NoLeader answers arrive.
	OpTimeout time.Duration
	// ImpatientTimeout bounds a write attempt of the odd-numbered clients:
	// short, so that they leave a node cut off from the majority (or a
	// follower waiting on a paused leader) and write through the new
	// leader while the fault lasts, at the price of unknown outcomes.
	ImpatientTimeout time.Duration
	// ReadTimeout bounds a read attempt. Short, so that a reader bound to
	// a paused leader sends a fresh read every second through the pause:
	// only a read sent after the new leader's writes can show that the
	// old leader answered from stale state when it resumed.
	ReadTimeout time.Duration
	Now         func() int64 // the run's clock, in nanoseconds
	// Services makes the Clients write Services (services.go) instead of
	// allocating and releasing: creates, updates and deletes of a few
	// names, so that they collide.
	Services bool

	wg      sync.WaitGroup // the clients and the bursts
	mu      sync.Mutex
	history checker.History
	bursts  int // burst reads issued, for their client IDs
}

// Run runs the clients until ctx ends, lets the attempts in flight finish,
// and returns the history.
func (w *Workload) Run(ctx context.Context) checker.History {
	wg := &w.wg
	for c := 0; c < w.Clients+w.Readers*len(w.Addrs); c++ {
		sticky := -1
		if c >= w.Clients {
			sticky = (c - w.Clients) % len(w.Addrs)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.client(ctx, c, sticky)
		}()
	}
	wg.Wait()
	return w.history
}

// Burst sends n reads to node at once, each from a client of its own: a
// list of each pool, then gets of values drawn with rng, and returns
// without waiting for them. The nemesis calls it shortly before it
// resumes a paused leader: the reads queue up at the paused node and reach
// it the moment it resumes, while it may still believe it leads; a read
// it then served from its own state would miss the writes of the new
// leader. (Lists are two at most: porcupine judges each list as a get of
// every value, and many concurrent reads of one value make its search
// exponential.) Run must be running.
func (w *Workload) Burst(node, n int, rng *rand.Rand) {
	w.mu.Lock()
	first := w.Clients + w.Readers*len(w.Addrs) + w.bursts
	w.bursts += n
	w.mu.Unlock()
	c := w.Sec.Client(w.Addrs[node], 0, w.Sec.Read)
	for i := 0; i < n; i++ {
		op := checker.Op{Client: first + i, Kind: "list", Pool: w.Pools.IPPool}
		if i%2 == 1 {
			op.Pool = w.Pools.PortPool
		}
		if i >= 2 {
			vals := w.Pools.Values(op.Pool)
			op.Kind, op.Value = "get", vals[rng.IntN(len(vals))]
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.attempt(node, c, &op)
			w.record(op)
		}()
	}
}

func (w *Workload) record(op checker.Op) {
	w.mu.Lock()
	w.history = append(w.history, op)
	w.mu.Unlock()
}

// session is one client's state.
type session struct {
	id     int
	sticky int // the node of a reader; -1 for a client that picks
	rng    *rand.Rand
	nodes  []*client.Client
	shun   []time.Time  // per node: avoid it until then
	held   []checker.Op // allocations this client was told it holds
	n      int          // operations issued
	// svcs is what this client last learnt of each Service it wrote:
	// the answer of its acknowledged PUT; a Service it deleted or found
	// missing is not in it.
	svcs map[string]types.Service
}

// shunFor is how long a client avoids a node that did not answer, refused
// the connection, or knew no leader, as a client with several endpoints
// would. Without it, clients spend a partition waiting on the cut-off
// node, and the majority sees too few writes to snapshot past a follower.
const shunFor = time.Second

// pick draws a node, preferring those not shunned.
func (s *session) pick() int {
	if s.sticky >= 0 {
		return s.sticky
	}
	now := time.Now()
	var ok []int
	for i, t := range s.shun {
		if now.After(t) {
			ok = append(ok, i)
		}
	}
	if len(ok) == 0 {
		return s.rng.IntN(len(s.nodes))
	}
	return ok[s.rng.IntN(len(ok))]
}

// client runs one client; sticky >= 0 makes it a reader bound to that node.
func (w *Workload) client(ctx context.Context, id, sticky int) {
	s := &session{id: id, sticky: sticky, rng: rand.New(rand.NewPCG(w.Seed, uint64(1000+id))), svcs: map[string]types.Service{}}
	token := w.Sec.Write
	if sticky >= 0 {
		token = w.Sec.Read
	}
	for _, a := range w.Addrs {
		// No keep-alive (Security.Transport): a refused connection then
		// means the request was never sent (a definite failure).
		s.nodes = append(s.nodes, w.Sec.Client(a, 0, token))
		s.shun = append(s.shun, time.Time{})
	}
	for ctx.Err() == nil {
		var op checker.Op
		if w.Services && sticky < 0 {
			op = w.nextService(s)
		} else {
			op = w.next(s)
		}
		w.perform(ctx, s, op)
		think := time.Duration(s.rng.IntN(5)) * time.Millisecond
		if sticky >= 0 {
			think = time.Duration(20+s.rng.IntN(20)) * time.Millisecond // enough to keep a read in flight at a paused node
		}
		sleep(ctx, think)
	}
}

// next draws an operation. Every write gets a unique key and every
// allocate a unique owner ("c<client>-<n>").
func (w *Workload) next(s *session) checker.Op {
	s.n++
	pool := w.Pools.IPPool
	if s.rng.IntN(2) == 1 {
		pool = w.Pools.PortPool
	}
	vals := w.Pools.Values(pool)
	name := fmt.Sprintf("c%d-%d", s.id, s.n)
	op := checker.Op{Client: s.id, Pool: pool}
	r := s.rng.IntN(100)
	if s.sticky >= 0 { // a reader: half gets, half lists (a stale list shows on every value it covers)
		r = 81 + r%19
	}
	switch {
	case r < 20: // dynamic
		op.Kind, op.Owner, op.Key = "allocate", name, name
	case r < 35: // static
		op.Kind, op.Owner, op.Key, op.Value = "allocate", name, name, vals[s.rng.IntN(len(vals))]
	case r < 60 && len(s.held) > 0: // release own, with the owner precondition
		h := s.held[s.rng.IntN(len(s.held))]
		op.Kind, op.Pool, op.Value, op.Owner, op.Key = "release", h.Pool, h.Result, h.Owner, name
	case r < 72: // release anything, maybe foreign: no precondition, or someone else's
		op.Kind, op.Value, op.Key = "release", vals[s.rng.IntN(len(vals))], name
		if s.rng.IntN(3) == 0 {
			op.Owner = fmt.Sprintf("c%d-%d", s.rng.IntN(w.Clients), 1+s.rng.IntN(s.n))
		}
	case r < 90:
		op.Kind, op.Value = "get", vals[s.rng.IntN(len(vals))]
	default:
		op.Kind = "list"
	}
	return op
}

// domainFailure holds the codes of answers the state machine decided.
var domainFailure = map[string]bool{"AlreadyAllocated": true, "RangeFull": true, "NotAllocated": true,
	"OwnerMismatch": true, "NotInRange": true, checker.CodeInvalid: true, checker.CodeServiceNotFound: true}

// maxAttempts bounds the attempts of one key.
const maxAttempts = 3

// perform runs op against random nodes; a write whose outcome is unknown
// is retried with the same key (and the same request) three times in four,
// up to maxAttempts attempts. Every attempt is recorded.
func (w *Workload) perform(ctx context.Context, s *session, op checker.Op) {
	for attempt := 0; attempt < maxAttempts && ctx.Err() == nil; attempt++ {
		op.Attempt = attempt
		node := s.pick()
		w.attempt(node, s.nodes[node], &op)
		w.record(op)
		s.learn(op)
		switch {
		case op.Outcome == checker.OK || op.Err == "OwnerMismatch" || op.Err == "NotAllocated":
			s.update(op) // released, or no longer ours
		case op.Outcome == checker.Unknown || !domainFailure[op.Err]:
			s.shun[node] = time.Now().Add(shunFor)
			if op.Err == "ConnRefused" || s.sticky >= 0 && op.Err != "NoAnswer" {
				sleep(ctx, 100*time.Millisecond) // all three may be down; a reader's node may be
			}
		}
		if op.Outcome != checker.Unknown || op.Key == "" || s.rng.IntN(4) == 0 {
			return
		}
		sleep(ctx, time.Duration(50+s.rng.IntN(250))*time.Millisecond)
	}
}

// update keeps s.held in step with an acknowledged allocate, or a release
// that freed the value or found it not held by its owner.
func (s *session) update(op checker.Op) {
	switch op.Kind {
	case "allocate":
		s.held = append(s.held, op)
	case "release":
		for i, h := range s.held {
			gone := op.Outcome == checker.OK || op.Err == "NotAllocated" || op.Owner == h.Owner
			if h.Pool == op.Pool && h.Result == op.Value && gone {
				s.held = append(s.held[:i], s.held[i+1:]...)
				return
			}
		}
	}
}

// attempt sends one attempt to node (c is its client) and fills in its
// times, outcome and the nodes involved. It does not end with the run: an
// attempt in flight when the run stops gets its answer.
func (w *Workload) attempt(node int, c *client.Client, op *checker.Op) {
	timeout := w.OpTimeout
	switch {
	case op.Key == "":
		timeout = w.ReadTimeout
	case op.Client%2 == 1:
		timeout = w.ImpatientTimeout
	}
	actx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	op.Outcome, op.Err, op.Result, op.Listed = checker.OK, "", "", nil
	op.Holds, op.Revision, op.Answer = nil, 0, nil
	op.Node, op.ServedBy = fmt.Sprintf("n%d", node+1), ""
	wopts := client.Options{IdempotencyKey: op.Key}
	var err error
	var meta client.Meta
	op.Call = w.Now()
	switch op.Kind {
	case "allocate":
		a, m, e := c.Allocate(actx, op.Pool, op.Value, op.Owner, wopts)
		op.Result, meta, err = a.Value, m, e
	case "release":
		meta, err = c.Release(actx, op.Pool, op.Value, op.Owner, wopts)
	case "get":
		a, m, e := c.Get(actx, op.Pool, op.Value, client.Options{})
		op.Result, meta, err = a.Owner, m, e
		var ce *client.Error
		if errors.As(err, &ce) && ce.Code == "NotAllocated" {
			err, op.Result = nil, "" // free
		}
	case "list":
		page, m, e := c.ListPage(actx, op.Pool, "", "", 1000, client.Options{})
		meta, err = m, e
		if err == nil {
			op.Listed = map[string]string{}
			for _, a := range page.Allocations {
				op.Listed[a.Value] = a.Owner
			}
		}
	case checker.KindServiceCreate, checker.KindServiceUpdate, checker.KindServiceDelete:
		err = w.serviceAttempt(actx, c, op)
	}
	op.Return = w.Now()
	op.ServedBy = meta.ServedBy
	var ce *client.Error
	if errors.As(err, &ce) {
		op.ServedBy = ce.ServedBy
	}
	if err != nil {
		op.Result, op.Listed = "", nil
		op.Holds, op.Revision, op.Answer = nil, 0, nil
		op.Outcome, op.Err, op.Result = classify(err, op.Key != "")
		if ce != nil && checker.IsServiceKind(op.Kind) {
			op.Result, _ = ce.Details["field"].(string) // which value of a Service write was refused
		}
	}
}

// classify turns an attempt's error into an outcome, an error code and the
// holder an error reported.
//
//   - A 4xx answer is definite, and so is 503 NoLeader (the node tried no
//     leader, so nothing was appended).
//   - A refused connection is definite: keep-alive is off, so nothing was
//     sent.
//   - For a write, anything else (503 Unavailable, a 500, a timeout, a reset
//     connection) may have been applied: Unknown. A read that did not
//     answer changed nothing: Fail.
func classify(err error, write bool) (checker.Outcome, string, string) {
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && (ce.Status < 500 || ce.Code == "NoLeader"):
		holder, _ := ce.Details["owner"].(string)
		return checker.Fail, ce.Code, holder
	case errors.Is(err, syscall.ECONNREFUSED):
		return checker.Fail, "ConnRefused", ""
	case !write && errors.As(err, &ce):
		return checker.Fail, ce.Code, ""
	case !write:
		return checker.Fail, "NoAnswer", ""
	case errors.As(err, &ce):
		return checker.Unknown, ce.Code, ""
	}
	return checker.Unknown, "NoAnswer", ""
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
