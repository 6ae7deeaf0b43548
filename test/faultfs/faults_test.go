package faultfs

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	stillBlocked = 200 * time.Millisecond // "did not complete while frozen"
	bounded      = 10 * time.Second       // "completed after thaw"
)

// inBackground runs fn on a goroutine; the channel yields its error.
func inBackground(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

// waitBlocked waits (bounded) until n requests are held by Freeze.
func waitBlocked(t *testing.T, f *FS, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return f.Waiting() >= n }, bounded, time.Millisecond,
		"requests did not reach the frozen file system")
}

// TestFreezeBlocksUntilThaw: while frozen, reads, writes and namespace
// operations block; after Thaw they complete.
func TestFreezeBlocksUntilThaw(t *testing.T) {
	f := mount(t)
	durable(t, f, "f", "data")
	fh, err := os.OpenFile(f.Path("f"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer fh.Close()

	f.Freeze()
	read := inBackground(func() error { _, err := os.ReadFile(f.Path("f")); return err })
	write := inBackground(func() error { _, err := fh.WriteAt([]byte("x"), 0); return err })
	mkdir := inBackground(func() error { return os.Mkdir(f.Path("d"), 0o755) })
	waitBlocked(t, f, 3)
	select {
	case err := <-read:
		t.Fatalf("read completed while frozen: %v", err)
	case err := <-write:
		t.Fatalf("write completed while frozen: %v", err)
	case err := <-mkdir:
		t.Fatalf("mkdir completed while frozen: %v", err)
	case <-time.After(stillBlocked):
	}
	f.Thaw()
	for name, ch := range map[string]<-chan error{"read": read, "write": write, "mkdir": mkdir} {
		select {
		case err := <-ch:
			assert.NoError(t, err, name)
		case <-time.After(bounded):
			t.Fatalf("%s did not complete after thaw", name)
		}
	}
	wantFile("f", "xata")(t, f)
}

// TestFreezeThenClose: Close works while frozen (it thaws first).
func TestFreezeThenClose(t *testing.T) {
	f := mount(t)
	durable(t, f, "f", "data")
	f.Freeze()
	read := inBackground(func() error { _, err := os.ReadFile(f.Path("f")); return err })
	waitBlocked(t, f, 1)
	closed := inBackground(f.Close)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(bounded):
		t.Fatal("Close hung while frozen")
	}
	select {
	case <-read:
	case <-time.After(bounded):
		t.Fatal("the frozen read never returned")
	}
}

// TestFreezeThenCrash: a write stalled by the freeze is lost in the crash
// (it fails); the durable state is served afterwards.
func TestFreezeThenCrash(t *testing.T) {
	f := mount(t)
	durable(t, f, "f", "data")
	f.Freeze()
	write := inBackground(func() error { return os.WriteFile(f.Path("f"), []byte("new"), 0o644) })
	waitBlocked(t, f, 1)
	require.NoError(t, f.Crash())
	select {
	case err := <-write:
		assert.Error(t, err, "a write stalled across the crash must fail")
	case <-time.After(bounded):
		t.Fatal("the frozen write never returned")
	}
	wantFile("f", "data")(t, f)
}

// TestFreezeKillProcess: a process stalled on the frozen file system can
// still be killed (the kernel's interrupt is answered EINTR).
func TestFreezeKillProcess(t *testing.T) {
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat binary")
	}
	f := mount(t)
	durable(t, f, "f", "data")
	f.Freeze()
	cmd := exec.Command(cat, f.Path("f"))
	require.NoError(t, cmd.Start())
	waitBlocked(t, f, 1)
	require.NoError(t, cmd.Process.Kill())
	waited := inBackground(cmd.Wait)
	select {
	case <-waited:
	case <-time.After(bounded):
		t.Fatal("killed process did not die while frozen")
	}
	f.Thaw()
}

// TestFailFrom: the n-th mutating operation after FailFrom(n) and
// everything after it fail with EIO; the ones before succeed; Crash
// brings back the durable state as of just before the cut.
func TestFailFrom(t *testing.T) {
	f := mount(t, WithLog())
	durable(t, f, "f", "v1")
	base := f.Ops()
	f.FailFrom(3)
	fh, err := os.OpenFile(f.Path("tmp"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644) // 1: create
	require.NoError(t, err)
	_, err = fh.Write([]byte("v2")) // 2: write
	require.NoError(t, err)
	assert.ErrorIs(t, fh.Sync(), syscall.EIO) // 3: fsync, the cut
	_ = fh.Close()
	assert.True(t, f.Cut())
	assert.ErrorIs(t, os.Mkdir(f.Path("d"), 0o755), syscall.EIO, "mutating op after the cut")
	_, err = os.ReadFile(f.Path("f"))
	assert.ErrorIs(t, err, syscall.EIO, "reads fail after the cut too")
	assert.Equal(t, base+3, f.Ops(), "ops after the cut are refused before they are counted")

	var kinds []OpKind
	for _, op := range f.Log() {
		if op.Seq > base {
			kinds = append(kinds, op.Kind)
			assert.Equal(t, op.Seq == base+3, op.Err == syscall.EIO, "%v", op)
		}
	}
	assert.Equal(t, []OpKind{OpCreate, OpWrite, OpFsync}, kinds)

	require.NoError(t, f.Crash())
	assert.False(t, f.Cut())
	wantFile("f", "v1")(t, f)
	wantGone("tmp")(t, f)
	require.NoError(t, os.Mkdir(f.Path("d"), 0o755), "works again after Crash")
}

// TestFailFromEveryPoint cuts a write-tmp/fsync/rename/fsync-dir update at
// each of its operations in turn: the ops before the cut succeed, the cut
// one fails with EIO, and after the crash the file holds the old or the
// new content, never anything else.
func TestFailFromEveryPoint(t *testing.T) {
	update := func(f *FS) error {
		fh, err := os.OpenFile(f.Path("tmp"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer fh.Close()
		if _, err := fh.Write([]byte("new")); err != nil {
			return err
		}
		if err := fh.Sync(); err != nil {
			return err
		}
		if err := os.Rename(f.Path("tmp"), f.Path("f")); err != nil {
			return err
		}
		d, err := os.Open(f.Path())
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	}
	const steps = 5 // create, write, fsync, rename, fsyncdir
	for n := 1; n <= steps+1; n++ {
		f := mount(t, WithLog())
		durable(t, f, "f", "old")
		base := f.Ops()
		f.FailFrom(n)
		err := update(f)
		if n <= steps {
			require.ErrorIs(t, err, syscall.EIO, "cut at %d", n)
		} else {
			require.NoError(t, err)
		}
		for _, op := range f.Log() {
			if op.Seq > base {
				assert.Equal(t, op.Seq-base == int64(n), op.Err != 0, "cut at %d: %v", n, op)
			}
		}
		require.NoError(t, f.Crash())
		got, _ := content(t, f, "f")
		want := map[bool]string{true: "new", false: "old"}[n > steps]
		assert.Equal(t, want, got, "cut at %d", n)
		assert.False(t, exists(t, f, "tmp"), "cut at %d", n)
	}
}

// TestOpLog: the log lists mutating operations with paths and ranges.
func TestOpLog(t *testing.T) {
	f := mount(t)
	put(t, f, "before-logging", "x")
	f.SetLogging(true)
	require.NoError(t, os.Mkdir(f.Path("d"), 0o755))
	put(t, f, "d/a", "hello")
	writeAt(t, f, "d/a", 100, "xy")
	require.NoError(t, os.Truncate(f.Path("d/a"), 50))
	require.NoError(t, os.Rename(f.Path("d/a"), f.Path("b")))
	fsync(t, f, "b")
	fsync(t, f, "d")
	require.NoError(t, os.Remove(f.Path("b")))
	f.SetLogging(false)
	require.NoError(t, os.Remove(f.Path("before-logging")))

	var got []Op
	for _, op := range f.Log() {
		op.Seq = 0
		got = append(got, op)
	}
	assert.Equal(t, []Op{
		{Kind: OpMkdir, Path: "d"},
		{Kind: OpCreate, Path: "d/a"},
		{Kind: OpWrite, Path: "d/a", Off: 0, Len: 5},
		{Kind: OpWrite, Path: "d/a", Off: 100, Len: 2},
		{Kind: OpTruncate, Path: "d/a", Off: 50},
		{Kind: OpRename, Path: "d/a", Path2: "b"},
		{Kind: OpFsync, Path: "b"},
		{Kind: OpFsyncDir, Path: "d"},
		{Kind: OpUnlink, Path: "b"},
	}, got)
	f.ClearLog()
	assert.Empty(t, f.Log())
}

// TestUnmountStale: a mount whose server is gone is detached by
// UnmountStale and by the next Mount.
func TestUnmountStale(t *testing.T) {
	dir := t.TempDir()
	f := MountT(t, dir+"/b", dir+"/m")
	dev, err := faultfsMount(f.Mountpoint())
	require.NoError(t, err)
	require.NotEmpty(t, dev)
	require.NoError(t, UnmountStale(f.Mountpoint()))
	dev, err = faultfsMount(f.Mountpoint())
	require.NoError(t, err)
	assert.Empty(t, dev)
	g := MountT(t, dir+"/b2", dir+"/m")
	durable(t, g, "f", "x")
	wantFile("f", "x")(t, g)
}
