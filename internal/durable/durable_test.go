package durable

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	require.NoError(t, WriteFile(path, []byte("one"), 0o600))
	require.NoError(t, WriteFile(path, []byte("two"), 0o644))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "two", string(b))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "the new file's mode")
	assertNoTemp(t, dir)

	// A symlink is followed: the file it names is replaced, the link kept.
	real := filepath.Join(dir, "real")
	require.NoError(t, os.WriteFile(real, []byte("old"), 0o600))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(real, link))
	require.NoError(t, WriteFile(link, []byte("through the link"), 0o600))
	b, err = os.ReadFile(real)
	require.NoError(t, err)
	assert.Equal(t, "through the link", string(b))
	fi, err = os.Lstat(link)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeSymlink, "the link stays a link")

	// A file that is no regular file is written in place.
	w, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	w.Close()
	require.NoError(t, WriteFile(os.DevNull, []byte("discarded"), 0o600), "/dev/null is written, not replaced")
	fi, err = os.Stat(os.DevNull)
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&os.ModeDevice, "/dev/null stays a device")

	require.NoError(t, WriteFile(path, []byte("key"), 0o600))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "key", string(b))
	fi, err = os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "a key is never readable by others")
}

// assertNoTemp checks that no temp file of WriteFile is left in dir.
func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	left, err := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temp file is left")
}

func TestWriteFileFails(t *testing.T) {
	dir := t.TempDir()
	// The target is a directory: the rename fails, the target is
	// untouched and the temp file removed.
	target := filepath.Join(dir, "d")
	require.NoError(t, os.Mkdir(target, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(target, "inside"), []byte("x"), 0o600))
	require.Error(t, WriteFile(target, []byte("data"), 0o600))
	assertNoTemp(t, dir)
	assert.FileExists(t, filepath.Join(target, "inside"))
	// No directory to write in.
	err := WriteFile(filepath.Join(dir, "missing", "f"), []byte("data"), 0o600)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestMkdirAll(t *testing.T) {
	dir := t.TempDir()
	deep := filepath.Join(dir, "a", "b", "c")
	require.NoError(t, MkdirAll(deep, 0o700))
	for _, d := range []string{filepath.Join(dir, "a"), filepath.Join(dir, "a", "b"), deep} {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		assert.True(t, fi.IsDir(), d)
		assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), d)
	}
	// An existing directory keeps its mode.
	require.NoError(t, os.Chmod(deep, 0o750))
	require.NoError(t, MkdirAll(deep, 0o700))
	fi, err := os.Stat(deep)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o750), fi.Mode().Perm())
	// A file in the way is named.
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	err = MkdirAll(filepath.Join(file, "sub"), 0o700)
	require.Error(t, err)
	assert.Contains(t, err.Error(), file)
	err = MkdirAll(file, 0o700)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a directory")
}

func TestRemove(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "marker")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	require.NoError(t, Remove(path))
	assert.NoFileExists(t, path)
	require.NoError(t, Remove(path), "a missing file is no error")
	require.NoError(t, os.Mkdir(path, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(path, "x"), nil, 0o600))
	assert.Error(t, Remove(path), "a directory that is not empty is not removed")
}
