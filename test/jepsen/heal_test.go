package jepsen

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/stretchr/testify/require"
)

// TestHealedFollowerForwards cuts a follower off from both peers while
// clients write through it, for long enough that TCP's retransmissions of
// the forwarded calls it had sent back off to several seconds, then heals
// the cut. A write that reaches the follower a second after the heal must
// be served within the server's 5 s request timeout.
//
// Before the follower closed a forwarding connection that stayed silent,
// new calls queued behind the bytes sent during the cut, which waited for
// the next retransmission: 23 s after a 30 s cut, 11 s or so after this
// one's 14 s.
func TestHealedFollowerForwards(t *testing.T) {
	if testing.Short() {
		t.Skip("jepsen: skipped in -short mode")
	}
	if err := Preflight(); err != nil {
		unavailable(t, err)
	}
	ps := DefaultPools()
	c, err := setUp(t, Options{Seed: 4242, Binary: binary(t), Artifacts: t.TempDir(), Insecure: *flagInsecure}, ps)
	require.NoError(t, err)
	require.NoError(t, c.Start())
	ctx := context.Background()
	leader, _, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	require.NoError(t, c.WaitPools(ctx, ps))
	f := (leader + 1) % 3
	peers := []int{leader, (leader + 2) % 3}
	cl := c.Sec.Client(c.Servers[f].API, 10*time.Second, c.Sec.Write)
	write := func() error {
		ctx, cancel := context.WithTimeout(ctx, 6*time.Second)
		defer cancel()
		a, _, err := cl.Allocate(ctx, ps.IPPool, "", "heal", client.Options{})
		if err == nil {
			_, err = cl.Release(ctx, ps.IPPool, a.Value, "heal", client.Options{})
		}
		return err
	}
	require.NoError(t, write(), "a write through the follower before the cut")

	// Writers keep forwarded calls in flight when the cut starts and
	// throughout it.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				_ = write()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, c.Lab.Drop(f, Both, peers...))
	time.Sleep(14 * time.Second)
	require.NoError(t, c.Lab.Heal())
	time.Sleep(time.Second)
	err = write()
	close(stop)
	wg.Wait()
	require.NoError(t, err, "a write through the follower a second after the heal")
}
