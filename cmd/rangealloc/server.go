package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	_ "net/http/pprof" // served only with --pprof
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	gometrics "github.com/hashicorp/go-metrics/compat"
	gmprom "github.com/hashicorp/go-metrics/compat/prometheus"
	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/service"
	"github.com/spf13/cobra"
)

type serverFlags struct {
	id, dataDir, httpAddr, raftAddr, advHTTP, advRaft string
	peers, join, serviceCIDR, nodePortRange           string
	logLevel, logStore                                string
	logJSON                                           bool
	pprof                                             bool
	requestTimeout                                    time.Duration
	tuning                                            node.Config // Raft and snapshot tuning
	http                                              httpLimits
	sec                                               securityFlags
	g                                                 *globals // --cacert, --cert, --key, --token for --join
}

func newServerCmd(g *globals) *cobra.Command {
	f := &serverFlags{g: g}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a rangealloc node",
		Long: `Run a rangealloc node: Raft on --raft-addr (which also carries calls that
followers forward to the leader), the HTTP API on --http-addr.

A node with no state and neither --peers nor --join bootstraps itself as a
single-node cluster with the pools of --service-cidr and --node-port-range.
With --peers, every node is given the same list and its own --id; the nodes
found the cluster once every peer has started without state, and the first
leader creates the pools. With --join, the node asks a member to add it: it
joins as a non-voter and becomes a voter once it has caught up. A node with
state ignores --peers and --join.

Loopback addresses need nothing more. A node asked to listen on any other
address refuses to start unless it has mutual TLS between nodes
(--tls-cert, --tls-key, --tls-ca), HTTPS on the API (--api-tls-cert,
--api-tls-key) and API tokens (--token-file), or --insecure. 'rangealloc
certs init' and 'rangealloc token create' make the files. Certificates, keys,
CAs and the token file are re-read within 10 s of a change.

A node refuses to start (exit status 1, "refusing to start: <file>: <why>")
when its data cannot be trusted: its log store (raft.db, or wal/ with
--log-store wal) lost, cut short or damaged, a damaged snapshot, a
--log-store other than the one its data dir records, or an empty data
directory while the node is a voter of an existing cluster. See docs/OPERATIONS.md for the way back.

A node alone (no --peers, no --join) with an empty data dir and a
--backup-dir that holds backups refuses to start too: its data was lost,
and a new, empty cluster would hand out values its clients hold. Start it
with --restore-from FILE to found the cluster from a backup (restored
before the API serves anything), or with --found-empty to found an empty
one anyway. A node with state ignores both. Nodes with --peers do the same
when no peer holds state either (every disk lost): found the cluster from a
backup on one node alone, then start the others with --join; or give each
node whose --backup-dir holds backups --found-empty.`,
		Example: `  # one node with the default pools
  rangealloc server

  # three nodes, each given the same --peers list
  rangealloc server --id n1 --data-dir d1 --http-addr 127.0.0.1:7080 --raft-addr 127.0.0.1:7081 \
    --peers n1=127.0.0.1:7081=127.0.0.1:7080,n2=127.0.0.1:7083=127.0.0.1:7082,n3=127.0.0.1:7085=127.0.0.1:7084

  # one node whose data dir was lost: found it again from its newest backup
  rangealloc server --backup-dir /var/lib/rangealloc-backups \
    --restore-from /var/lib/rangealloc-backups/rangealloc-n1-20260301T120000.000Z-4711.snap

  # join a running cluster through any member (also: bring back a member that
  # lost its disk, after 'rangealloc cluster remove ID' and emptying its data dir)
  rangealloc server --id n4 --data-dir d4 --http-addr 127.0.0.1:7086 --raft-addr 127.0.0.1:7087 --join 127.0.0.1:7080

  # a node of a secure three-node install on its LAN address (docs/OPERATIONS.md)
  rangealloc server --id n1 --http-addr 10.0.0.1:7080 --raft-addr 10.0.0.1:7081 \
    --peers n1=10.0.0.1:7081=https://10.0.0.1:7080,n2=10.0.0.2:7081=https://10.0.0.2:7080,n3=10.0.0.3:7081=https://10.0.0.3:7080 \
    --tls-cert certs/n1.crt --tls-key certs/n1.key --tls-ca certs/ca.crt \
    --api-tls-cert certs/n1.crt --api-tls-key certs/n1.key --token-file tokens`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServer(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.id, "id", "", "node ID (default: with --tls-cert its CN, else a UUID generated once and kept in the data dir)")
	fl.StringVar(&f.dataDir, "data-dir", "./data", "directory for the Raft log, snapshots and node ID")
	fl.StringVar(&f.logStore, "log-store", "", "Raft log store, chosen when the data dir is first used and kept in it: "+
		"bolt (raft.db, a B+tree file, two fsyncs per append) or wal (wal/, an append-only segmented log, one fsync per append; "+
		"lower write latency). Default: the one the data dir records, bolt for a new one. A data dir never changes store: "+
		"a different choice refuses to start")
	fl.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:7080", "address to serve the HTTP API on")
	fl.StringVar(&f.raftAddr, "raft-addr", "127.0.0.1:7081", "address for Raft and forwarded calls")
	fl.StringVar(&f.advHTTP, "advertise-http", "", "HTTP address others reach this node at (default: --http-addr)")
	fl.StringVar(&f.advRaft, "advertise-raft", "", "Raft address others reach this node at (default: --raft-addr)")
	fl.StringVar(&f.peers, "peers", "", "found a cluster of these voters: id=raftAddr=httpAddr,... (the same on every node; each node's --id among them)")
	fl.StringVar(&f.join, "join", "", "HTTP address of any member of the cluster to join (as a non-voter, promoted once caught up)")
	fl.BoolVar(&f.tuning.Nonvoter, "non-voter", false, "with --join: stay a non-voter (replicate the log, never vote or lead)")
	fl.DurationVar(&f.tuning.CleanupDeadAfter, "cleanup-dead-after", 0,
		"the leader removes a member it has not reached for this long, never taking the voters below three (0: never)")
	fl.StringVar(&f.serviceCIDR, "service-cidr", "10.96.0.0/12", "ClusterIP ranges: an IPv4 CIDR, an IPv6 CIDR, or both comma-separated")
	fl.StringVar(&f.nodePortRange, "node-port-range", "30000-32767", "NodePort range first-last")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fl.BoolVar(&f.logJSON, "log-json", false, "log JSON lines")
	fl.BoolVar(&f.pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on the HTTP address")
	fl.DurationVar(&f.requestTimeout, "request-timeout", 5*time.Second,
		"how long an API request may wait for the leader, including while there is none (then 503 NoLeader, or Unavailable for a write of unknown outcome)")
	f.http = defaultHTTPLimits()
	fl.IntVar(&f.http.MaxConnections, "max-connections", f.http.MaxConnections,
		"client connections served at once; more wait in the kernel's accept queue until one closes")
	f.sec.register(fl)
	f.tuning = node.DefaultConfig()
	fl.DurationVar(&f.tuning.HeartbeatTimeout, "heartbeat-timeout", f.tuning.HeartbeatTimeout, "Raft heartbeat timeout (advanced)")
	fl.DurationVar(&f.tuning.ElectionTimeout, "election-timeout", f.tuning.ElectionTimeout, "Raft election timeout (advanced)")
	fl.DurationVar(&f.tuning.LeaderLeaseTimeout, "leader-lease-timeout", f.tuning.LeaderLeaseTimeout, "Raft leader lease timeout (advanced)")
	fl.Uint64Var(&f.tuning.SnapshotThreshold, "snapshot-threshold", f.tuning.SnapshotThreshold, "new log entries that trigger a snapshot (advanced)")
	fl.DurationVar(&f.tuning.SnapshotInterval, "snapshot-interval", f.tuning.SnapshotInterval, "how often to check whether to snapshot (advanced)")
	fl.Uint64Var(&f.tuning.TrailingLogs, "trailing-logs", f.tuning.TrailingLogs, "log entries kept after a snapshot (advanced)")
	fl.StringVar(&f.tuning.BackupDir, "backup-dir", "", "write a verified backup of this node's state to this directory every --backup-interval (default: no scheduled backups)")
	fl.DurationVar(&f.tuning.BackupInterval, "backup-interval", f.tuning.BackupInterval, "how often to write a scheduled backup (1s or more)")
	fl.IntVar(&f.tuning.BackupRetain, "backup-retain", f.tuning.BackupRetain, "how many of this node's scheduled backups to keep; older ones are deleted")
	fl.StringVar(&f.tuning.RestoreFrom, "restore-from", "", "a node alone without state: found the cluster from this backup file, restored before the API serves (ignored with state)")
	fl.BoolVar(&f.tuning.FoundEmpty, "found-empty", false, "a node without state, alone or with --peers: found an empty cluster although --backup-dir holds backups, which otherwise refuses to found (ignored with state)")
	fl.IntVar(&f.tuning.MaxInflight, "max-inflight", f.tuning.MaxInflight, "log entries the leader keeps in flight; requests arriving meanwhile share the next one (advanced)")
	fl.Var((*byteSize)(&f.tuning.MinFreeDisk), "min-free-disk",
		"free space the data dir's file system keeps: below it the node refuses writes (507 InsufficientStorage), /readyz says disk_full, and a leader hands leadership to a node with space; 256MiB, 1GiB or bytes; 0 disables")
	fl.DurationVar(&f.tuning.DiskStallTimeout, "disk-stall-timeout", f.tuning.DiskStallTimeout,
		"how long a write to the Raft log may go unanswered before the node calls its disk stalled: it then sends no Raft message until the write returns, so that a leader gives way to another, and /readyz says disk_stalled; 0 disables")
	fl.Var((*byteSize)(&f.tuning.WALSegmentSize), "wal-segment-size", "with --log-store wal: the size of its segment files (tests)")
	_ = fl.MarkHidden("wal-segment-size")
	fl.DurationVar(&f.tuning.BatchWait, "batch-wait", f.tuning.BatchWait, "at most how long the leader holds a log entry open, and a follower a batch of forwarded writes, for the callers it just answered to ask again (never longer than the last entry or call took); 0 sends at once (advanced)")
	return cmd
}

// pools turns --service-cidr and --node-port-range into the bootstrap pools.
func (f *serverFlags) pools() ([]node.PoolSpec, error) {
	var out []node.PoolSpec
	for _, c := range strings.Split(f.serviceCIDR, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("--service-cidr %q: %v", c, err)
		}
		if _, err := allocator.ParseRange(c); err != nil {
			return nil, fmt.Errorf("--service-cidr %q: %v", c, err)
		}
		name := "clusterip-ipv4"
		if p.Addr().Is6() {
			name = "clusterip-ipv6"
		}
		for _, o := range out {
			if o.Name == name {
				return nil, fmt.Errorf("--service-cidr %q: at most one CIDR per family", f.serviceCIDR)
			}
		}
		out = append(out, node.PoolSpec{Name: name, Range: c})
	}
	if f.nodePortRange != "" {
		r, err := allocator.ParseRange(f.nodePortRange)
		if err != nil || r.Kind() != allocator.KindPort {
			return nil, fmt.Errorf("--node-port-range %q: want first-last with 1 <= first <= last <= 65535, such as 30000-32767", f.nodePortRange)
		}
		out = append(out, node.PoolSpec{Name: "nodeport", Range: f.nodePortRange})
	}
	return out, nil
}

// checkBackup checks --backup-interval and --backup-retain when
// --backup-dir is set.
func (f *serverFlags) checkBackup() error {
	if f.tuning.BackupDir == "" {
		return nil
	}
	if f.tuning.BackupInterval < time.Second {
		return fmt.Errorf("--backup-interval %s: want 1s or more, such as 1h", f.tuning.BackupInterval)
	}
	if f.tuning.BackupRetain < 1 {
		return fmt.Errorf("--backup-retain %d: want 1 or more", f.tuning.BackupRetain)
	}
	return nil
}

// serviceNetwork is the service network of the bootstrap pools: the
// families in the order of --service-cidr, and the node-port pool. Nil
// when they lack an IP family or the node ports.
func serviceNetwork(pools []node.PoolSpec) *fsm.ServiceNetwork {
	sn := &fsm.ServiceNetwork{}
	for _, p := range pools {
		switch p.Name {
		case "clusterip-ipv4":
			sn.Families, sn.IPv4Pool = append(sn.Families, service.IPv4), p.Name
		case "clusterip-ipv6":
			sn.Families, sn.IPv6Pool = append(sn.Families, service.IPv6), p.Name
		case "nodeport":
			sn.NodePortPool = p.Name
		}
	}
	if len(sn.Families) == 0 || sn.NodePortPool == "" {
		return nil
	}
	return sn
}

// parsePeers parses id=raftAddr=httpAddr,...
func parsePeers(s string) ([]node.Peer, error) {
	var out []node.Peer
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		parts := strings.Split(item, "=")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
			return nil, fmt.Errorf("--peers item %q: want id=raftAddr=httpAddr", item)
		}
		out = append(out, node.Peer{ID: parts[0], RaftAddr: parts[1], APIAddr: parts[2]})
	}
	return out, nil
}

// check checks the flags that need nothing loaded, and returns the log
// level.
func (f *serverFlags) check() (hclog.Level, error) {
	level := hclog.LevelFromString(f.logLevel)
	if level == hclog.NoLevel {
		return hclog.NoLevel, fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", f.logLevel)
	}
	if f.requestTimeout <= 0 {
		return hclog.NoLevel, fmt.Errorf("--request-timeout %s: want a positive duration, such as 5s", f.requestTimeout)
	}
	if err := f.checkBackup(); err != nil {
		return hclog.NoLevel, err
	}
	if f.logStore != "" && f.logStore != node.LogStoreBolt && f.logStore != node.LogStoreWAL {
		return hclog.NoLevel, fmt.Errorf("--log-store %q: want %q or %q", f.logStore, node.LogStoreBolt, node.LogStoreWAL)
	}
	return level, nil
}

// nodeConfig is the node's configuration from the flags, the loaded
// security files, the peers and the pools.
func (f *serverFlags) nodeConfig(sec *security, logger hclog.Logger, peers []node.Peer, pools []node.PoolSpec, advHTTP string) (node.Config, error) {
	cfg := f.tuning
	id, err := sec.id(f.id)
	if err != nil {
		return cfg, err
	}
	cfg.ID, cfg.DataDir, cfg.RaftAddr, cfg.AdvertiseRaft, cfg.APIAddr = id, f.dataDir, f.raftAddr, f.advRaft, advHTTP
	cfg.LogStore = f.logStore
	cfg.Peers, cfg.Pools, cfg.Logger = peers, pools, logger
	cfg.ServiceNetwork = serviceNetwork(pools)
	cfg.ServerTLS, cfg.ClientTLS = sec.nodeServer, sec.nodeClient
	if cfg.RestoreFrom != "" && (f.peers != "" || f.join != "") {
		return cfg, fmt.Errorf("--restore-from is for a node that founds a cluster alone, not with --peers or --join: " +
			"found a cluster of several from a backup on one node alone, then start the others with --join")
	}
	if cfg.FoundEmpty && f.join != "" {
		return cfg, fmt.Errorf("--found-empty is for a node that founds a cluster (alone or with --peers): a node that joins with --join founds nothing")
	}
	if cfg.RestoreFrom != "" && cfg.FoundEmpty {
		return cfg, fmt.Errorf("--restore-from and --found-empty exclude each other: found from a backup, or empty")
	}
	if cfg.Nonvoter && f.join == "" {
		return cfg, fmt.Errorf("--non-voter: only a node that joins with --join can stay a non-voter")
	}
	if cfg.CleanupDeadAfter < 0 || (cfg.CleanupDeadAfter > 0 && cfg.CleanupDeadAfter < node.MinCleanupDeadAfter) {
		return cfg, fmt.Errorf("--cleanup-dead-after %s: want 0 (never) or at least %v, well beyond a restart", cfg.CleanupDeadAfter, node.MinCleanupDeadAfter)
	}
	if f.join != "" {
		// The member's API is asked with --cacert/--cert/--key, or else
		// this node's own --tls-* files (certs init makes one CA for both).
		hc, err := f.g.httpClient(5*time.Second, 2, certs.Paths{Cert: f.sec.tlsCert, Key: f.sec.tlsKey, CA: f.sec.tlsCA})
		if err != nil {
			return cfg, err
		}
		// Read only when the node must join: a node with state starts
		// while the member --join names is down.
		c := f.g.clientOf(f.join, hc)
		cfg.JoinVia = func(ctx context.Context) ([]string, error) { return joinTargets(ctx, c, f.join) }
	}
	return cfg, nil
}

func runServer(ctx context.Context, f *serverFlags) error {
	level, err := f.check()
	if err != nil {
		return err
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "rangealloc", Level: level, JSONFormat: f.logJSON, Output: os.Stderr})
	open, err := f.sec.check(f.httpAddr, f.raftAddr)
	if err != nil {
		return err
	}
	for _, o := range open {
		logger.Warn("--insecure: serving without protection", "what", o)
	}
	pools, err := f.pools()
	if err != nil {
		return err
	}
	sec, err := f.sec.load(logger)
	if err != nil {
		return err
	}
	defer sec.close()
	peers, err := parsePeers(f.peers)
	if err != nil {
		return err
	}
	advHTTP := f.advHTTP
	if advHTTP == "" {
		advHTTP = f.httpAddr
	}
	if !strings.Contains(advHTTP, "://") {
		advHTTP = sec.scheme() + "://" + advHTTP
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	cfg, err := f.nodeConfig(sec, logger, peers, pools, advHTTP)
	if err != nil {
		return err
	}
	metrics := api.NewMetrics()
	cfg.OnApply, cfg.OnCommit = metrics.ObserveApply, metrics.ObserveCommit
	cfg.OnBackup = func(r node.BackupResult) { metrics.ObserveBackup(r.Time, r.Bytes, r.Err) }
	if err := exportRaftMetrics(metrics); err != nil {
		return err
	}
	ln, err := listenHTTP(f.httpAddr, f.http)
	if err != nil {
		return err
	}
	// While the node opens (it may be founding a cluster, or waiting to be
	// joined, for as long as its peers take), the API answers that it is
	// starting; then the handler is swapped for the real one.
	handler := &swapHandler{}
	handler.set(http.HandlerFunc(starting))
	// One guard in front of everything the API port serves: tokens and
	// roles, or without a token file the Host check against DNS rebinding.
	guarded := api.Guard(handler, api.GuardOptions{Tokens: sec.tokens, AllowedHosts: allowedHosts(advHTTP), Logger: logger.Named("api")})
	srv := newHTTPServer(guarded, f.http)
	errc := make(chan error, 1)
	go func() { errc <- sec.serveAPI(srv, ln) }()
	n, err := node.Open(ctx, cfg)
	if err != nil {
		_ = srv.Close()
		return err
	}
	metrics.WatchPools(n.LocalState())
	metrics.WatchDisk(n)
	var h http.Handler = api.NewServer(n, api.Options{Logger: logger, Metrics: metrics, Timeout: f.requestTimeout})
	if f.pprof {
		mux := http.NewServeMux()
		mux.Handle("/debug/pprof/", http.DefaultServeMux) // net/http/pprof registers there
		mux.Handle("/", h)
		h = mux
	}
	handler.set(h)
	logger.Info("serving", "id", n.ID(), "api", advHTTP, "raft", n.RaftAddr(), "data_dir", f.dataDir,
		"node_tls", sec.nodeServer != nil, "api_tokens", sec.tokens != nil)

	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err = <-errc:
		logger.Error("HTTP server stopped", "error", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if cerr := n.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// swapHandler serves with the handler set last.
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// starting answers while the node has not founded or joined a cluster:
// alive, not ready (reason bootstrapping), and no leader to serve anything.
func starting(w http.ResponseWriter, r *http.Request) {
	const detail = "this node has not founded or joined a cluster yet"
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/healthz":
		fmt.Fprintln(w, `{"status":"ok"}`)
	case "/readyz":
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"status":"not ready","reason":%q,"detail":%q}`+"\n", node.ReasonBootstrapping, detail)
	default:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":{"code":"NoLeader","message":"starting: %s"}}`+"\n", detail)
	}
}

// exportRaftMetrics sends hashicorp/raft's own metrics (go-metrics, one
// global per process) to the node's Prometheus registry, as
// rangealloc_raft_*.
func exportRaftMetrics(m *api.Metrics) error {
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Registerer: m.Registry(), Expiration: 5 * time.Minute})
	if err != nil {
		return fmt.Errorf("raft metrics: %w", err)
	}
	conf := gometrics.DefaultConfig("rangealloc")
	conf.EnableHostname, conf.EnableRuntimeMetrics, conf.EnableServiceLabel = false, false, false
	_, err = gometrics.NewGlobal(conf, sink)
	return err
}

// allowedHosts are the Host names the unauthenticated API answers besides
// IP literals and localhost: the advertised HTTP address's.
func allowedHosts(advHTTP string) []string {
	u, err := url.Parse(advHTTP)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	return []string{u.Hostname()}
}

// joinTargets asks the member at httpAddr (through c) for the cluster's
// Raft addresses, which the node then asks in turn to add it.
func joinTargets(ctx context.Context, c *client.Client, httpAddr string) ([]string, error) {
	var last error
	for i := 0; i < 60; i++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := c.Cluster(cctx)
		cancel()
		if err == nil && len(st.Members) > 0 {
			var out []string
			for _, m := range st.Members {
				out = append(out, m.RaftAddr)
			}
			return out, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return nil, fmt.Errorf("--join %s: cannot read the cluster: %v", httpAddr, last)
}
