package node

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/node/internal/forward"
	"github.com/rangealloc/rangealloc/node/internal/wire"
	"github.com/rangealloc/rangealloc/version"
)

// The Probe call asks a node what it is: its ID, its cluster, whether it
// holds state, leads, or offers to found a cluster, and its release.
// Founding, joining, health, readiness and feature levels all ask it. It
// is served on the forwarding port on connections that name no cluster,
// so that it reaches a node of another cluster, or of none yet.

// probeTimeout bounds one probe of a peer.
const probeTimeout = 2 * time.Second

// prober asks other nodes Probe.
type prober struct {
	// fwd carries the Probe calls, on connections that name no cluster,
	// so that they reach nodes of other clusters too.
	fwd  *forward.Client
	from string // this node's ID
}

type probeResult struct {
	peer  Peer
	reply *wire.ProbeReply
	err   error
}

// probeAll probes peers concurrently.
func (p *prober) probeAll(ctx context.Context, peers []Peer) []probeResult {
	out := make([]probeResult, len(peers))
	var wg sync.WaitGroup
	for i, peer := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.probe(ctx, peer.RaftAddr)
			out[i] = probeResult{peer: peer, reply: r, err: err}
		}()
	}
	wg.Wait()
	return out
}

// probe asks the node at addr about itself. A pooled connection to a
// process that has since died fails at once; the probe then tries once
// more on a fresh one.
func (p *prober) probe(ctx context.Context, addr string) (*wire.ProbeReply, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		var reply wire.ProbeReply
		if err = p.fwd.Probe(ctx, addr, &wire.ProbeArgs{From: p.from, Protocol: version.Protocol}, &reply); err == nil {
			return &reply, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, err
}

// probeReply describes this node.
func (n *Node) probeReply() *wire.ProbeReply {
	ready, candidate := n.founder.foundingOffer()
	// A leader says it leads only once it has applied an entry of its
	// term: before, its commit index may be below what the leader before
	// it committed, and a follower that had applied less would take that
	// as its word and say it is ready (followLoop). Nor before it has
	// written the configured pools and service network, which a follower
	// that says it is ready must hold.
	r := &wire.ProbeReply{ID: n.id, ClusterID: n.ClusterID(), Ready: ready, Candidate: candidate,
		Applied: n.fsm.AppliedIndex(), CommitIndex: n.raft.CommitIndex(), Leader: n.IsLeader() && n.leader.serving()}
	r.LastIndex = n.raft.LastIndex()
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				r.Voters = append(r.Voters, string(s.ID))
			}
		}
	}
	r.HasState = !n.life.starting() && (r.LastIndex > 0 || len(r.Voters) > 0)
	r.Version, r.Protocol, r.FeatureLevel = version.String(), version.Protocol, n.cfg.maxFeatureLevel()
	r.ClusterLevel = n.fsm.FeatureLevel()
	r.LastTerm, _ = strconv.ParseUint(n.raft.Stats()["last_log_term"], 10, 64)
	n.disk.fillProbe(r)
	return r
}
