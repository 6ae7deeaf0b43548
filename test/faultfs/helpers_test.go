package faultfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// mount mounts a fresh file system for one test.
func mount(t *testing.T, opts ...Option) *FS {
	t.Helper()
	dir := t.TempDir()
	return MountT(t, filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"), opts...)
}

// put creates or truncates the file rel and writes data, without any
// fsync.
func put(t *testing.T, f *FS, rel, data string) {
	t.Helper()
	require.NoError(t, os.WriteFile(f.Path(rel), []byte(data), 0o644))
}

// writeAt writes data at off into the existing file rel, without fsync.
func writeAt(t *testing.T, f *FS, rel string, off int64, data string) {
	t.Helper()
	fh, err := os.OpenFile(f.Path(rel), os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fh.WriteAt([]byte(data), off)
	require.NoError(t, err)
	require.NoError(t, fh.Close())
}

// fsync fsyncs the file or directory rel ("" is the root).
func fsync(t *testing.T, f *FS, rel string) {
	t.Helper()
	fh, err := os.Open(f.Path(rel))
	require.NoError(t, err)
	require.NoError(t, fh.Sync())
	require.NoError(t, fh.Close())
}

// durable writes rel (whose parent directory exists and is durable) and
// makes it and its name durable.
func durable(t *testing.T, f *FS, rel, data string) {
	t.Helper()
	put(t, f, rel, data)
	fsync(t, f, rel)
	fsync(t, f, filepath.Dir(rel))
}

// durableDir makes directory rel and makes its name durable.
func durableDir(t *testing.T, f *FS, rel string) {
	t.Helper()
	require.NoError(t, os.Mkdir(f.Path(rel), 0o755))
	fsync(t, f, filepath.Dir(rel))
}

// content reads rel through the mount; ok is false if it does not exist.
func content(t *testing.T, f *FS, rel string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(f.Path(rel))
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	require.NoError(t, err)
	return string(b), true
}

// exists reports whether rel exists through the mount.
func exists(t *testing.T, f *FS, rel string) bool {
	t.Helper()
	_, err := os.Lstat(f.Path(rel))
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	require.NoError(t, err)
	return true
}

// crash crashes f and checks that the backing directory then holds what
// the mount shows.
func crash(t *testing.T, f *FS) {
	t.Helper()
	require.NoError(t, f.Crash())
	viaMount, err := readTree(f.Mountpoint())
	require.NoError(t, err)
	inBacking, err := readTree(f.Backing())
	require.NoError(t, err)
	require.Equal(t, viaMount, inBacking, "backing dir after crash")
}
