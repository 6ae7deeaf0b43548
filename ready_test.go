package rangealloc_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/rangealloc/rangealloc"
	"github.com/rangealloc/rangealloc/internal/testaddr"
)

// readyRuns and readyThreeRuns are how many clusters of one and of three
// TestReadyKeepsItsWord founds; readyAtOnce how many run side by side.
const (
	readyRuns      = 50
	readyThreeRuns = 10
	readyAtOnce    = 10
)

// clusterConfigs are the configs of size nodes founding one cluster with
// the default config.
func clusterConfigs(t testing.TB, size int) []rangealloc.Config {
	var peers []rangealloc.Peer
	for i := range size {
		peers = append(peers, rangealloc.Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: testaddr.Loopback(t)})
	}
	cfgs := make([]rangealloc.Config, size)
	for i := range size {
		cfg := rangealloc.DefaultConfig()
		cfg.DataDir, cfg.Logger = t.TempDir(), hclog.NewNullLogger()
		cfg.ID, cfg.RaftAddr = peers[i].ID, peers[i].RaftAddr
		if size > 1 {
			cfg.Peers = peers
		}
		cfgs[i] = cfg
	}
	return cfgs
}

// openCluster opens the nodes of cfgs side by side, and closes them when
// the test ends. It may run outside the test's goroutine.
func openCluster(t testing.TB, ctx context.Context, cfgs []rangealloc.Config) ([]*rangealloc.Node, error) {
	size := len(cfgs)
	nodes := make([]*rangealloc.Node, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = rangealloc.Open(ctx, cfg)
		}()
	}
	wg.Wait()
	for _, n := range nodes {
		if n != nil {
			t.Cleanup(func() { _ = n.Close() })
		}
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("Open(node %d of %d) = %w", i+1, size, err)
		}
	}
	return nodes, nil
}

// callsAfterReady makes, on n right after its Ready returned, one call on
// each configured pool and one on the service network: each must succeed.
func callsAfterReady(ctx context.Context, n *rangealloc.Node, run, node int) error {
	owner := fmt.Sprintf("default/run-%d-node-%d", run, node)
	if _, err := n.Allocate(ctx, "clusterip-ipv4", "", owner); err != nil {
		return fmt.Errorf("Allocate(clusterip-ipv4) = %w", err)
	}
	if _, err := n.Allocate(ctx, "nodeport", "", owner); err != nil {
		return fmt.Errorf("Allocate(nodeport) = %w", err)
	}
	svc := rangealloc.Service{Namespace: "default", Name: fmt.Sprintf("svc-%d", node), Type: "NodePort",
		Ports: []rangealloc.ServicePort{{Protocol: "TCP", Port: 80}}}
	if _, err := n.PutService(ctx, svc); err != nil {
		return fmt.Errorf("PutService = %w", err)
	}
	return nil
}

// TestReadyKeepsItsWord founds clusters of one and of three with the
// default config, and on every node, right after Ready returns, allocates
// from each configured pool and writes a Service: never PoolNotFound, nor
// any other failure, in any run.
func TestReadyKeepsItsWord(t *testing.T) {
	for _, c := range []struct {
		name       string
		size, runs int
	}{{"one node", 1, readyRuns}, {"three nodes", 3, readyThreeRuns}} {
		t.Run(c.name, func(t *testing.T) {
			sem := make(chan struct{}, readyAtOnce/c.size)
			var (
				mu       sync.Mutex
				failures []string
				wg       sync.WaitGroup
			)
			for run := range c.runs {
				cfgs := clusterConfigs(t, c.size)
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					nodes, err := openCluster(t, ctx, cfgs)
					if err != nil {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("run %d: %v", run, err))
						mu.Unlock()
						return
					}
					var nwg sync.WaitGroup
					for i, n := range nodes {
						nwg.Add(1)
						go func() {
							defer nwg.Done()
							err := n.Ready(ctx)
							if err == nil {
								err = callsAfterReady(ctx, n, run, i)
							}
							if err != nil {
								mu.Lock()
								failures = append(failures, fmt.Sprintf("run %d, node %d: %v", run, i+1, err))
								mu.Unlock()
							}
						}()
					}
					nwg.Wait()
				}()
			}
			wg.Wait()
			require.Empty(t, failures, "calls right after Ready failed in %d of %d runs", len(failures), c.runs)
		})
	}
}
