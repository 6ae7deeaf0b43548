package faultfs

import (
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// crashRule is one rule of the crash model (doc.go): before runs on a
// fresh mount, then Crash, then after checks what survived.
type crashRule struct {
	name          string
	before, after func(t *testing.T, f *FS)
}

var crashRules = []crashRule{{
	name: "unsynced write is lost",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "f", "old data")
		writeAt(t, f, "f", 0, "NEW")
	},
	after: wantFile("f", "old data"),
}, {
	name: "synced write is kept",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "f", "old data")
		writeAt(t, f, "f", 0, "NEW")
		fsync(t, f, "f")
	},
	after: wantFile("f", "NEW data"),
}, {
	name: "size extension is lost",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "f", "abc")
		writeAt(t, f, "f", 3, "defgh")
		writeAt(t, f, "f", 9000, "far away")
	},
	after: wantFile("f", "abc"),
}, {
	name: "truncate is undone",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "f", string(make([]byte, 10000))+"tail")
		require.NoError(t, os.Truncate(f.Path("f"), 2))
		writeAt(t, f, "f", 0, "xyz")
	},
	after: wantFile("f", string(make([]byte, 10000))+"tail"),
}, {
	name: "new file without dir fsync is lost",
	before: func(t *testing.T, f *FS) {
		put(t, f, "f", "data")
		fsync(t, f, "f")
	},
	after: wantGone("f"),
}, {
	name: "new file with dir fsync but no file fsync is empty",
	before: func(t *testing.T, f *FS) {
		put(t, f, "f", "data")
		fsync(t, f, "")
	},
	after: wantFile("f", ""),
}, {
	name: "new file with file and dir fsync is kept",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "f", "data")
	},
	after: wantFile("f", "data"),
}, {
	name: "rename tmp to final without dir fsync is undone",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "final", "v1")
		durable(t, f, "tmp", "v2")
		require.NoError(t, os.Rename(f.Path("tmp"), f.Path("final")))
	},
	after: both(wantFile("final", "v1"), wantFile("tmp", "v2")),
}, {
	name: "rename tmp to final with dir fsync is kept",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "final", "v1")
		put(t, f, "tmp", "v2")
		fsync(t, f, "tmp")
		require.NoError(t, os.Rename(f.Path("tmp"), f.Path("final")))
		fsync(t, f, "")
	},
	after: both(wantFile("final", "v2"), wantGone("tmp")),
}, {
	name: "rename across dirs is undone in each dir on its own",
	before: func(t *testing.T, f *FS) {
		durableDir(t, f, "a")
		durableDir(t, f, "b")
		durableDir(t, f, "c")
		durable(t, f, "a/x", "x")
		durable(t, f, "b/y", "y")
		require.NoError(t, os.Rename(f.Path("a/x"), f.Path("c/x")))
		require.NoError(t, os.Rename(f.Path("b/y"), f.Path("c/y")))
		fsync(t, f, "c") // both arrive; a keeps x, b loses y
		fsync(t, f, "b")
	},
	after: both(wantFile("a/x", "x"), wantFile("c/x", "x"), wantGone("b/y"), wantFile("c/y", "y")),
}, {
	name: "rename over an existing file brings the old one back",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "dst", "old")
		durable(t, f, "src", "new")
		require.NoError(t, os.Rename(f.Path("src"), f.Path("dst")))
		put(t, f, "src", "other") // reuse the name too
	},
	after: both(wantFile("dst", "old"), wantFile("src", "new")),
}, {
	name: "unlink without dir fsync is undone with the durable data",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "f", "durable")
		writeAt(t, f, "f", 0, "DIRTY---")
		require.NoError(t, os.Remove(f.Path("f")))
	},
	after: wantFile("f", "durable"),
}, {
	name: "unlink with dir fsync is kept",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "f", "durable")
		require.NoError(t, os.Remove(f.Path("f")))
		fsync(t, f, "")
	},
	after: wantGone("f"),
}, {
	name: "mkdir without parent fsync is lost",
	before: func(t *testing.T, f *FS) {
		require.NoError(t, os.Mkdir(f.Path("d"), 0o755))
		durable(t, f, "d/x", "x")
	},
	after: wantGone("d"),
}, {
	name: "rmdir without parent fsync is undone with its entries",
	before: func(t *testing.T, f *FS) {
		durableDir(t, f, "d")
		durable(t, f, "d/x", "x")
		require.NoError(t, os.Remove(f.Path("d/x")))
		require.NoError(t, os.Remove(f.Path("d")))
	},
	after: wantFile("d/x", "x"),
}, {
	name: "raft snapshot sequence loses the never-fsynced snapshot dir's entries",
	before: func(t *testing.T, f *FS) {
		durableDir(t, f, "snapshots")
		require.NoError(t, os.MkdirAll(f.Path("snapshots/1-2-3.tmp"), 0o755))
		for _, name := range []string{"state.bin", "meta.json"} {
			put(t, f, "snapshots/1-2-3.tmp/"+name, "contents of "+name)
			fsync(t, f, "snapshots/1-2-3.tmp/"+name)
		}
		require.NoError(t, os.Rename(f.Path("snapshots/1-2-3.tmp"), f.Path("snapshots/1-2-3")))
		fsync(t, f, "snapshots")
	},
	after: func(t *testing.T, f *FS) {
		require.True(t, exists(t, f, "snapshots/1-2-3"), "the renamed dir is durable")
		ents, err := os.ReadDir(f.Path("snapshots/1-2-3"))
		require.NoError(t, err)
		assert.Empty(t, ents, "state.bin and meta.json were never made durable in their dir")
	},
}, {
	name: "raft snapshot sequence with the snapshot dir fsynced is kept",
	before: func(t *testing.T, f *FS) {
		durableDir(t, f, "snapshots")
		require.NoError(t, os.MkdirAll(f.Path("snapshots/1-2-3.tmp"), 0o755))
		put(t, f, "snapshots/1-2-3.tmp/state.bin", "state")
		fsync(t, f, "snapshots/1-2-3.tmp/state.bin")
		fsync(t, f, "snapshots/1-2-3.tmp")
		require.NoError(t, os.Rename(f.Path("snapshots/1-2-3.tmp"), f.Path("snapshots/1-2-3")))
		fsync(t, f, "snapshots")
	},
	after: both(wantFile("snapshots/1-2-3/state.bin", "state"), wantGone("snapshots/1-2-3.tmp")),
}, {
	name: "hard link without dir fsync is lost, unlinked original comes back",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "a", "shared")
		require.NoError(t, os.Link(f.Path("a"), f.Path("b")))
		require.NoError(t, os.Remove(f.Path("a")))
	},
	after: both(wantFile("a", "shared"), wantGone("b")),
}, {
	name: "hard link with dir fsync names the same inode",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "a", "shared")
		require.NoError(t, os.Link(f.Path("a"), f.Path("b")))
		fsync(t, f, "")
	},
	after: func(t *testing.T, f *FS) {
		wantFile("b", "shared")(t, f)
		writeAt(t, f, "a", 0, "SH")
		wantFile("b", "SHared")(t, f)
	},
}, {
	name: "symlink follows the dir rule",
	before: func(t *testing.T, f *FS) {
		require.NoError(t, os.Symlink("target-1", f.Path("kept")))
		fsync(t, f, "")
		require.NoError(t, os.Symlink("target-2", f.Path("lost")))
	},
	after: func(t *testing.T, f *FS) {
		target, err := os.Readlink(f.Path("kept"))
		require.NoError(t, err)
		assert.Equal(t, "target-1", target)
		wantGone("lost")(t, f)
	},
}, {
	name: "O_SYNC write is durable at once, with the whole file",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "f", "0123456789")
		writeAt(t, f, "f", 8, "XY")
		fh, err := os.OpenFile(f.Path("f"), os.O_WRONLY|os.O_SYNC, 0)
		require.NoError(t, err)
		_, err = fh.WriteAt([]byte("ab"), 2) // the kernel follows it with FSYNC
		require.NoError(t, err)
		require.NoError(t, fh.Close())
		writeAt(t, f, "f", 0, "lost")
	},
	after: wantFile("f", "01ab4567XY"),
}, {
	name: "fallocate growth is lost, punched hole is undone",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "f", "abcdefgh")
		fh, err := os.OpenFile(f.Path("f"), os.O_RDWR, 0)
		require.NoError(t, err)
		require.NoError(t, unix.Fallocate(int(fh.Fd()), 0, 0, 1<<20))
		require.NoError(t, unix.Fallocate(int(fh.Fd()),
			unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4))
		require.NoError(t, fh.Close())
		got, _ := content(t, f, "f")
		require.Equal(t, 1<<20, len(got))
	},
	after: wantFile("f", "abcdefgh"),
}, {
	name: "data written through an open unlinked file follows its inode",
	before: func(t *testing.T, f *FS) {
		durable(t, f, "f", "one")
		fh, err := os.OpenFile(f.Path("f"), os.O_RDWR, 0)
		require.NoError(t, err)
		require.NoError(t, os.Remove(f.Path("f")))
		_, err = fh.WriteAt([]byte("two"), 0)
		require.NoError(t, err)
		require.NoError(t, fh.Sync())
		require.NoError(t, fh.Close())
	},
	after: wantFile("f", "two"),
}}

// TestCrashRules checks each rule of the crash model on its own, through
// the mount (crash also checks the backing directory shows the same).
func TestCrashRules(t *testing.T) {
	for _, tc := range crashRules {
		t.Run(tc.name, func(t *testing.T) {
			f := mount(t)
			tc.before(t, f)
			crash(t, f)
			tc.after(t, f)
		})
	}
}

func wantFile(rel, data string) func(t *testing.T, f *FS) {
	return func(t *testing.T, f *FS) {
		t.Helper()
		got, ok := content(t, f, rel)
		require.True(t, ok, "%s should exist", rel)
		assert.Equal(t, data, got, rel)
	}
}

func wantGone(rel string) func(t *testing.T, f *FS) {
	return func(t *testing.T, f *FS) {
		t.Helper()
		assert.False(t, exists(t, f, rel), "%s should be gone", rel)
	}
}

func both(checks ...func(t *testing.T, f *FS)) func(t *testing.T, f *FS) {
	return func(t *testing.T, f *FS) {
		t.Helper()
		for _, c := range checks {
			c(t, f)
		}
	}
}

// TestCloseKeepsEverything: Close is a clean shutdown; the backing
// directory keeps data never fsynced and holds nothing of ours.
func TestCloseKeepsEverything(t *testing.T) {
	f := mount(t)
	put(t, f, "f", "never synced")
	require.NoError(t, os.Mkdir(f.Path("d"), 0o755))
	durable(t, f, "g", "synced")
	require.NoError(t, os.Remove(f.Path("g"))) // in the graveyard now
	require.NoError(t, f.Close())
	got, err := readTree(f.Backing())
	require.NoError(t, err)
	assert.Equal(t, map[string]tentry{"f": {Data: "never synced"}, "d": {Dir: true}}, got)
	require.NoError(t, f.Close(), "Close is idempotent")
	assert.ErrorIs(t, f.Crash(), ErrClosed)
}

// TestCrashWithOpenFile: Crash with a file still open forces the unmount;
// the stale descriptor fails from then on and the new mount serves the
// durable state.
func TestCrashWithOpenFile(t *testing.T) {
	f := mount(t)
	durable(t, f, "f", "durable")
	fh, err := os.OpenFile(f.Path("f"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer fh.Close()
	_, err = fh.WriteAt([]byte("DIRTY"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Crash())
	_, err = fh.WriteAt([]byte("late"), 0)
	assert.Error(t, err, "a descriptor from before the crash must not reach the new state")
	wantFile("f", "durable")(t, f)
}

// TestReservedName: the private directory is invisible and cannot be made.
func TestReservedName(t *testing.T) {
	f := mount(t)
	durable(t, f, "f", "x")
	require.NoError(t, os.Remove(f.Path("f"))) // makes .faultfs/grave exist
	assert.False(t, exists(t, f, privName))
	ents, err := os.ReadDir(f.Path())
	require.NoError(t, err)
	assert.Empty(t, ents)
	assert.ErrorIs(t, os.Mkdir(f.Path(privName), 0o755), syscall.EPERM)
}

// TestErrnos: the pass-through keeps POSIX errors (the model checks them
// before acting, so a refused operation changes nothing).
func TestErrnos(t *testing.T) {
	f := mount(t)
	durableDir(t, f, "d")
	durable(t, f, "d/x", "x")
	durable(t, f, "y", "y")
	assert.ErrorIs(t, syscall.Rmdir(f.Path("d")), syscall.ENOTEMPTY)
	assert.ErrorIs(t, syscall.Unlink(f.Path("d")), syscall.EISDIR)
	assert.ErrorIs(t, syscall.Rmdir(f.Path("y")), syscall.ENOTDIR)
	assert.ErrorIs(t, syscall.Rename(f.Path("y"), f.Path("d")), syscall.EISDIR)
	require.NoError(t, os.Mkdir(f.Path("e"), 0o755))
	assert.ErrorIs(t, syscall.Rename(f.Path("e"), f.Path("y")), syscall.ENOTDIR)
	assert.ErrorIs(t, syscall.Rename(f.Path("e"), f.Path("d")), syscall.ENOTEMPTY)
	_, err := os.OpenFile(f.Path("y"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	assert.ErrorIs(t, err, syscall.EEXIST)
	assert.ErrorIs(t, os.Link(f.Path("d"), f.Path("dlink")), syscall.EPERM)
	assert.ErrorIs(t, unix.Renameat2(unix.AT_FDCWD, f.Path("y"), unix.AT_FDCWD, f.Path("e"), unix.RENAME_NOREPLACE), syscall.EEXIST)
	require.NoError(t, unix.Renameat2(unix.AT_FDCWD, f.Path("y"), unix.AT_FDCWD, f.Path("d/x"), unix.RENAME_EXCHANGE))
	wantFile("y", "x")(t, f)
	crash(t, f) // the exchange was never fsynced: undone on both sides
	wantFile("y", "y")(t, f)
	wantFile("d/x", "x")(t, f)
	wantGone("e")(t, f)
}
