package storage

import (
	"io/fs"
	"os"
	"path/filepath"
)

// FileSize is the size of the file at path, 0 if it cannot be read.
func FileSize(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return uint64(fi.Size())
}

// TreeSize is the total size of the regular files under dir. Files that
// vanish during the walk (a snapshot being replaced) are skipped.
func TreeSize(dir string) uint64 {
	var total uint64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		if fi, err := e.Info(); err == nil {
			total += uint64(fi.Size())
		}
		return nil
	})
	return total
}
