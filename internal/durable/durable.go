// Package durable writes files and directories so that they survive a
// power cut once a call returns.
//
// The model it writes for is the strict POSIX one: a power cut loses every
// byte written to a file since that file's last fsync, and every directory
// entry (create, rename, link, unlink, mkdir) made since the last fsync of
// that directory. ext4's journal is usually kinder; nothing here relies on
// it. So:
//
//   - WriteFile writes a temp file beside the target, fsyncs it, renames it
//     over the target and fsyncs the directory: after a cut, the target
//     holds either its old content or the new, never a mix or nothing.
//   - MkdirAll fsyncs the parent of every directory it creates.
//   - Remove fsyncs the directory after the unlink: a marker removed does
//     not come back.
package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// TempSuffix ends the name of the temp file WriteFile writes beside its
// target. A cut can leave one behind; its target is untouched then.
const TempSuffix = ".tmp"

// WriteFile writes data to path with mode perm, durably and atomically:
// when it returns nil, path holds data across a power cut; before, path
// holds what it held (or is absent). On an error the temp file is removed.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	tmp := path + TempSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil { // an old temp file keeps its mode
		f.Close()
		return err
	}
	if _, err = f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err = f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs the directory dir, so that the entries in it survive a
// power cut.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// MkdirAll creates dir and every missing parent, with mode perm, and
// fsyncs the parent of each directory it creates. An existing dir is left
// as it is (its mode too), and nothing is synced.
func MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return &os.PathError{Op: "mkdir", Path: dir, Err: errors.New("exists and is not a directory")}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		if errors.Is(err, os.ErrExist) { // made meanwhile by another process
			return nil
		}
		return err
	}
	return SyncDir(parent)
}

// Remove removes path, if there, and fsyncs its directory so that the
// removal survives a power cut. A missing path is no error.
func Remove(path string) error {
	switch err := os.Remove(path); {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	return SyncDir(filepath.Dir(path))
}
