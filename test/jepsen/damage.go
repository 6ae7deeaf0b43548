package jepsen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The files of a data dir that the storage faults damage: hashicorp/raft's
// file snapshot store keeps snapshots/<term>-<index>-<ms>/{meta.json,
// state.bin}, raft-boltdb the log and the stable store in raft.db; with
// --log-store wal, raft-wal keeps them in wal/: segment files
// <base>-<id>.wal, and the term, the vote and the segment list in the
// bbolt file wal-meta.db.
const (
	raftDB    = "raft.db"
	walDir    = "wal"
	walMeta   = "wal-meta.db"
	snapsDir  = "snapshots"
	stateFile = "state.bin"
	pageSize  = 4096
)

// wipeDir removes a data dir entirely, as a replaced disk or a re-imaged
// node would leave it.
func wipeDir(dir string) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	return "removed the data dir", nil
}

// truncateLog cuts dir's raft.db to 0 bytes (TruncateEmpty) or to half
// its size (TruncateHalf), as a lost write-back cache or a bad copy would.
// With a wal, TruncateEmpty cuts wal-meta.db (the term, the vote and the
// segment list) to 0 bytes, TruncateHalf the newest segment to half.
func truncateLog(dir string, variant int) (string, error) {
	path := filepath.Join(dir, raftDB)
	if isWAL(dir) {
		path = filepath.Join(dir, walDir, walMeta)
		if variant == TruncateHalf {
			segs, err := filepath.Glob(filepath.Join(dir, walDir, "*.wal"))
			if err != nil || len(segs) == 0 {
				return "", fmt.Errorf("no wal segment in %s (%v)", filepath.Join(dir, walDir), err)
			}
			path = segs[len(segs)-1] // names sort by base index
		}
	}
	rel, _ := filepath.Rel(dir, path)
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	size := int64(0)
	if variant == TruncateHalf {
		size = fi.Size() / 2
	}
	if err := os.Truncate(path, size); err != nil {
		return "", err
	}
	return fmt.Sprintf("truncated %s from %d to %d bytes", rel, fi.Size(), size), nil
}

// isWAL tells whether dir keeps its log with --log-store wal.
func isWAL(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, walDir))
	return err == nil
}

// errNotApplicable means a corruption has nothing to damage in this data
// dir (no snapshot yet).
var errNotApplicable = errors.New("does not apply")

// corrupt damages one file of dir the way variant (a Corruption) says,
// or, when that one does not apply, the next that does.
func corrupt(dir string, variant int) (string, error) {
	kinds := len(variantNames[Corrupt])
	for k := 0; k < kinds; k++ {
		var what string
		var err error
		switch (variant + k) % kinds {
		case ZeroPage: // raft.db's, or with a wal the bbolt file wal-meta.db's
			file := raftDB
			if isWAL(dir) {
				file = filepath.Join(walDir, walMeta)
			}
			what, err = zeroMiddlePage(dir, file)
		case FlipByte:
			what, err = flipNewestSnapshot(dir)
		case RemoveSnaps:
			what, err = removeSnapshots(dir)
		}
		if !errors.Is(err, errNotApplicable) {
			return what, err
		}
	}
	return "", fmt.Errorf("corrupt %s: no corruption applies", dir)
}

// zeroMiddlePage overwrites with zeros the 4 KiB page-aligned block in the
// middle of a file, past bolt's two meta pages.
func zeroMiddlePage(dir, file string) (string, error) {
	path := filepath.Join(dir, file)
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	off := fi.Size() / 2 / pageSize * pageSize
	if off < 2*pageSize || off+pageSize > fi.Size() {
		return "", fmt.Errorf("zero a page of %s (%d bytes): %w", path, fi.Size(), errNotApplicable)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	_, err = f.WriteAt(make([]byte, pageSize), off)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("zeroed bytes %d-%d (page %d of %d) of %s", off, off+pageSize-1, off/pageSize, fi.Size()/pageSize, file), nil
}

// flipNewestSnapshot inverts the byte in the middle of the newest
// snapshot's state.bin.
func flipNewestSnapshot(dir string) (string, error) {
	name, err := newestSnapshot(dir)
	if err != nil {
		return "", err
	}
	rel := filepath.Join(snapsDir, name, stateFile)
	path := filepath.Join(dir, rel)
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if len(b) == 0 {
		return "", fmt.Errorf("flip a byte of an empty %s: %w", rel, errNotApplicable)
	}
	off := len(b) / 2
	b[off] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", err
	}
	return fmt.Sprintf("flipped byte %d of %d of %s", off, len(b), rel), nil
}

// removeSnapshots deletes the snapshots directory.
func removeSnapshots(dir string) (string, error) {
	name, err := newestSnapshot(dir)
	if err != nil {
		return "", err
	}
	if err := os.RemoveAll(filepath.Join(dir, snapsDir)); err != nil {
		return "", err
	}
	return fmt.Sprintf("removed %s/ (the newest was %s)", snapsDir, name), nil
}

// newestSnapshot returns the name of the snapshot of dir with the highest
// term, index and time, skipping those still being written (".tmp").
func newestSnapshot(dir string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, snapsDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var best string
	var bestKey [3]uint64
	for _, e := range entries {
		key, ok := snapshotKey(e.Name())
		if !e.IsDir() || !ok {
			continue
		}
		if best == "" || key[0] > bestKey[0] || key[0] == bestKey[0] && (key[1] > bestKey[1] || key[1] == bestKey[1] && key[2] > bestKey[2]) {
			best, bestKey = e.Name(), key
		}
	}
	if best == "" {
		return "", fmt.Errorf("no snapshot in %s: %w", filepath.Join(dir, snapsDir), errNotApplicable)
	}
	return best, nil
}

// snapshotKey parses a snapshot's directory name, <term>-<index>-<ms>.
func snapshotKey(name string) (key [3]uint64, ok bool) {
	parts := strings.Split(name, "-")
	if len(parts) != 3 {
		return key, false
	}
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return key, false
		}
		key[i] = v
	}
	return key, true
}
