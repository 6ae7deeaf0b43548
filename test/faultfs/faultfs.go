package faultfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// ErrUnavailable is wrapped by every error that says FUSE cannot be used
// here: /dev/fuse is missing or not openable, or we are not root, or the
// kernel refused the mount for lack of privilege.
var ErrUnavailable = errors.New("faultfs: FUSE unavailable")

// ErrClosed is returned by Crash after Close.
var ErrClosed = errors.New("faultfs: closed")

// privName is the reserved entry at the backing root that holds the
// graveyard (unlinked inodes the durable state still names) and the
// staging tree of Crash. It is invisible through the mount and removed by
// Crash and Close.
const privName = ".faultfs"

// Option configures Mount.
type Option func(*config)

type config struct {
	log   bool
	debug bool
}

// WithLog turns the operation log on from the start (see SetLogging).
func WithLog() Option { return func(c *config) { c.log = true } }

// WithDebug makes go-fuse print every FUSE request and reply to stderr.
func WithDebug() Option { return func(c *config) { c.debug = true } }

// FS is a mounted fault file system. All methods are safe for concurrent
// use.
type FS struct {
	backing    string
	mountpoint string
	cfg        config

	life   sync.Mutex // serialises Crash and Close
	closed bool
	srv    *fuse.Server
	gen    *mountGen // the current mount; a new one per Crash

	frz     sync.Mutex
	thawCh  chan struct{} // non-nil while frozen; closed by Thaw
	waiting atomic.Int64  // operations blocked by Freeze right now

	ops     atomic.Int64 // mutating operations admitted since Mount
	cutAt   atomic.Int64 // FailFrom target (an ops value); 0 = none
	tripped atomic.Bool  // the cut happened: everything fails until Crash

	logOn atomic.Bool
	logMu sync.Mutex
	oplog []Op

	mu sync.Mutex // guards m
	m  model
}

// Available reports whether Mount can work here: it returns nil, or an
// error wrapping ErrUnavailable that says why not.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root (euid %d)", ErrUnavailable, os.Geteuid())
	}
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: open /dev/fuse: %v", ErrUnavailable, err)
	}
	_ = syscall.Close(fd)
	return nil
}

// Mount serves backing at mountpoint (both are created if missing; they
// must not contain each other). A stale faultfs mount left at mountpoint by
// a dead test is lazily unmounted first. What backing holds at Mount is
// the initial durable state.
func Mount(backing, mountpoint string, opts ...Option) (*FS, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	f := &FS{}
	for _, o := range opts {
		o(&f.cfg)
	}
	var err error
	if f.backing, err = absDir(backing); err != nil {
		return nil, err
	}
	if f.mountpoint, err = absDir(mountpoint); err != nil {
		return nil, err
	}
	if within(f.backing, f.mountpoint) || within(f.mountpoint, f.backing) {
		return nil, fmt.Errorf("faultfs: backing %s and mountpoint %s overlap", f.backing, f.mountpoint)
	}
	if err := UnmountStale(f.mountpoint); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(filepath.Join(f.backing, privName)); err != nil {
		return nil, fmt.Errorf("faultfs: clear stale state: %w", err)
	}
	f.logOn.Store(f.cfg.log)
	f.m.reset()
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// MountT mounts for a test: it skips the test when FUSE is unavailable,
// fails it on any other error, and registers Close with t.Cleanup so no
// mount outlives the test. Call Mount instead to fail when unavailable.
func MountT(t testing.TB, backing, mountpoint string, opts ...Option) *FS {
	t.Helper()
	f, err := Mount(backing, mountpoint, opts...)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("faultfs: %v", err)
	}
	if err != nil {
		t.Fatalf("faultfs: mount: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("faultfs: close: %v", err)
		}
	})
	return f
}

func absDir(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("faultfs: %w", err)
	}
	if err := os.MkdirAll(a, 0o755); err != nil {
		return "", fmt.Errorf("faultfs: %w", err)
	}
	if r, err := filepath.EvalSymlinks(a); err == nil {
		a = r
	}
	return a, nil
}

func within(dir, p string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// Backing returns the backing directory (absolute).
func (f *FS) Backing() string { return f.backing }

// Mountpoint returns the mount point (absolute).
func (f *FS) Mountpoint() string { return f.mountpoint }

// Path joins elem to the mount point.
func (f *FS) Path(elem ...string) string {
	return filepath.Join(append([]string{f.mountpoint}, elem...)...)
}

// Freeze makes every FUSE request that arrives from now on, and every one
// already waiting, block until Thaw (a stalled disk). Reads block too. A
// blocked request of a process that gets a fatal signal is answered EINTR,
// so frozen processes can still be killed. Freeze never holds the model
// lock while blocking.
func (f *FS) Freeze() {
	f.frz.Lock()
	defer f.frz.Unlock()
	if f.thawCh == nil {
		f.thawCh = make(chan struct{})
	}
}

// Thaw releases everything Freeze blocked. It is a no-op when not frozen.
func (f *FS) Thaw() {
	f.frz.Lock()
	defer f.frz.Unlock()
	if f.thawCh != nil {
		close(f.thawCh)
		f.thawCh = nil
	}
}

// Waiting returns how many FUSE requests are blocked by Freeze right now.
func (f *FS) Waiting() int { return int(f.waiting.Load()) }

// waitThaw blocks while frozen; it returns EINTR if the kernel interrupts
// the request.
func (f *FS) waitThaw(cancel <-chan struct{}) fuse.Status {
	f.frz.Lock()
	ch := f.thawCh
	f.frz.Unlock()
	if ch == nil {
		return fuse.OK
	}
	f.waiting.Add(1)
	defer f.waiting.Add(-1)
	select {
	case <-ch:
		return fuse.OK
	case <-cancel:
		return fuse.EINTR
	}
}

// FailFrom arms a cut (power lost at an exact point): counting mutating
// operations from this call, the n-th one and every operation after it,
// mutating or not, fail with EIO without effect, until Crash. n <= 0
// disarms a cut that has not happened yet.
func (f *FS) FailFrom(n int) {
	if n <= 0 {
		f.cutAt.Store(0)
		return
	}
	f.cutAt.Store(f.ops.Load() + int64(n))
}

// Cut reports whether a FailFrom cut has happened (and Crash not yet).
func (f *FS) Cut() bool { return f.tripped.Load() }

// Ops returns the number of mutating operations admitted since Mount
// (failed ones included, the ones rejected after a cut excluded). It is
// never reset.
func (f *FS) Ops() int64 { return f.ops.Load() }

// begin admits one mutating operation: it counts it and applies the cut.
func (f *FS) begin() (int64, syscall.Errno) {
	seq := f.ops.Add(1)
	if cut := f.cutAt.Load(); cut > 0 && seq >= cut {
		f.tripped.Store(true)
		return seq, syscall.EIO
	}
	return seq, 0
}

// do runs one mutating operation: admission, then fn, then the log.
func (f *FS) do(op Op, fn func() syscall.Errno) syscall.Errno {
	seq, errno := f.begin()
	if errno == 0 {
		errno = fn()
	}
	op.Seq, op.Err = seq, errno
	f.record(op)
	return errno
}

// Close thaws, unmounts and removes the graveyard: a clean shutdown. The
// backing directory keeps everything written, durable or not. If files
// are still open the mount is detached lazily and the old connection
// answers EIO to everything. Close is idempotent.
func (f *FS) Close() error {
	f.life.Lock()
	defer f.life.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.Thaw()
	err := f.unmount(false)
	if rerr := os.RemoveAll(filepath.Join(f.backing, privName)); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// Crash cuts the power: it fails whatever is blocked or in flight with EIO,
// unmounts (lazily, if files are still open: their descriptors then get
// EIO forever), rewrites the backing directory to exactly the durable
// state, and mounts that at the same mount point again with a fresh kernel
// cache. It clears Freeze and FailFrom. Kill the processes using the mount
// first. An error means the durable state could not be rebuilt exactly;
// the file system is mounted again unless the mount itself failed.
func (f *FS) Crash() error {
	f.life.Lock()
	defer f.life.Unlock()
	if f.closed {
		return ErrClosed
	}
	uerr := f.unmount(true)
	f.mu.Lock()
	rerr := f.restore()
	f.m.reset()
	f.mu.Unlock()
	f.cutAt.Store(0)
	f.tripped.Store(false)
	f.recordCrash()
	if err := f.mount(); err != nil {
		f.closed = true
		return errors.Join(uerr, rerr, err)
	}
	return errors.Join(uerr, rerr)
}
