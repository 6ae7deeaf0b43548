package node

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rangealloc/rangealloc/node/internal/storage"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
)

// ErrRecoverRefused matches every refusal of Recover: the data directory
// or the members given did not allow it, and nothing was changed.
var ErrRecoverRefused = errors.New("recover refused")

// RecoverConfig configures Recover.
type RecoverConfig struct {
	// DataDir is the data directory of a stopped node.
	DataDir string
	// Members are the voters of the new configuration (ID and Raft
	// address; APIAddr, when given, is checked and reported: each node
	// writes its own member row when it starts). The node's own ID, kept
	// in DataDir, must be one of them.
	Members []Peer
	// DryRun checks everything and reports what Recover would do, and
	// changes nothing.
	DryRun bool
	// Logger receives Raft's and the checks' messages. Nil: discard.
	Logger hclog.Logger
}

// Validate checks the members without reading the disk and without
// changing the configuration.
func (c *RecoverConfig) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data directory is empty"))
	}
	if len(c.Members) == 0 {
		errs = append(errs, errors.New("no members given: name at least this node (id=raftAddr=httpAddr)"))
	}
	seen := map[string]bool{}
	for _, m := range c.Members {
		switch {
		case m.ID == "" || len(m.ID) > fsm.MaxMemberID:
			errs = append(errs, fmt.Errorf("member %q: the ID must be 1 to %d bytes", m.ID, fsm.MaxMemberID))
		case seen[m.ID]:
			errs = append(errs, fmt.Errorf("member ID %q appears twice", m.ID))
		}
		seen[m.ID] = true
		if err := checkHostPort(m.RaftAddr); err != nil {
			errs = append(errs, fmt.Errorf("member %q: Raft address %q: %w", m.ID, m.RaftAddr, err))
		}
		if err := checkAPIAddr(m.APIAddr); m.APIAddr != "" && err != nil {
			errs = append(errs, fmt.Errorf("member %q: HTTP address %q: %w", m.ID, m.APIAddr, err))
		}
	}
	return errors.Join(errs...)
}

// checkHostPort accepts host:port with a host and a port from 1 to 65535.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("no host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q: want 1 to 65535", port)
	}
	return nil
}

// checkAPIAddr accepts host:port or an http:// or https:// URL with one.
func checkAPIAddr(addr string) error {
	if !strings.Contains(addr, "://") {
		return checkHostPort(addr)
	}
	u, err := url.Parse(addr)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	return checkHostPort(u.Host)
}

// ConfigServer is a server of a Raft configuration.
type ConfigServer struct {
	ID       string
	RaftAddr string
	Voter    bool
}

// RecoverResult is what Recover found and did.
type RecoverResult struct {
	ID  string         // the node's own ID, kept in its data directory
	Old []ConfigServer // the configuration the node held
	New []ConfigServer // the configuration it holds now (DryRun: would hold)
	// LastIndex and LastTerm are those of the last entry kept: every entry
	// the node held, up to this one, is in the state it starts from.
	LastIndex, LastTerm uint64
	// Dropped are the IDs of the old configuration that New leaves out:
	// their data directories must be emptied before they run again.
	Dropped []string
	// Warnings are what looks wrong without being refused.
	Warnings []string
	Took     time.Duration
	DryRun   bool
}

// Recover makes a stopped node, whose cluster lost its quorum for good,
// the first member of a cluster whose voters are cfg.Members, keeping
// every entry it holds. It runs hashicorp/raft's RecoverCluster on the
// node's own stores, opened as Open opens them: the state of every entry
// in the log (committed or not: this node cannot tell any more) goes into
// a new snapshot that carries the new configuration, and the log is
// emptied. Started again with its usual flags, the node campaigns in the
// new configuration; new members join it as usual (--join).
//
// It refuses (ErrRecoverRefused), changing nothing, a data directory in
// use by a running node, one without state, one its storage checks refuse
// (storage.Error, as at start), and members that do not name this node.
//
// The risk: a member left out that comes back with its old data still
// holds the old configuration, in which it and another lost member are a
// quorum: together they would elect a leader and hand out values this
// cluster hands out too. Their data directories must be emptied before
// they run again.
func Recover(cfg RecoverConfig) (res RecoverResult, err error) {
	start := time.Now()
	res.DryRun = cfg.DryRun
	if err := cfg.Validate(); err != nil {
		return res, fmt.Errorf("%w: %w", ErrRecoverRefused, err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if res.ID, err = keptNodeID(cfg.DataDir); err != nil {
		return res, err
	}
	if !names(cfg.Members, res.ID) {
		return res, fmt.Errorf("%w: the members do not name this node, %q (kept in %s): the node recovered must be one of the voters",
			ErrRecoverRefused, res.ID, filepath.Join(cfg.DataDir, "node-id"))
	}
	if err := notInUse(cfg.DataDir); err != nil {
		return res, err
	}
	store, err := storage.Resolve(cfg.DataDir, "", false)
	if err != nil {
		return res, err
	}
	disk, err := storage.Check(cfg.DataDir, store, logger)
	if err != nil {
		return res, err
	}
	if !disk.HasState {
		return res, fmt.Errorf("%w: %s holds no Raft state: there is nothing to recover", ErrRecoverRefused, cfg.DataDir)
	}
	var stall storage.StallWatch
	stable, logs, snaps, err := openStores(Config{DataDir: cfg.DataDir}, store, disk.Marked, &stall, logger)
	if err != nil {
		return res, err
	}
	defer stable.Close()
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	if err := recoverStores(cfg, &res, logs, stable, snaps, trans, logger); err != nil {
		return res, err
	}
	res.Took = time.Since(start)
	return res, nil
}

// recoverStores reads the old configuration and the last entry from the
// stores of cfg.DataDir, then, unless it is a dry run, writes the new
// configuration.
func recoverStores(cfg RecoverConfig, res *RecoverResult, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore,
	trans raft.Transport, logger hclog.Logger) error {
	old, err := oldConfiguration(raftConfig(res.ID, logger), logs, stable, snaps, trans)
	if err != nil {
		return err
	}
	res.Old = fromRaft(old)
	var conf raft.Configuration
	for _, m := range cfg.Members {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr)})
	}
	res.New = fromRaft(conf)
	res.Dropped, res.Warnings = compare(res.ID, old, conf)
	if res.LastIndex, res.LastTerm, err = lastEntry(logs, snaps); err != nil {
		return err
	}
	if res.LastIndex == 0 {
		return fmt.Errorf("%w: %s holds no log entry and no snapshot: there is nothing to recover", ErrRecoverRefused, cfg.DataDir)
	}
	if cfg.DryRun {
		return nil
	}
	err = storage.Safely("recover", func() error {
		return raft.RecoverCluster(raftConfig(res.ID, logger), fsm.New(hclog.NewNullLogger()), logs, stable, snaps, trans, conf)
	})
	if err != nil {
		return fmt.Errorf("recover %s: %w", cfg.DataDir, err)
	}
	kept, err := snaps.List()
	if err != nil || len(kept) == 0 || kept[0].Index != res.LastIndex {
		return fmt.Errorf("recover %s: the new snapshot is not the newest or does not end at index %d (%d snapshots, %v)",
			cfg.DataDir, res.LastIndex, len(kept), err)
	}
	return nil
}

// raftConfig is the Raft configuration Recover hands hashicorp/raft: the
// defaults Open starts from (the snapshot version follows the protocol
// version), this node's ID, and the node's logger.
func raftConfig(id string, logger hclog.Logger) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.Logger = logger.Named("raft")
	return rc
}

// oldConfiguration reads the latest configuration the stores hold (a
// throwaway state machine takes the snapshot Raft restores on the way).
func oldConfiguration(rc *raft.Config, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) (raft.Configuration, error) {
	var conf raft.Configuration
	err := storage.Safely("read the configuration", func() error {
		var err error
		conf, err = raft.GetConfiguration(rc, fsm.New(hclog.NewNullLogger()), logs, stable, snaps, trans)
		return err
	})
	if err != nil {
		return conf, fmt.Errorf("read the Raft configuration: %w", err)
	}
	return conf, nil
}

// lastEntry returns the index and term of the last entry the stores hold:
// the log's last, or the newest snapshot's when the log ends before it.
func lastEntry(logs raft.LogStore, snaps raft.SnapshotStore) (index, term uint64, err error) {
	list, err := snaps.List()
	if err != nil {
		return 0, 0, fmt.Errorf("list snapshots: %w", err)
	}
	if len(list) > 0 {
		index, term = list[0].Index, list[0].Term
	}
	last, err := logs.LastIndex()
	if err != nil {
		return 0, 0, fmt.Errorf("read the log's last index: %w", err)
	}
	if last > index {
		var l raft.Log
		if err := logs.GetLog(last, &l); err != nil {
			return 0, 0, fmt.Errorf("read log entry %d: %w", last, err)
		}
		index, term = l.Index, l.Term
	}
	return index, term, nil
}

// compare names the old voters the new configuration leaves out, and warns
// when this node's Raft address changes: the node must then advertise the
// new one (--raft-addr or --advertise-raft).
func compare(self string, old, conf raft.Configuration) (dropped, warnings []string) {
	kept := map[raft.ServerID]raft.ServerAddress{}
	for _, s := range conf.Servers {
		kept[s.ID] = s.Address
	}
	for _, s := range old.Servers {
		addr, ok := kept[s.ID]
		switch {
		case !ok:
			dropped = append(dropped, string(s.ID))
		case string(s.ID) == self && addr != s.Address:
			warnings = append(warnings, fmt.Sprintf("this node's Raft address changes from %s to %s: start it advertising %s", s.Address, addr, addr))
		}
	}
	if len(old.Servers) > 0 && !inServers(old, self) {
		warnings = append(warnings, fmt.Sprintf("this node, %s, is not in its old configuration: it had been removed from the cluster, and its state may be far behind", self))
	}
	return dropped, warnings
}

func inServers(c raft.Configuration, id string) bool {
	for _, s := range c.Servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

func names(members []Peer, id string) bool {
	for _, m := range members {
		if m.ID == id {
			return true
		}
	}
	return false
}

func fromRaft(c raft.Configuration) []ConfigServer {
	out := make([]ConfigServer, 0, len(c.Servers))
	for _, s := range c.Servers {
		out = append(out, ConfigServer{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out
}

// keptNodeID reads the node's ID from its data directory, which a node
// writes when it first starts: without it, the directory is not a node's.
func keptNodeID(dir string) (string, error) {
	path := filepath.Join(dir, "node-id")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: %s does not exist: %s is not the data directory of a node that has run", ErrRecoverRefused, path, dir)
	}
	if err != nil {
		return "", fmt.Errorf("read the node ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrRecoverRefused, path)
	}
	return id, nil
}

// notInUse refuses a data directory whose raft.db, or wal metadata file,
// a running node holds (storage.BoltInUse). A log store that is missing or does
// not open is left to storage.Check, which names what is wrong; it runs
// only once this check passed, as it removes temp files a running node
// may be writing.
func notInUse(dir string) error {
	for _, path := range []string{storage.WALMetaPath(dir), filepath.Join(dir, storage.BoltFile)} {
		if storage.BoltInUse(path) {
			return fmt.Errorf("%w: %s is in use: a node is running on %s; stop it first", ErrRecoverRefused, path, dir)
		}
	}
	return nil
}
