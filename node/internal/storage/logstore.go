package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/rangealloc/rangealloc/internal/durable"
)

// The Raft log stores a node can keep its log, term and vote in.
const (
	// LogStoreBolt is raft-boltdb: raft.db, a bbolt B+tree, two fsyncs
	// per append. The default.
	LogStoreBolt = "bolt"
	// LogStoreWAL is raft-wal: wal/, an append-only log in segment files
	// beside a small bbolt file of metadata, term and vote; one fsync per
	// append.
	LogStoreWAL = "wal"
)

// LogStoreFile records, in the data directory, the log store chosen when
// the directory was first used.
const LogStoreFile = "log-store"

// Valid accepts the names above, and "" (the recorded one).
func Valid(s string) error {
	switch s {
	case "", LogStoreBolt, LogStoreWAL:
		return nil
	}
	return fmt.Errorf("LogStore %q is not a log store: use %q or %q (or leave it empty for the one the data directory records)",
		s, LogStoreBolt, LogStoreWAL)
}

// ErrLogStoreMismatch matches the refusal of a log store other than the
// one a data directory records.
var ErrLogStoreMismatch = errors.New("log store differs from the data directory's")

// Resolve returns the log store of dir: the recorded one, refusing
// a want ("" wants nothing) that differs. A directory without a record
// holding raft.db is from before the record existed: bolt. One holding
// wal/ lost its record: wal. A new one gets want, or bolt, recorded
// (synced) before Raft writes anything, unless record is false (a
// directory only read, as by recover). A refusal changes nothing.
func Resolve(dir, want string, record bool) (string, error) {
	if err := Valid(want); err != nil {
		return "", err
	}
	path := filepath.Join(dir, LogStoreFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		kept := strings.TrimSpace(string(b))
		if Valid(kept) != nil || kept == "" {
			return "", &Error{Path: path, Problem: fmt.Sprintf("names no log store (%q): want %q or %q", kept, LogStoreBolt, LogStoreWAL)}
		}
		if want != "" && want != kept {
			return "", fmt.Errorf("refusing to start: %w: --log-store %s, but %s records %s: a data directory keeps the log store "+
				"it was first used with; to move this node to %s, replace it (remove it from the cluster, delete "+
				"the data directory, start it with --join and --log-store %s; docs/OPERATIONS.md, \"Choosing a log store\")",
				ErrLogStoreMismatch, want, path, kept, want, want)
		}
		return kept, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	found := ""
	for _, c := range []struct{ name, store string }{{BoltFile, LogStoreBolt}, {WALDir, LogStoreWAL}} {
		if _, err := os.Stat(filepath.Join(dir, c.name)); err == nil {
			if found != "" {
				return "", &Error{Path: dir, Problem: fmt.Sprintf("holds both %s and %s/ and no %s: which one is the log store is unknown",
					BoltFile, WALDir, LogStoreFile)}
			}
			found = c.store
		}
	}
	if found != "" && want != "" && want != found {
		return "", fmt.Errorf("refusing to start: %w: --log-store %s, but %s holds a %s log store (%s absent): a data directory keeps the log store "+
			"it was first used with; to move this node to %s, replace it (docs/OPERATIONS.md, \"Choosing a log store\")",
			ErrLogStoreMismatch, want, dir, found, path, want)
	}
	store := found
	if store == "" {
		store = want
	}
	if store == "" {
		store = LogStoreBolt
	}
	if !record {
		return store, nil
	}
	if err := durable.WriteFile(path, []byte(store+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("record the log store in %s: %w", path, err)
	}
	return store, nil
}

// RaftStore is what a node keeps its log, term and vote in.
type RaftStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// Open opens dir's log store of the given kind. logger names
// raft-wal's messages; segSize is its new segments' size (0: the default).
func Open(dir, store string, segSize uint64, logger hclog.Logger) (RaftStore, error) {
	if store == LogStoreWAL {
		return OpenWAL(dir, segSize, logger)
	}
	s, err := OpenBolt(dir)
	if err != nil {
		return nil, fmt.Errorf("open %s (is another node using %s?): %w", BoltFile, dir, err)
	}
	return s, nil
}

// OpenBolt opens dir's raft.db, the Raft log and stable store, with
// boltOptions.
func OpenBolt(dir string) (*raftboltdb.BoltStore, error) {
	return raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, BoltFile), BoltOptions: boltOptions()})
}

// logStorePath is the file or directory of dir's log store.
func logStorePath(dir, store string) string {
	if store == LogStoreWAL {
		return filepath.Join(dir, WALDir)
	}
	return filepath.Join(dir, BoltFile)
}
