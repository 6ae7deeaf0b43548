package storage

import (
	"fmt"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/internal/durable"
)

// durableSnapshots is hashicorp/raft's FileSnapshotStore with the one
// fsync it leaves out. Its sink creates snapshots/<id>.tmp/ holding
// meta.json and state.bin, fsyncs both files when it closes, renames the
// directory to snapshots/<id>/ and fsyncs snapshots/, then deletes the
// snapshots beyond the ones it keeps. It never fsyncs <id>.tmp/ itself,
// so a power cut after the rename could leave snapshots/<id>/ without its
// two entries (or either), the older snapshots already deleted: a node
// that refuses to start on every member at once.
//
// Create fsyncs <id>.tmp/ right after the sink made both entries: the
// sink's Close rewrites meta.json in place, which adds no entry. So by
// the time the directory is renamed into place, what it names is durable.
type durableSnapshots struct {
	*raft.FileSnapshotStore
	dir string // <data-dir>/snapshots
}

// OpenSnapshots opens (creating it durably) dataDir's snapshot store,
// which keeps retain snapshots.
func OpenSnapshots(dataDir string, retain int, logger hclog.Logger) (*durableSnapshots, error) {
	dir := filepath.Join(dataDir, SnapDir)
	if err := durable.MkdirAll(dir, 0o755); err != nil { // FileSnapshotStore's mode
		return nil, err
	}
	s, err := raft.NewFileSnapshotStoreWithLogger(dataDir, retain, logger)
	if err != nil {
		return nil, err
	}
	return &durableSnapshots{FileSnapshotStore: s, dir: dir}, nil
}

// Create starts a snapshot, and makes its directory's entries durable.
func (s *durableSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	tmp := filepath.Join(s.dir, sink.ID()+tmpSuffix)
	if err := durable.SyncDir(tmp); err != nil {
		_ = sink.Cancel()
		return nil, fmt.Errorf("snapshot %s: %w", tmp, err)
	}
	return sink, nil
}

var _ raft.SnapshotStore = (*durableSnapshots)(nil)
