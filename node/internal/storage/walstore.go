package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"github.com/rangealloc/rangealloc/internal/durable"
	"go.etcd.io/bbolt"
)

// The wal log store (LogStoreWAL) lives in <data-dir>/wal/:
//
//	wal-meta.db            bbolt: the list of segments, the term and the vote
//	<base>-<id>.wal        segment files of walSegmentSize (Config.WALSegmentSize), preallocated
//
// raft-wal appends a batch of entries and a commit frame carrying the
// batch's CRC, then fsyncs once. On open it drops a tail batch whose CRC
// fails or whose commit frame never made it: a torn write after a crash,
// never acknowledged. checkWAL refuses what no crash leaves: the metadata
// file damaged or unreadable, a sealed segment missing, a segment file
// shorter than its preallocated size (cut short), an entry that does not
// read back.
const (
	WALDir         = "wal"
	walSegmentSize = 16 << 20
	WALSuffix      = ".wal"
)

// OpenWAL opens (creating it if need be) dir's wal store. raft-wal's
// metadata file has no lock timeout, so a held lock is refused first
// instead of waiting forever; a panic in raft-wal is a Error.
// segSize sizes new segments (0: walSegmentSize).
func OpenWAL(dir string, segSize uint64, logger hclog.Logger) (s *walStore, err error) {
	if segSize == 0 {
		segSize = walSegmentSize
	}
	path := filepath.Join(dir, WALDir)
	if err := walInUse(dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(path, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
		if err := durable.SyncDir(dir); err != nil {
			return nil, fmt.Errorf("sync %s: %w", dir, err)
		}
	}
	meta := &metadb.BoltMetaDB{}
	defer func() {
		if r := recover(); r != nil {
			_ = meta.Close()
			s, err = nil, &Error{Path: path, Problem: fmt.Sprintf("corrupt wal: %v", r)}
		}
	}()
	w, err := wal.Open(path, wal.WithSegmentSize(int(segSize)), wal.WithLogger(logger.Named("wal")), wal.WithMetaStore(meta))
	if err != nil {
		_ = meta.Close()
		// A file that cannot be read or written (permissions, a full or
		// failing disk) is no damage to the wal; anything else it finds
		// (a segment missing, a header or the metadata that does not
		// match) is.
		var pe *os.PathError
		if errors.As(err, &pe) && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("open the wal %s: %w", path, err)
		}
		return nil, &Error{Path: path, Problem: "corrupt wal, it does not open: " + err.Error()}
	}
	return &walStore{WAL: w, meta: meta}, nil
}

// walStore is raft-wal's WAL, whose Close also closes (and unlocks) the
// metadata file: raft-wal's own Close leaves it open.
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

// Close closes the segments, then the metadata file.
func (s *walStore) Close() error {
	err := s.WAL.Close()
	if merr := s.meta.Close(); err == nil {
		err = merr
	}
	return err
}

// ErrWALInUse says another process holds dir's wal.
var ErrWALInUse = errors.New("in use by another process")

// walInUse refuses dir's wal when another process (a running node) holds
// its metadata file. A missing or damaged file is left to checkWAL.
func walInUse(dir string) error {
	path := WALMetaPath(dir)
	if BoltInUse(path) {
		return fmt.Errorf("open %s: %w (is another node using %s?)", path, ErrWALInUse, dir)
	}
	return nil
}

// WALMetaPath is the path of dir's wal metadata file.
func WALMetaPath(dir string) string { return filepath.Join(dir, WALDir, metadb.FileName) }

// BoltInUse reports whether another process holds the bolt file at path
// open: bbolt locks a file for as long as it is open. A missing, empty or
// damaged file is not in use; Check says what is wrong with it.
func BoltInUse(path string) (inUse bool) {
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		return false
	}
	defer func() {
		if recover() != nil {
			inUse = false
		}
	}()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if err == nil {
		db.Close()
	}
	return errors.Is(err, bbolt.ErrTimeout)
}

// walMissing says what is missing of dir's wal ("" if nothing) and the
// path at fault (the wal directory if nothing).
func walMissing(dir string) (path, missing string) {
	path = filepath.Join(dir, WALDir)
	if _, err := os.Stat(path); err != nil {
		return path, "missing"
	}
	meta := filepath.Join(path, metadb.FileName)
	if fi, err := os.Stat(meta); err != nil {
		return meta, "missing"
	} else if fi.Size() == 0 {
		return meta, "empty (0 bytes)"
	}
	if segs, _ := filepath.Glob(filepath.Join(path, "*"+WALSuffix)); len(segs) == 0 {
		return path, "holds no segment files"
	}
	return path, ""
}

// checkWAL checks dir's wal as described at the top, and reads its
// current term and the log's bounds.
func checkWAL(dir string, logger hclog.Logger) (term, first, last uint64, err error) {
	path := filepath.Join(dir, WALDir)
	metaPath := filepath.Join(path, metadb.FileName)
	if err := CheckBolt(metaPath); err != nil {
		return 0, 0, 0, err
	}
	meta, err := readWALMeta(metaPath)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, si := range meta.Segments {
		seg := filepath.Join(path, segment.FileName(si))
		fi, err := os.Stat(seg)
		switch {
		case errors.Is(err, os.ErrNotExist) && si.SealTime.IsZero():
			continue // a crash between recording a new tail and creating it: raft-wal creates it
		case err != nil:
			return 0, 0, 0, &Error{Path: seg, Problem: "segment file listed in " + metadb.FileName + " is unreadable: " + err.Error()}
		case fi.Size() < int64(si.SizeLimit):
			return 0, 0, 0, &Error{Path: seg, Problem: fmt.Sprintf(
				"segment file cut short: %d bytes, but it is preallocated to %d", fi.Size(), si.SizeLimit)}
		}
	}
	s, err := OpenWAL(dir, 0, hclog.NewNullLogger())
	if err != nil {
		return 0, 0, 0, err
	}
	defer s.Close()
	err = Safely("read the wal", func() error {
		var err error
		if term, err = s.GetUint64(KeyCurrentTerm); err != nil {
			return fmt.Errorf("cannot read the current term: %w", err)
		}
		if first, err = s.FirstIndex(); err == nil {
			last, err = s.LastIndex()
		}
		if err != nil {
			return fmt.Errorf("cannot read the log's bounds: %w", err)
		}
		var l raft.Log
		for i := first; i > 0 && i <= last; i++ {
			if err := s.GetLog(i, &l); err != nil {
				return fmt.Errorf("entry %d does not read back: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, 0, &Error{Path: path, Problem: "corrupt wal: " + err.Error()}
	}
	logger.Debug("wal checked", "segments", len(meta.Segments), "first", first, "last", last, "term", term)
	return term, first, last, nil
}

// readWALMeta reads the segment list from the wal's metadata file.
func readWALMeta(path string) (types.PersistentState, error) {
	var st types.PersistentState
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if errors.Is(err, bbolt.ErrTimeout) {
		return st, fmt.Errorf("open %s: %w", path, ErrWALInUse)
	}
	if err != nil {
		return st, &Error{Path: path, Problem: "corrupt wal metadata: " + err.Error()}
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(metadb.MetaBucket))
		if b == nil {
			return errors.New("no " + metadb.MetaBucket + " bucket")
		}
		if raw := b.Get([]byte(metadb.MetaKey)); raw != nil {
			return json.Unmarshal(raw, &st)
		}
		return nil
	})
	if err != nil {
		return st, &Error{Path: path, Problem: "corrupt wal metadata: " + err.Error()}
	}
	return st, nil
}

// WALSize is the bytes the wal takes on disk (the segments preallocated).
func WALSize(dir string) uint64 {
	return TreeSize(filepath.Join(dir, WALDir))
}
