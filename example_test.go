package rangealloc_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rangealloc/rangealloc"
)

// One node, founding a cluster of its own with the default pools.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "rangealloc-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	cfg := rangealloc.DefaultConfig()
	cfg.DataDir = dir
	cfg.RaftAddr = "127.0.0.1:17181"
	cfg.Logger = hclog.NewNullLogger()
	n, err := rangealloc.Open(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	if err := n.Ready(ctx); err != nil {
		log.Fatal(err)
	}

	ip, err := n.Allocate(ctx, "clusterip-ipv4", "10.96.0.10", "kube-system/kube-dns")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ip.Value, ip.Owner, ip.Band)

	// The same value again, for another owner, is refused.
	_, err = n.Allocate(ctx, "clusterip-ipv4", "10.96.0.10", "default/web")
	fmt.Println(errors.Is(err, rangealloc.ErrAlreadyAllocated))

	// No value named: the pool picks one from its dynamic band.
	port, err := n.Allocate(ctx, "nodeport", "", "default/web")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(port.Band)
	// Output:
	// 10.96.0.10 kube-system/kube-dns static
	// true
	// dynamic
}

// Three nodes in one process, founding a cluster with fixed peers. Any
// node takes any call: a follower forwards it to the leader.
func Example_threeNodes() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	peers := []rangealloc.Peer{
		{ID: "n1", RaftAddr: "127.0.0.1:17191"},
		{ID: "n2", RaftAddr: "127.0.0.1:17192"},
		{ID: "n3", RaftAddr: "127.0.0.1:17193"},
	}
	// A node founding with peers waits in Open until they answer, so the
	// three open side by side.
	nodes := make([]*rangealloc.Node, len(peers))
	errs := make(chan error, len(peers))
	for i, p := range peers {
		dir, err := os.MkdirTemp("", "rangealloc-example-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		cfg := rangealloc.DefaultConfig()
		cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.Peers = p.ID, dir, p.RaftAddr, peers
		cfg.Logger = hclog.NewNullLogger()
		go func() {
			var err error
			nodes[i], err = rangealloc.Open(ctx, cfg)
			errs <- err
		}()
	}
	for range peers {
		if err := <-errs; err != nil {
			log.Fatal(err)
		}
	}
	for _, n := range nodes {
		defer n.Close()
	}
	for _, n := range nodes {
		if err := n.Ready(ctx); err != nil {
			log.Fatal(err)
		}
	}

	// Each node allocates in turn; no value is handed out twice.
	seen := map[string]bool{}
	for i, n := range nodes {
		a, err := n.Allocate(ctx, "nodeport", "", fmt.Sprintf("default/svc-%d", i))
		if err != nil {
			log.Fatal(err)
		}
		seen[a.Value] = true
	}
	fmt.Println(len(seen), "distinct ports")
	// Output: 3 distinct ports
}

// A Service write allocates the ClusterIP and NodePorts Kubernetes would.
func ExampleNode_PutService() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "rangealloc-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := rangealloc.DefaultConfig()
	cfg.DataDir, cfg.RaftAddr, cfg.Logger = dir, "127.0.0.1:17182", hclog.NewNullLogger()
	n, err := rangealloc.Open(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	if err := n.Ready(ctx); err != nil {
		log.Fatal(err)
	}

	svc, err := n.PutService(ctx, rangealloc.Service{
		Namespace: "default", Name: "web", Type: "NodePort",
		ClusterIP: "10.96.0.20",
		Ports:     []rangealloc.ServicePort{{Name: "http", Protocol: "TCP", Port: 80, NodePort: 30080}},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(svc.ClusterIPs, svc.IPFamilies, svc.Ports[0].NodePort)

	// The values are the Service's: a plain release is refused.
	err = n.Release(ctx, "nodeport", "30080", "")
	fmt.Println(errors.Is(err, rangealloc.ErrOwnedByService))
	// Output:
	// [10.96.0.20] [IPv4] 30080
	// true
}

// A linearizable read (the default) sees every write acknowledged before
// it began, whichever node serves it; a stale read is served from the
// node's own state.
func ExampleNode_Get() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "rangealloc-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := rangealloc.DefaultConfig()
	cfg.DataDir, cfg.RaftAddr, cfg.Logger = dir, "127.0.0.1:17183", hclog.NewNullLogger()
	n, err := rangealloc.Open(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()
	if err := n.Ready(ctx); err != nil {
		log.Fatal(err)
	}

	if _, err := n.Allocate(ctx, "nodeport", "30500", "default/db", rangealloc.WithIdempotencyKey("db-port")); err != nil {
		log.Fatal(err)
	}
	a, err := n.Get(ctx, "nodeport", "30500")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Owner)
	a, err = n.Get(ctx, "nodeport", "30500", rangealloc.WithConsistency(rangealloc.Stale))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.Owner)

	_, err = n.Get(ctx, "nodeport", "30501")
	fmt.Println(errors.Is(err, rangealloc.ErrNotAllocated))
	// Output:
	// default/db
	// default/db
	// true
}
