package transport

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Faults is a fault table shared by every node of an in-process cluster: it
// says, per directed link, whether messages are cut, lost at random, or
// slowed. Wrap consults it for each message a node sends and receives; other
// layers (the node's forwarding RPC) consult Allowed. It is safe for
// concurrent use; changes apply to messages judged after them, and release
// messages a cut is holding (see Cut). Make one with NewFaults.
//
// The kinds of fault, and what a caller of raft.Transport sees:
//
//	Cut    a black hole, like a firewall that drops packets: the message is
//	       held until the cut heals (then delivered late, as TCP's
//	       retransmission would) or until the call's timeout (then the call
//	       fails with ErrCut, matching os.ErrDeadlineExceeded)
//	Drop   a connection reset: the message is lost and the call fails at
//	       once with ErrDropped
//	Delay  the message arrives d later; a delay past the call's timeout
//	       fails the call as a timeout would
type Faults struct {
	mu sync.Mutex
	// mu guards the following
	rng     *rand.Rand
	timeout time.Duration
	cut     map[link]bool
	drop    map[link]float64
	delay   map[link]time.Duration
	changed chan struct{} // closed and replaced on every change, to wake held messages
}

// link is one direction between two addresses.
type link struct{ from, to raft.ServerAddress }

// NewFaults returns an empty table whose random drops follow seed, with a
// call timeout of DefaultTimeout.
func NewFaults(seed int64) *Faults {
	return &Faults{
		rng:     rand.New(rand.NewPCG(uint64(seed), 0x7261_6e67_6561_6c6c)),
		timeout: DefaultTimeout,
		cut:     map[link]bool{},
		drop:    map[link]float64{},
		delay:   map[link]time.Duration{},
		changed: make(chan struct{}),
	}
}

// SetTimeout sets how long a call may wait on a cut or a delay before it
// fails, timed from the start of the call as a connection deadline is. The
// default, DefaultTimeout, is what NewTCPTransport gives raft, so a cut
// hangs a call as long as a real partition would; tests that stop nodes
// behind a cut may shorten it, since raft's Shutdown waits for calls in
// flight. d <= 0 fails a call across a cut at once (a refused connection
// rather than a black hole, and what raft's InmemTransport does for a
// disconnected peer) and never cuts a delay short.
func (f *Faults) SetTimeout(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timeout = d
	f.changedLocked()
}

// Cut loses every message from -> to while it stands; see Faults for what
// the caller sees. One direction only: to -> from is untouched.
func (f *Faults) Cut(from, to raft.ServerAddress) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut[link{from, to}] = true
	f.changedLocked()
}

// Drop loses each message from -> to with probability p (0 removes the
// fault, 1 loses all); see Faults for what the caller sees.
func (f *Faults) Drop(from, to raft.ServerAddress, p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p <= 0 {
		delete(f.drop, link{from, to})
	} else {
		f.drop[link{from, to}] = p
	}
	f.changedLocked()
}

// Delay holds each message from -> to for d before it arrives (0 removes
// the fault).
func (f *Faults) Delay(from, to raft.ServerAddress, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d <= 0 {
		delete(f.delay, link{from, to})
	} else {
		f.delay[link{from, to}] = d
	}
	f.changedLocked()
}

// Partition cuts both directions between every pair of addresses in
// different groups. It adds to the cuts already in place; Heal clears them.
func (f *Faults) Partition(groups ...[]raft.ServerAddress) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, a := range groups {
		for _, b := range groups[i+1:] {
			for _, x := range a {
				for _, y := range b {
					f.cut[link{x, y}] = true
					f.cut[link{y, x}] = true
				}
			}
		}
	}
	f.changedLocked()
}

// Isolate cuts addr off from every other address in all, both ways.
func (f *Faults) Isolate(addr raft.ServerAddress, all []raft.ServerAddress) {
	rest := make([]raft.ServerAddress, 0, len(all))
	for _, a := range all {
		if a != addr {
			rest = append(rest, a)
		}
	}
	f.Partition([]raft.ServerAddress{addr}, rest)
}

// Heal clears every cut, drop and delay (the timeout stays), and releases
// the messages cuts were holding.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.cut)
	clear(f.drop)
	clear(f.delay)
	f.changedLocked()
}

// Allowed reports whether from -> to is not cut. Drops and delays do not
// count: they are decided per message, by Wrap.
func (f *Faults) Allowed(from, to raft.ServerAddress) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.cut[link{from, to}]
}

func (f *Faults) changedLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// deadline returns when a call starting at start times out; zero for never.
func (f *Faults) deadline(start time.Time) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.timeout <= 0 {
		return time.Time{}
	}
	return start.Add(f.timeout)
}

// verdict is the table's judgement of one message.
type verdict struct {
	held    bool          // a cut stands; wait on changed and judge again
	changed chan struct{} // when held: closed at the next change of the table
	lost    bool          // dropped
	delay   time.Duration // otherwise: deliver after this
}

// judge decides the fate of one message from -> to. A drop is drawn only
// for a message the table does not hold, so a seed's draws do not depend
// on how often held messages are judged again.
func (f *Faults) judge(from, to raft.ServerAddress) verdict {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := link{from, to}
	if f.cut[l] {
		return verdict{held: true, changed: f.changed}
	}
	if p := f.drop[l]; p > 0 && f.rng.Float64() < p {
		return verdict{lost: true}
	}
	return verdict{delay: f.delay[l]}
}
