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
//     holds either its old content or the new, never a mix or nothing. A
//     cut can leave the temp file (".<name>.tmp-*") behind.
//   - MkdirAll fsyncs the parent of every directory it creates.
//   - Remove fsyncs the directory after the unlink: a marker removed does
//     not come back.
package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// WriteFile writes data to path with mode perm, durably and atomically:
// when it returns nil, path holds data across a power cut; before, path
// holds what it held (or is absent). It writes a temp file beside the
// target (created exclusively, named ".<name>.tmp-*"), fsyncs it, renames
// it over the target and fsyncs the directory; on an error the temp file
// is removed. A symlink is followed: the file it names is replaced. A
// target that exists and is no regular file (a pipe, a device such as
// /dev/stdout) is written in place, and fsynced where it can be.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	target := path
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if target, err = filepath.EvalSymlinks(path); err != nil {
			return err
		}
	}
	fi, err := os.Stat(target)
	switch {
	case err == nil && fi.IsDir():
		return &os.PathError{Op: "write", Path: path, Err: errors.New("is a directory")}
	case err == nil && !fi.Mode().IsRegular():
		return writeInPlace(target, data)
	}
	return replace(target, data, perm)
}

// replace writes data to a temp file beside path, fsyncs it, renames it
// over path and fsyncs the directory.
func replace(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// writeInPlace writes data to the existing file at path, which is no
// regular file, and fsyncs it unless it cannot be (a pipe, a terminal).
func writeInPlace(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		f.Close()
		return err
	}
	return f.Close()
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
		if fi, serr := os.Stat(dir); errors.Is(err, os.ErrExist) && serr == nil && fi.IsDir() {
			return nil // made meanwhile by another process
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
