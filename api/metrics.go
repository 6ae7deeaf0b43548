package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
)

// Metrics are one node's Prometheus metrics (SPEC §8), in a registry of
// their own so that several nodes can live in one process.
type Metrics struct {
	reg         *prometheus.Registry
	allocations *prometheus.CounterVec
	errors      *prometheus.CounterVec
	httpSeconds *prometheus.HistogramVec
	applyBatch  prometheus.Histogram
	applyReqs   prometheus.Counter
	commitSecs  prometheus.Histogram
	commitReqs  prometheus.Histogram
	// reconcileFindings counts the findings of the reconciles this node
	// served, by pool and type.
	reconcileFindings *prometheus.CounterVec
	// The scheduled backups (node.Config.BackupDir): see ObserveBackup.
	lastBackup, lastBackupBytes prometheus.Gauge
	backupFailures              prometheus.Counter
}

// NewMetrics registers a node's metrics; extra collectors join the
// registry. Call WatchPools once the node is open.
func NewMetrics(extra ...prometheus.Collector) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rangealloc_allocation_total",
			Help: "Values allocated by the allocations and transactions this node served, by pool and scope (static: value named; dynamic: chosen)."}, []string{"pool", "scope"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rangealloc_allocation_errors_total",
			Help: "Values the allocator refused (range full, value taken, value out of range) to allocations and transactions this node served, by pool and scope."}, []string{"pool", "scope"}),
		httpSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rangealloc_http_request_duration_seconds",
			Help: "HTTP request durations by method, route and status.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)},
			[]string{"method", "route", "code"}),
		applyBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rangealloc_apply_batch_entries",
			Help: "Log entries per state-machine batch.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		applyReqs: prometheus.NewCounter(prometheus.CounterOpts{Name: "rangealloc_applied_requests_total",
			Help: "Requests applied by the state machine (several can share one log entry)."}),
		commitSecs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rangealloc_apply_latency_seconds",
			Help: "On the leader: time from proposing a log entry to its applied result.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}),
		commitReqs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rangealloc_group_commit_requests",
			Help: "On the leader: client requests packed into one log entry.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		reconcileFindings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rangealloc_reconcile_findings_total",
			Help: "Findings of the reconciles this node served, by pool and type (leak, missing, duplicate, outOfRange, mismatch)."}, []string{"pool", "type"}),
		lastBackup: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rangealloc_last_backup_timestamp_seconds",
			Help: "Unix time of this node's last verified scheduled backup; 0 before any."}),
		lastBackupBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rangealloc_last_backup_bytes",
			Help: "Size of this node's last verified scheduled backup."}),
		backupFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "rangealloc_backup_failures_total",
			Help: "Scheduled backups of this node that failed (see its log for the reason)."}),
	}
	m.reg.MustRegister(m.lastBackup, m.lastBackupBytes, m.backupFailures)
	m.reg.MustRegister(m.allocations, m.errors, m.httpSeconds, m.applyBatch, m.applyReqs, m.commitSecs, m.commitReqs, m.reconcileFindings,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(extra...)
	return m
}

// WatchPools adds the pool gauges, read from the replicated state f at
// scrape time, so they are right from start-up.
func (m *Metrics) WatchPools(f *fsm.FSM) { m.reg.MustRegister(poolCollector{f}) }

// WatchDisk adds the disk gauges, read from d (a *node.Node) at scrape
// time.
func (m *Metrics) WatchDisk(d DiskSource) { m.reg.MustRegister(diskCollector{d}) }

// DiskSource is what the disk gauges read.
type DiskSource interface{ DiskStats() node.DiskStats }

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Registry returns the registry, for collectors added later.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveApply records one state-machine batch; hook it to fsm.FSM.OnApply.
func (m *Metrics) ObserveApply(entries int, results []*fsm.Result) {
	m.applyBatch.Observe(float64(entries))
	m.applyReqs.Add(float64(len(results)))
}

// ObserveCommit records one entry proposed by the leader; hook it to node.Config.OnCommit.
func (m *Metrics) ObserveCommit(requests int, d time.Duration) {
	m.commitReqs.Observe(float64(requests))
	m.commitSecs.Observe(d.Seconds())
}

// ObserveBackup records one scheduled backup, begun at at, of size bytes,
// or failed with err; hook it to node.Config.OnBackup.
func (m *Metrics) ObserveBackup(at time.Time, size int64, err error) {
	if err != nil {
		m.backupFailures.Inc()
		return
	}
	m.lastBackup.Set(float64(at.UnixNano()) / 1e9)
	m.lastBackupBytes.Set(float64(size))
}

func (m *Metrics) observeHTTP(method, route string, status int, d time.Duration) {
	if route == "" || route == "/" {
		route = "other"
	}
	m.httpSeconds.WithLabelValues(method, route, strconv.Itoa(status)).Observe(d.Seconds())
}

// countAllocation counts n values asked of pool in scope by one request
// this node served: allocated, or refused by the allocator with err (the
// range is full, the value is taken or outside the range). Other failures
// (no such pool, bad input, no leader, an unknown outcome) count nothing:
// they are not the allocator's, and a name that is no pool makes no series.
func (m *Metrics) countAllocation(pool, scope string, n int, err error) {
	if m == nil {
		return
	}
	if err == nil {
		m.allocations.WithLabelValues(pool, scope).Add(float64(n))
		return
	}
	if errIs(err, fsm.CodeRangeFull) || errIs(err, fsm.CodeAlreadyAllocated) || errIs(err, fsm.CodeNotInRange) {
		m.errors.WithLabelValues(pool, scope).Add(float64(n))
	}
}

// countTxn counts a transaction's allocate operations, each one value of
// its pool: all allocated; or, when the transaction failed, the operation
// that failed it, if an allocate (nothing of a failed transaction is
// applied, and the others were not refused).
func (m *Metrics) countTxn(ops []fsm.Op, err error) {
	if err == nil {
		for _, op := range ops {
			if op.Kind == fsm.OpAllocate {
				m.countAllocation(op.Pool, scopeOf(op.Value), 1, nil)
			}
		}
		return
	}
	var fe *fsm.Error
	if errors.As(err, &fe) && fe.Op >= 0 && fe.Op < len(ops) && ops[fe.Op].Kind == fsm.OpAllocate {
		op := ops[fe.Op]
		m.countAllocation(op.Pool, scopeOf(op.Value), 1, err)
	}
}

// scopeOf is an allocation's scope label: static when the caller named
// the value, dynamic when rangealloc chose it.
func scopeOf(value string) string {
	if value != "" {
		return "static"
	}
	return "dynamic"
}

var (
	allocatedDesc = prometheus.NewDesc("rangealloc_pool_allocated", "Values allocated in the pool (replicated state).", []string{"pool"}, nil)
	availableDesc = prometheus.NewDesc("rangealloc_pool_available", "Values free in the pool (replicated state).", []string{"pool"}, nil)
)

// poolCollector reports the pool gauges from the replicated state.
type poolCollector struct{ f *fsm.FSM }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- allocatedDesc; ch <- availableDesc }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.f.Pools() {
		ch <- prometheus.MustNewConstMetric(allocatedDesc, prometheus.GaugeValue, float64(p.Used), p.Name)
		ch <- prometheus.MustNewConstMetric(availableDesc, prometheus.GaugeValue, float64(p.Range.Size()-p.Used), p.Name)
	}
}

var (
	diskFreeDesc = prometheus.NewDesc("rangealloc_disk_free_bytes",
		"Free bytes on the file system holding the data directory; below --min-free-disk the node refuses client writes.", nil, nil)
	raftLogDesc  = prometheus.NewDesc("rangealloc_raft_log_bytes", "Size of the Raft log and stable store: raft.db, or the wal/ directory with --log-store wal.", nil, nil)
	snapshotDesc = prometheus.NewDesc("rangealloc_snapshot_bytes", "Bytes of the snapshots kept in the data directory.", nil, nil)
	stallsDesc   = prometheus.NewDesc("rangealloc_disk_stalls_total",
		"Times a write to the Raft log or stable store went unanswered for longer than --disk-stall-timeout.", nil, nil)
	stalledDesc = prometheus.NewDesc("rangealloc_disk_stalled",
		"1 while a write to the Raft log or stable store has gone unanswered for longer than --disk-stall-timeout, else 0.", nil, nil)
)

// diskCollector reports the disk gauges: what the node last read of its
// disk.
type diskCollector struct{ d DiskSource }

func (c diskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- diskFreeDesc
	ch <- raftLogDesc
	ch <- snapshotDesc
	ch <- stallsDesc
	ch <- stalledDesc
}

func (c diskCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.d.DiskStats()
	ch <- prometheus.MustNewConstMetric(diskFreeDesc, prometheus.GaugeValue, float64(s.Free))
	ch <- prometheus.MustNewConstMetric(raftLogDesc, prometheus.GaugeValue, float64(s.RaftLogBytes))
	ch <- prometheus.MustNewConstMetric(snapshotDesc, prometheus.GaugeValue, float64(s.SnapshotBytes))
	ch <- prometheus.MustNewConstMetric(stallsDesc, prometheus.CounterValue, float64(s.Stalls))
	stalled := 0.0
	if s.Stalled {
		stalled = 1
	}
	ch <- prometheus.MustNewConstMetric(stalledDesc, prometheus.GaugeValue, stalled)
}
