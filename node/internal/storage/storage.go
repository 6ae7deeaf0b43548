package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/internal/durable"
	"go.etcd.io/bbolt"
)

// A node's data directory:
//
//	<data-dir>/
//	  node-id      the node's ID (written once)
//	  cluster-id   the cluster's ID, once the node has learned it
//	  state        marker, written and synced before the first write to raft.db:
//	               "this directory has held Raft state"
//	  founding-unfinished
//	               marker, from before the bootstrap until the founding's
//	               writes are seen done (membership.go)
//	  raft.db      Raft's log and stable store (term, vote), bbolt
//	  snapshots/   Raft's snapshots, <term>-<index>-<ms>/{meta.json,state.bin}
//
// Check runs before anything is opened. It refuses (Error)
// a directory from which a node could serve an older state as current or
// vote again in a term it voted in before: raft.db missing or empty after
// the directory held state, corrupt bolt pages, a snapshot that fails its
// checksum or whose metadata does not parse, a stored term behind the
// newest snapshot's, a log whose older entries were compacted into
// snapshots that are gone.
const (
	BoltFile    = "raft.db"
	MarkerFile  = "state"
	ClusterFile = "cluster-id"
	SnapDir     = "snapshots"
	tmpSuffix   = ".tmp"
)

// KeyCurrentTerm is hashicorp/raft's stable-store key of the current term.
var KeyCurrentTerm = []byte("CurrentTerm")

// ErrStorage matches every Error.
var ErrStorage = errors.New("storage lost or damaged")

// Error refuses to start a node whose data directory cannot be
// trusted. Path names the file at fault.
type Error struct {
	Path    string
	Problem string
}

func (e *Error) Error() string {
	return fmt.Sprintf("refusing to start: %s: %s. Starting from it could hand out acknowledged values again "+
		"or vote twice in one term. To replace this node: remove it from the cluster through a live member "+
		"(rangealloc cluster remove <id> --addr http://<member>), delete the data directory, and start it "+
		"with --join <member's HTTP address>; a single-node cluster is restored from a backup instead "+
		"(docs/OPERATIONS.md, \"A node refuses to start\")", e.Path, e.Problem)
}

// Is makes errors.Is(err, ErrStorage) hold.
func (e *Error) Is(target error) bool { return target == ErrStorage }

// State is what Check learned of a data directory.
type State struct {
	Marked   bool // the state marker exists
	HasState bool // the log store or the snapshots hold Raft state
}

// Check inspects dir, whose log store is store (LogStoreBolt or
// LogStoreWAL), as described above, removing the temp files of failed
// snapshots and restores on the way.
func Check(dir, store string, logger hclog.Logger) (State, error) {
	var st State
	removeTemps(dir, logger)
	marker := filepath.Join(dir, MarkerFile)
	pending := false
	if b, err := os.ReadFile(marker); err == nil {
		st.Marked, pending = true, string(b) == PendingMarkerText
	} else if !errors.Is(err, os.ErrNotExist) {
		return st, fmt.Errorf("read %s: %w", MarkerFile, err)
	}
	// A pending marker without state: the first write to the log store
	// never returned (a crash or a power cut during it), so this directory
	// promised nothing and is new.
	forget := func() error {
		logger.Warn("the first write to the log store never completed (a crash or a power cut during it): the directory starts as a new one",
			"marker", marker)
		st.Marked = false
		return durable.Remove(marker)
	}
	snap, err := newestSnapshot(filepath.Join(dir, SnapDir), logger)
	if err != nil {
		return st, err
	}
	dbPath, missing, err := logStoreMissing(dir, store)
	if err != nil {
		return st, err
	}
	if missing != "" && pending {
		if err := forget(); err != nil {
			return st, err
		}
	}
	if missing != "" {
		if st.Marked {
			return st, &Error{Path: dbPath, Problem: missing + ", but this data directory has held Raft state (marker " + MarkerFile + ")"}
		}
		if snap != nil {
			return st, &Error{Path: dbPath, Problem: missing + ", but snapshots exist (" + snap.path + ")"}
		}
		return st, nil
	}
	var term, first, last uint64
	if store == LogStoreWAL {
		term, first, last, err = checkWAL(dir, logger)
	} else if err = CheckBolt(dbPath); err == nil {
		term, first, last, err = boltBounds(dbPath)
	}
	if err != nil {
		return st, err
	}
	st.HasState = term > 0 || last > 0 || snap != nil
	if pending && !st.HasState {
		if err := forget(); err != nil {
			return st, err
		}
	}
	switch {
	case st.Marked && !st.HasState:
		return st, &Error{Path: dbPath, Problem: "holds no Raft state, but this data directory did (marker " + MarkerFile + ")"}
	case snap != nil && term < snap.Term:
		return st, &Error{Path: dbPath, Problem: fmt.Sprintf(
			"its current term %d is behind the newest snapshot's term %d (%s): the log store was lost or replaced by an older copy",
			term, snap.Term, snap.path)}
	case first > 1 && (snap == nil || snap.Index+1 < first):
		newest := "none"
		if snap != nil {
			newest = fmt.Sprintf("%s, index %d", snap.path, snap.Index)
		}
		return st, &Error{Path: filepath.Join(dir, SnapDir), Problem: fmt.Sprintf(
			"the log starts at index %d, but no snapshot holds the entries before it (newest snapshot: %s)", first, newest)}
	}
	if st.HasState && (!st.Marked || pending) { // from before the marker existed, or a first write that returned
		if err := durable.WriteFile(marker, []byte(MarkerText), 0o600); err != nil {
			return st, fmt.Errorf("write %s: %w", MarkerFile, err)
		}
		st.Marked = true
	}
	return st, nil
}

const MarkerText = "this data directory has held Raft state; if its log store is lost, the node refuses to start\n"

// PendingMarkerText is the marker's text from before the first write to
// the log store until that write has returned: a directory found with it
// and no state never completed that write, so made no promise.
const PendingMarkerText = "this data directory is taking its first Raft write; if its log store holds nothing, that write never completed\n"

// logStoreMissing says what is missing of dir's log store ("" if
// nothing: it holds a file to check) and the path at fault.
func logStoreMissing(dir, store string) (path, missing string, err error) {
	if store == LogStoreWAL {
		path, missing = walMissing(dir)
		return path, missing, nil
	}
	path = filepath.Join(dir, BoltFile)
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return path, "missing", nil
	case err != nil:
		return path, "", fmt.Errorf("stat %s: %w", path, err)
	case fi.Size() == 0:
		return path, "empty (0 bytes)", nil
	}
	return path, "", nil
}

// removeTemps removes what a crash can leave behind: snapshot directories
// Raft never finished (<id>.tmp), which it would otherwise keep forever,
// and restore uploads (restore-*.tmp).
func removeTemps(dir string, logger hclog.Logger) {
	for _, pattern := range []string{filepath.Join(dir, SnapDir, "*"+tmpSuffix), filepath.Join(dir, "restore-*"+tmpSuffix)} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				logger.Warn("could not remove a temp file", "path", m, "error", err)
				continue
			}
			logger.Info("removed the temp file of an unfinished snapshot or restore", "path", m)
		}
	}
}

// snapInfo is the part of a snapshot's meta.json the checks need.
type snapInfo struct {
	ID    string
	Index uint64
	Term  uint64
	CRC   []byte
	path  string
}

// newestSnapshot returns the newest snapshot in dir (nil if none), after
// checking that the newest one's state matches its checksum, and that no
// snapshot at least as new has metadata that does not parse (Raft
// silently skips it, and would start from an older state). An unreadable
// snapshot older than the newest readable one is what a crash while Raft
// reaped it leaves; it is removed.
func newestSnapshot(dir string, logger hclog.Logger) (*snapInfo, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	var snaps, unreadable []*snapInfo
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), tmpSuffix) {
			continue
		}
		path := filepath.Join(dir, e.Name(), "meta.json")
		b, err := os.ReadFile(path)
		s := &snapInfo{path: filepath.Join(dir, e.Name())}
		if err == nil {
			err = json.Unmarshal(b, s)
		}
		if err != nil {
			s.ID = err.Error()
			unreadable = append(unreadable, s)
			continue
		}
		snaps = append(snaps, s)
	}
	sort.Slice(snaps, func(i, j int) bool { // Raft's order: term, index, ID
		a, b := snaps[i], snaps[j]
		if a.Term != b.Term {
			return a.Term > b.Term
		}
		if a.Index != b.Index {
			return a.Index > b.Index
		}
		return a.ID > b.ID
	})
	var newest *snapInfo
	if len(snaps) > 0 {
		newest = snaps[0]
	}
	for _, u := range unreadable { // named <term>-<index>-<ms> by Raft
		var term, index, ms uint64
		_, perr := fmt.Sscanf(filepath.Base(u.path), "%d-%d-%d", &term, &index, &ms)
		if perr != nil || newest == nil || term > newest.Term || (term == newest.Term && index >= newest.Index) {
			return nil, &Error{Path: filepath.Join(u.path, "meta.json"), Problem: "unreadable snapshot metadata: " + u.ID}
		}
		if err := os.RemoveAll(u.path); err != nil {
			return nil, fmt.Errorf("remove the unreadable old snapshot %s: %w", u.path, err)
		}
		logger.Warn("removed an old snapshot whose metadata does not parse (a crash while it was being deleted?)", "path", u.path)
	}
	if newest == nil {
		return nil, nil
	}
	state := filepath.Join(newest.path, "state.bin")
	f, err := os.Open(state)
	if err != nil {
		return nil, &Error{Path: state, Problem: "unreadable snapshot: " + err.Error()}
	}
	defer f.Close()
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	if _, err := io.Copy(h, f); err != nil {
		return nil, &Error{Path: state, Problem: "unreadable snapshot: " + err.Error()}
	}
	if got := h.Sum(nil); string(got) != string(newest.CRC) {
		return nil, &Error{Path: state, Problem: fmt.Sprintf("snapshot fails its checksum (CRC-64 %x, meta.json says %x)", got, newest.CRC)}
	}
	return newest, nil
}

// boltOptions are raft.db's options: fsync stays on; the freelist is
// rebuilt at open instead of written at every commit.
func boltOptions() *bbolt.Options {
	return &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}
}

// CheckBolt checks raft.db's page tree (checkBoltPages: bbolt itself
// panics on a damaged one), then runs bbolt's own consistency check, which
// also checks what the walk does not read (key order, the free pages). It
// opens the file read-only: opening it for writing first rebuilds the
// free list by walking every page, and bbolt panics there on a key out of
// order; its Check reports the same as an error. A panic that gets through
// anyway, on this goroutine, is a Error too.
func CheckBolt(path string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &Error{Path: path, Problem: fmt.Sprintf("corrupt bolt file: %v", r)}
		}
	}()
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil {
		err = checkBoltPages(f, fi.Size())
		f.Close()
		if err != nil {
			return &Error{Path: path, Problem: "corrupt bolt file: " + err.Error()}
		}
	} else {
		f.Close()
		return fmt.Errorf("stat %s: %w", path, err)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, ReadOnly: true})
	if errors.Is(err, bbolt.ErrTimeout) {
		return fmt.Errorf("open %s: another process holds it (is another node using this data directory?)", path)
	}
	if err != nil {
		return &Error{Path: path, Problem: "corrupt bolt file: " + err.Error()}
	}
	defer db.Close()
	var problems []string
	err = db.View(func(tx *bbolt.Tx) error {
		for e := range tx.Check() {
			if len(problems) < 3 {
				problems = append(problems, e.Error())
			}
		}
		return nil
	})
	if err == nil && len(problems) > 0 {
		err = &Error{Path: path, Problem: "corrupt bolt file: " + strings.Join(problems, "; ")}
	}
	return err
}

// boltBounds reads the stored current term and the log's bounds.
func boltBounds(path string) (term, first, last uint64, err error) {
	s, err := OpenBolt(filepath.Dir(path))
	if err != nil {
		return 0, 0, 0, &Error{Path: path, Problem: "cannot open: " + err.Error()}
	}
	defer s.Close()
	term, err = s.GetUint64(KeyCurrentTerm)
	if err != nil && err.Error() != "not found" {
		return 0, 0, 0, &Error{Path: path, Problem: "cannot read the current term: " + err.Error()}
	}
	if first, err = s.FirstIndex(); err == nil {
		last, err = s.LastIndex()
	}
	if err != nil {
		return 0, 0, 0, &Error{Path: path, Problem: "cannot read the log's bounds: " + err.Error()}
	}
	return term, first, last, nil
}

// Store is the log store (raft.db or the wal) with the state marker
// written (and synced) before its first write, so that a data directory
// that ever held a log entry or a vote says so even after its log store
// is gone. Before that first write the marker says it is pending; once the
// write has returned, and before Raft can act on it, it says the directory
// has held state. A pending marker beside a log store that holds nothing
// is a first write that never completed (a power cut during it): the
// directory promised nothing, and Check takes it as new.
//
// It also outlives Close Safely. hashicorp/raft answers heartbeats on the
// transport's goroutines, outside its main loop, and one that passed
// Raft's shutdown check can still adopt a term after the node closed the
// store; Raft panics when that write fails. After Close, a term or vote
// written is dropped (as if the process had died an instant before: a term
// learned from a heartbeat grants no vote), and a log write fails.
type Store struct {
	RaftStore
	stall *StallWatch // times every write (stall.go)
	// before is Config.BeforeStoreWrite.
	before func()
	path   string
	done   atomic.Bool // the marker says the directory has held state
	// markMu orders the marker's writes; pending is true once the pending
	// marker is on disk. A marker write that failed is tried again by the
	// next store write.
	markMu  sync.Mutex
	pending bool

	mu sync.RWMutex
	// mu guards the following: writes hold it shared, Close exclusively.
	closed bool
}

var ErrStoreClosed = errors.New("the log store is closed: the node is shutting down")

// Close closes the log store once every write in progress has returned.
func (m *Store) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	return m.RaftStore.Close()
}

// write runs fn unless the store is closed; logs says what a closed store
// answers: an error for log entries, nothing for terms and votes.
func (m *Store) write(logs bool, fn func() error) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	switch {
	case m.closed && logs:
		return ErrStoreClosed
	case m.closed:
		return nil
	}
	defer m.stall.end(m.stall.begin())
	if m.before != nil {
		m.before()
	}
	return fn()
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// IsMonotonic passes on whether the store refuses a gap in the log
// (raft-wal does; raft.db does not): Raft then deletes the whole log after
// installing a snapshot instead of leaving a gap before the next entry.
func (m *Store) IsMonotonic() bool {
	s, ok := m.RaftStore.(raft.MonotonicLogStore)
	return ok && s.IsMonotonic()
}

var _ raft.MonotonicLogStore = (*Store)(nil)

// NewStore wraps s, the log store of dir; marked says the state marker
// exists. Every write is timed by stall, and preceded by a call of before
// when it is set (tests stall a disk with it).
func NewStore(s RaftStore, dir string, marked bool, stall *StallWatch, before func()) *Store {
	if stall == nil {
		stall = new(StallWatch)
	}
	m := &Store{RaftStore: s, stall: stall, before: before, path: filepath.Join(dir, MarkerFile)}
	m.done.Store(marked)
	return m
}

// mark writes the marker, pending, before the first write to the store.
func (m *Store) mark() error {
	if m.done.Load() {
		return nil
	}
	m.markMu.Lock()
	defer m.markMu.Unlock()
	if m.done.Load() || m.pending {
		return nil
	}
	if err := durable.WriteFile(m.path, []byte(PendingMarkerText), 0o600); err != nil {
		return fmt.Errorf("write the state marker %s: %w", m.path, err)
	}
	m.pending = true
	return nil
}

// settle makes the marker final once a write to the store has returned,
// before Raft can act on it (acknowledge an entry, grant a vote).
func (m *Store) settle() error {
	if m.done.Load() {
		return nil
	}
	m.markMu.Lock()
	defer m.markMu.Unlock()
	if m.done.Load() {
		return nil
	}
	if err := durable.WriteFile(m.path, []byte(MarkerText), 0o600); err != nil {
		return fmt.Errorf("write the state marker %s: %w", m.path, err)
	}
	m.done.Store(true)
	return nil
}

// StoreLog marks, then stores.
func (m *Store) StoreLog(l *raft.Log) error {
	return m.write(true, func() error {
		if err := m.mark(); err != nil {
			return err
		}
		if err := m.RaftStore.StoreLog(l); err != nil {
			return err
		}
		return m.settle()
	})
}

// StoreLogs marks, then stores.
func (m *Store) StoreLogs(logs []*raft.Log) error {
	return m.write(true, func() error {
		if err := m.mark(); err != nil {
			return err
		}
		if err := m.RaftStore.StoreLogs(logs); err != nil {
			return err
		}
		return m.settle()
	})
}

// DeleteRange deletes, unless the store is closed.
func (m *Store) DeleteRange(lo, hi uint64) error {
	return m.write(true, func() error { return m.RaftStore.DeleteRange(lo, hi) })
}

// Set marks, then stores.
func (m *Store) Set(k, v []byte) error {
	return m.write(false, func() error {
		if err := m.mark(); err != nil {
			return err
		}
		if err := m.RaftStore.Set(k, v); err != nil {
			return err
		}
		return m.settle()
	})
}

// SetUint64 marks, then stores. A zero needs no mark: Raft writes its
// term 0 at start, and a missing key reads as zero.
func (m *Store) SetUint64(k []byte, v uint64) error {
	return m.write(false, func() error {
		if v == 0 {
			return m.RaftStore.SetUint64(k, v)
		}
		if err := m.mark(); err != nil {
			return err
		}
		if err := m.RaftStore.SetUint64(k, v); err != nil {
			return err
		}
		return m.settle()
	})
}
