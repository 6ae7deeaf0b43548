package transport

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/raft"
)

// Directions of a message within a call, for errors.
const (
	dirRequest  = "request"
	dirResponse = "response"
)

// abort is a reason to give up on a message: once ch closes, the wait fails
// with err. The zero abort never fires.
type abort struct {
	ch  <-chan struct{}
	err error
}

// pass waits out the fate of one message from -> to, for a call that times
// out at deadline (zero: SetTimeout(0)). It returns nil once the message is
// through, or why it is not: ErrDropped, ErrCut (with
// os.ErrDeadlineExceeded when held to the deadline), a delay past the
// deadline (os.ErrDeadlineExceeded), or an abort's error.
func (f *Faults) pass(dir string, from, to raft.ServerAddress, deadline time.Time, a, b abort) error {
	for {
		v := f.judge(from, to)
		switch {
		case v.lost:
			return fmt.Errorf("transport: %s %s -> %s: %w", dir, from, to, ErrDropped)
		case !v.held:
			return delayMessage(dir, from, to, v.delay, deadline, a, b)
		case deadline.IsZero():
			return fmt.Errorf("transport: %s %s -> %s: %w", dir, from, to, ErrCut)
		}
		switch err := wait(v.changed, deadline, a, b); {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return fmt.Errorf("transport: %s %s -> %s held until the call timed out: %w: %w",
				dir, from, to, ErrCut, os.ErrDeadlineExceeded)
		case err != nil:
			return fmt.Errorf("transport: %s %s -> %s held by a cut: %w", dir, from, to, err)
		}
		// The table changed: judge the message again.
	}
}

// delayMessage holds a message for d, or fails it at deadline if that comes first.
func delayMessage(dir string, from, to raft.ServerAddress, d time.Duration, deadline time.Time, a, b abort) error {
	if d <= 0 {
		return nil
	}
	if deadline.IsZero() || time.Now().Add(d).Before(deadline) {
		if err := wait(nil, time.Now().Add(d), a, b); !errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("transport: %s %s -> %s delayed: %w", dir, from, to, err)
		}
		return nil
	}
	err := wait(nil, deadline, a, b)
	return fmt.Errorf("transport: %s %s -> %s delayed %v, past the call's timeout: %w", dir, from, to, d, err)
}

// wait blocks until ch closes (nil), deadline passes (os.ErrDeadlineExceeded;
// zero: never), or an abort fires (its error). A nil ch never closes.
func wait(ch <-chan struct{}, deadline time.Time, a, b abort) error {
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-ch:
		return nil
	case <-expired:
		return os.ErrDeadlineExceeded
	case <-a.ch:
		return a.err
	case <-b.ch:
		return b.err
	}
}
