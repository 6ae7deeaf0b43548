package node

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/internal/durable"
)

// Scheduled backups (Config.BackupDir). Every BackupInterval the node
// writes a backup of its own applied state, in the bytes GET /v1/snapshot
// gives, so a node takes backups without a leader too. One backup:
//
//	.rangealloc-<id>-*.tmp          written, fsynced, closed
//	  │ read back whole with fsm.ReadBackup: what a restore checks
//	  ▼
//	rangealloc-<id>-<UTC time>-<applied index>.snap   renamed, directory fsynced
//
// then all but the newest BackupRetain of this node's backups are deleted.
// Only names of that exact pattern, with this node's ID, are ever deleted
// or counted: other files in the directory, and the backups of other nodes
// sharing it, are left alone. A failure (disk full, a backup that does not
// read back) is logged, counted, and removes its temp file; the next
// interval tries again.
//
// A backup is written every interval even when nothing was applied since
// the last one: the age of the last backup (the metric
// rangealloc_last_backup_timestamp_seconds) then says whether backups work,
// whatever the load, and a copy of an idle cluster costs one small file.

// backupTimeFormat is the UTC time in a backup's name: fixed width, so
// names sort by time.
const backupTimeFormat = "20060102T150405.000Z"

// backupSuffix follows the time and applied index of a backup's name.
var backupSuffix = regexp.MustCompile(`^(\d{8}T\d{6}\.\d{3}Z)-(\d+)\.snap$`)

// BackupStatus is what the scheduled backups of a node have done since it
// started.
type BackupStatus struct {
	// Last is the last verified backup; its Time is zero before any.
	Last BackupResult
	// Failures counts the backups that failed.
	Failures uint64
	// LastError is the reason of the last failure, "" before any.
	LastError string
}

// BackupResult is one scheduled backup, for Config.OnBackup.
type BackupResult struct {
	// Time is when the backup began.
	Time time.Time
	// Path is the backup's file, "" when Err is set.
	Path string
	// Index is the log index of the state it holds; Bytes its size.
	Index uint64
	Bytes int64
	// Err is why the backup failed; nil when it was written and verified.
	Err error
}

// backuper writes the scheduled backups of one node into one directory.
type backuper struct {
	dir    string
	prefix string // "rangealloc-<id>-"
	retain int
	logger hclog.Logger
	// write writes the state to back up; now tells the time.
	write func(io.Writer) error
	now   func() time.Time

	// mu guards the following
	mu     sync.Mutex
	status BackupStatus
}

// newBackuper makes the backuper of the node id; write writes its state.
func newBackuper(dir, id string, retain int, write func(io.Writer) error, logger hclog.Logger) *backuper {
	return &backuper{dir: dir, prefix: "rangealloc-" + fileSafe(id) + "-", retain: retain,
		logger: logger, write: write, now: time.Now}
}

// fileSafe keeps the letters, digits, '.', '_' and '-' of id and turns
// anything else into '_', so that any node ID makes one file name.
func fileSafe(id string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, id)
}

// Status returns what the backups have done so far.
func (b *backuper) Status() BackupStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status
}

// take writes, verifies and keeps one backup, then prunes the old ones.
func (b *backuper) take() BackupResult {
	res := BackupResult{Time: b.now().UTC()}
	res.Path, res.Index, res.Bytes, res.Err = b.writeVerified(res.Time)
	b.mu.Lock()
	if res.Err != nil {
		b.status.Failures++
		b.status.LastError = res.Err.Error()
	} else {
		b.status.Last = res
	}
	b.mu.Unlock()
	if res.Err != nil {
		b.logger.Error("scheduled backup failed; trying again next interval", "dir", b.dir, "error", res.Err)
		return res
	}
	b.logger.Info("scheduled backup written", "path", res.Path, "index", res.Index, "bytes", res.Bytes)
	b.prune()
	return res
}

// writeVerified writes the state to a temp file, checks it reads back as
// a restore would, and renames it to its final name. On any failure the
// temp file is removed.
func (b *backuper) writeVerified(at time.Time) (path string, index uint64, size int64, err error) {
	f, err := os.CreateTemp(b.dir, "."+b.prefix+"*.tmp")
	if err != nil {
		return "", 0, 0, fmt.Errorf("backup dir %s: %w", b.dir, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if size, err = b.writeFile(f); err != nil {
		return "", 0, 0, fmt.Errorf("write %s: %w", tmp, err)
	}
	if index, err = verifyBackup(tmp); err != nil {
		return "", 0, 0, fmt.Errorf("verify %s: %w", tmp, err)
	}
	path = filepath.Join(b.dir, fmt.Sprintf("%s%s-%d.snap", b.prefix, at.Format(backupTimeFormat), index))
	if err = os.Rename(tmp, path); err != nil {
		return "", 0, 0, fmt.Errorf("keep backup: %w", err)
	}
	if err = durable.SyncDir(b.dir); err != nil {
		// The backup is whole and verified; its name may not survive a
		// power cut, which the next backup fixes.
		return "", 0, 0, fmt.Errorf("sync backup dir %s: %w", b.dir, err)
	}
	return path, index, size, nil
}

// writeFile writes the state to f, fsyncs and closes it, and returns its size.
func (b *backuper) writeFile(f *os.File) (int64, error) {
	bw := bufio.NewWriterSize(f, 1<<16)
	w := &countingWriter{w: bw}
	err := b.write(w)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return w.n, err
}

// verifyBackup reads the backup at path whole with the check a restore
// applies (fsm.ReadBackup) and returns the log index it holds.
func verifyBackup(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	bk, err := fsm.ReadBackup(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return 0, err
	}
	return bk.Index(), nil
}

// backupFile is one of this node's backups in the directory.
type backupFile struct {
	name string
	time time.Time
}

// list returns this node's backups in the directory, oldest first: the
// files named rangealloc-<id>-<UTC time>-<index>.snap, nothing else.
func (b *backuper) list() ([]backupFile, error) {
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return nil, err
	}
	var out []backupFile
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), b.prefix)
		m := backupSuffix.FindStringSubmatch(rest)
		if !ok || m == nil || !e.Type().IsRegular() {
			continue
		}
		t, err := time.Parse(backupTimeFormat, m[1])
		if err != nil {
			continue
		}
		out = append(out, backupFile{name: e.Name(), time: t})
	}
	// The time is fixed width, so the names sort by it.
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// prune deletes all but the newest retain of this node's backups.
func (b *backuper) prune() {
	files, err := b.list()
	if err != nil {
		b.logger.Warn("cannot list old backups to delete", "dir", b.dir, "error", err)
		return
	}
	for len(files) > b.retain {
		if err := os.Remove(filepath.Join(b.dir, files[0].name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.logger.Warn("cannot delete an old backup", "file", files[0].name, "error", err)
		}
		files = files[1:]
	}
}

// removeTemps deletes this node's temp files that a crash in the middle
// of a backup left behind.
func (b *backuper) removeTemps() {
	// fileSafe left no pattern character in the prefix.
	tmps, _ := filepath.Glob(filepath.Join(b.dir, "."+b.prefix+"*.tmp"))
	for _, t := range tmps {
		if err := os.Remove(t); err == nil {
			b.logger.Info("removed an unfinished backup", "file", t)
		}
	}
}

// firstDelay is how long to wait before the first backup: until an
// interval after this node's newest backup, so restarts do not postpone
// backups for ever, and at once when there is none.
func (b *backuper) firstDelay(interval time.Duration) time.Duration {
	files, err := b.list()
	if err != nil || len(files) == 0 {
		return 0
	}
	d := files[len(files)-1].time.Add(interval).Sub(b.now())
	return min(max(d, 0), interval)
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// loop takes a backup every interval until shutdown, and hands each
// result to onBackup when set.
//
// A node restarts with its state machine at its last snapshot; the entries
// its log holds after it are applied once a leader says they are
// committed. Until the node has applied its log's last index at start
// (floor), a backup would hold less than the backups it wrote before (and
// pruning would keep the older state over them), so the loop waits for
// that first, looking again every second. Without a majority it waits for
// good, and the newest backup stays the newest.
func (b *backuper) loop(interval time.Duration, floor uint64, appliedIndex func() uint64, onBackup func(BackupResult), shutdown <-chan struct{}) {
	b.removeTemps()
	t := time.NewTimer(b.firstDelay(interval))
	defer t.Stop()
	waiting := false
	for {
		select {
		case <-shutdown:
			return
		case <-t.C:
		}
		if applied := appliedIndex(); applied < floor {
			if !waiting {
				b.logger.Warn("scheduled backup waits: the state machine has applied less than this node's log held at start; a leader commits the rest",
					"applied_index", applied, "log_index_at_start", floor)
				waiting = true
			}
			t.Reset(min(time.Second, interval))
			continue
		}
		if waiting {
			b.logger.Info("scheduled backups resume", "applied_index", appliedIndex())
			waiting = false
		}
		floor = 0
		res := b.take()
		if onBackup != nil {
			onBackup(res)
		}
		t.Reset(interval)
	}
}

// checkBackupDir creates Config.BackupDir if need be and checks that a
// file can be written there, so that a node whose backups cannot work
// refuses to start rather than fail an hour later.
func checkBackupDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := durable.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("backup dir: %w", err)
	}
	f, err := os.CreateTemp(dir, ".rangealloc-probe-*.tmp")
	if err != nil {
		return fmt.Errorf("backup dir %s is not writable: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// startBackups starts n's backup loop when Config.BackupDir is set, once
// the node has founded or joined its cluster; the loop's first backup
// waits until the node has applied what its log holds now.
func startBackups(n *Node) {
	if n.cfg.BackupDir == "" {
		return
	}
	n.backups = newBackuper(n.cfg.BackupDir, n.id, n.cfg.BackupRetain, n.fsm.WriteBackup, n.logger.Named("backup"))
	floor := n.raft.LastIndex()
	n.goFunc(func() { n.backups.loop(n.cfg.BackupInterval, floor, n.fsm.AppliedIndex, n.cfg.OnBackup, n.shutdown) })
}

// BackupStatus returns what this node's scheduled backups have done since
// it started; the zero value when Config.BackupDir is not set.
func (n *Node) BackupStatus() BackupStatus {
	if n.backups == nil {
		return BackupStatus{}
	}
	return n.backups.Status()
}
