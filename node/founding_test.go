package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rangealloc/rangealloc/node/internal/forward"
	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// TestFoundingOfferWhole: what a founder tells its peers (foundingOffer,
// in every probe reply) never says "ready" without its candidate, however
// the read and the offer (offerCandidate) interleave. Told "ready" with no
// candidate, a peer leaves this founder's candidate out of the least it
// takes, and the founders bootstrap under two cluster IDs.
func TestFoundingOfferWhole(t *testing.T) {
	torn := 0
	for range 20000 {
		f := &founder{life: &lifecycle{}}
		done := make(chan struct{})
		go func() {
			f.offerCandidate("5e1f0000-0000-4000-8000-000000000000")
			close(done)
		}()
		for {
			ready, candidate := f.foundingOffer()
			if ready {
				if candidate == "" {
					torn++
				}
				break
			}
		}
		<-done
	}
	if torn > 0 {
		t.Fatalf("%d of 20000 offers read as ready without their candidate", torn)
	}
}

// stubFounder answers probes as a founding peer whose offer reads
// "ready" with no candidate for its first torn replies, then whole.
type stubFounder struct {
	torn      int
	candidate string
	probes    atomic.Int32
}

func (s *stubFounder) Probe(_ *wire.ProbeArgs, reply *wire.ProbeReply) error {
	n := s.probes.Add(1)
	*reply = wire.ProbeReply{ID: "n2"}
	switch {
	case n == 1: // not ready yet: it has not seen every peer
	case int(n) <= 1+s.torn:
		reply.Ready = true
	default:
		reply.Ready, reply.Candidate = true, s.candidate
	}
	return nil
}

// TestFoundingWaitsForTheCandidate: a peer that says it is ready without
// saying its candidate (an offer read half-made) does not count as ready.
// Counted, its candidate would be left out of the least the founders
// take, and this founder would bootstrap under an ID of its own while the
// peer took another.
func TestFoundingWaitsForTheCandidate(t *testing.T) {
	stub := &stubFounder{torn: 3, candidate: "00000000-0000-4000-8000-000000000000"}
	srv := rpc.NewServer()
	require.NoError(t, srv.RegisterName("Node", stub))
	f := &founder{id: "n1", logger: hclog.NewNullLogger(), life: &lifecycle{}, shutdown: make(chan struct{}),
		cfg: Config{DataDir: t.TempDir(), Peers: []Peer{{ID: "n1", RaftAddr: "n1:1"}, {ID: "n2", RaftAddr: "n2:1"}}}}
	fwd := forward.New(forward.Config{DialProbe: func(string, time.Duration) (net.Conn, error) {
		peer, conn := net.Pipe()
		go srv.ServeConn(peer)
		return conn, nil
	}})
	defer fwd.Close()
	f.probes = &prober{from: "n1", fwd: fwd}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := f.found(ctx)
	require.NoError(t, err)
	assert.Equal(t, stub.candidate, id, "the founder took its own candidate before it had the peer's")
	assert.Greater(t, int(stub.probes.Load()), 1+stub.torn, "the torn replies were all seen")
}

// TestFoundingResumes: a node that bootstrapped a cluster and stopped
// before its leadership created the configured pools (a crash or a power
// cut between the two) still holds the unfinished-founding marker; started
// again, it creates them as leader, then removes the marker. Without the
// marker a node with state creates no configured pool: only a founding
// does.
func TestFoundingResumes(t *testing.T) {
	for _, unfinished := range []bool{true, false} {
		t.Run(fmt.Sprintf("marker %t", unfinished), func(t *testing.T) {
			cfg := testConfig(t, t.TempDir())
			pools := cfg.Pools
			cfg.Pools = nil // the founding's leadership creates nothing
			n := openReady(t, cfg)
			require.NoError(t, n.Close())
			marker := filepath.Join(cfg.DataDir, unfinishedFile)
			assert.NoFileExists(t, marker, "a founding whose pools exist is finished")
			if unfinished {
				require.NoError(t, os.WriteFile(marker, []byte(unfinishedText), 0o600))
			}
			cfg.Pools = pools
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n, err := Open(ctx, cfg)
			require.NoError(t, err)
			defer n.Close()
			require.NoError(t, n.WaitForLeader(ctx))
			if !unfinished {
				require.Eventually(t, func() bool { return n.Readiness().Ready }, 10*time.Second, 10*time.Millisecond)
				ps, err := n.Pools(ctx, Linearizable)
				require.NoError(t, err)
				assert.Empty(t, ps, "a node with state and no marker creates no configured pool")
				return
			}
			require.Eventually(t, func() bool {
				ps, err := n.Pools(ctx, Linearizable)
				_, statErr := os.Stat(marker)
				return err == nil && len(ps) == len(pools) && errors.Is(statErr, os.ErrNotExist)
			}, 10*time.Second, 10*time.Millisecond, "the configured pools are created and the marker removed")
		})
	}
}
