package faultfs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

const fsName = "faultfs"

// cacheTimeout is the kernel's entry and attribute cache lifetime. Every
// change goes through the mount, so caching is coherent; Crash remounts,
// which drops the caches.
var cacheTimeout = time.Second

// mountGen is one mount of the file system. Crash retires it (dead: every
// request it still gets fails with EIO) and makes a new one.
type mountGen struct {
	fsys     *FS
	dead     atomic.Bool
	inflight sync.RWMutex // held shared by every request being served
}

// mount serves f.backing at f.mountpoint with a new mountGen.
func (f *FS) mount() error {
	var st syscall.Stat_t
	if err := syscall.Stat(f.backing, &st); err != nil {
		return fmt.Errorf("faultfs: %w", err)
	}
	root := &node{fsys: f, ino: st.Ino}
	opts := &fs.Options{
		EntryTimeout:   &cacheTimeout,
		AttrTimeout:    &cacheTimeout,
		RootStableAttr: &fs.StableAttr{Ino: st.Ino, Gen: 1},
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            fsName,
			Name:              fsName,
			DisableXAttrs:     true,
			Debug:             f.cfg.debug,
		},
	}
	gen := &mountGen{fsys: f}
	raw := &gatedFS{RawFileSystem: fs.NewNodeFS(root, opts), g: gen}
	srv, err := fuse.NewServer(raw, f.mountpoint, &opts.MountOptions)
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENODEV) {
			return fmt.Errorf("%w: mount %s: %v", ErrUnavailable, f.mountpoint, err)
		}
		return fmt.Errorf("faultfs: mount %s: %w", f.mountpoint, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = syscall.Unmount(f.mountpoint, syscall.MNT_DETACH)
		return fmt.Errorf("faultfs: mount %s: %w", f.mountpoint, err)
	}
	f.srv, f.gen = srv, gen
	return nil
}

// retire makes the current mount answer EIO to everything from now on and
// waits until no request is being served.
func (g *mountGen) retire() {
	g.dead.Store(true)
	g.inflight.Lock()
	g.inflight.Unlock() //nolint:staticcheck // an empty critical section drains the readers
}

// unmount takes the current mount down. dirty (Crash) retires it before
// unmounting, so nothing more reaches the backing directory; otherwise
// (Close) requests still work during the unmount. If the kernel says the
// mount is busy, it is detached lazily and retired.
func (f *FS) unmount(dirty bool) error {
	if f.srv == nil {
		return nil
	}
	g, srv := f.gen, f.srv
	f.srv, f.gen = nil, nil
	if dirty {
		g.retire()
	}
	f.Thaw()
	var err error
	delay := time.Millisecond
	for try := 0; try < 8; try++ {
		if err = syscall.Unmount(f.mountpoint, 0); err == nil || err != syscall.EBUSY {
			break
		}
		time.Sleep(delay)
		delay *= 2
	}
	if err == nil {
		srv.Wait()
		return nil
	}
	if err == syscall.EINVAL { // not mounted (any more): someone detached it
		g.retire()
		return nil
	}
	g.retire()
	if derr := syscall.Unmount(f.mountpoint, syscall.MNT_DETACH); derr != nil {
		return fmt.Errorf("faultfs: unmount %s: %v; detach: %w", f.mountpoint, err, derr)
	}
	return nil
}

// UnmountStale removes a faultfs mount left at mountpoint (by a test that
// died before Close): it aborts the mount's FUSE connection, which frees
// any process stuck waiting for a server that is gone, and detaches it
// lazily. It does nothing if no faultfs mount is there. The abort needs
// fusectl, which it mounts at /sys/fs/fuse/connections if needed.
func UnmountStale(mountpoint string) error {
	for {
		dev, err := faultfsMount(mountpoint)
		if err != nil || dev == "" {
			return err
		}
		abortConn(dev)
		if err := syscall.Unmount(mountpoint, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("faultfs: detach stale %s: %w", mountpoint, err)
		}
	}
}

// abortConn aborts the FUSE connection of the mount with device dev
// ("0:N"), best effort.
func abortConn(dev string) {
	major, minor, ok := strings.Cut(dev, ":")
	if !ok || major != "0" {
		return
	}
	const ctl = "/sys/fs/fuse/connections"
	abort := ctl + "/" + minor + "/abort"
	if _, err := os.Stat(abort); err != nil {
		_ = syscall.Mount("fusectl", ctl, "fusectl", 0, "")
	}
	_ = os.WriteFile(abort, []byte("1"), 0)
}

// faultfsMount returns the device ("major:minor") of the faultfs mount at
// mountpoint, or "" if /proc/self/mountinfo lists none.
func faultfsMount(mountpoint string) (string, error) {
	fh, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("faultfs: %w", err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts... - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, s := range fields {
			if s == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) {
			continue
		}
		if unescapeMount(fields[4]) == mountpoint && fields[sep+1] == "fuse."+fsName {
			return fields[2], nil
		}
	}
	return "", sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for space etc.).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + (c - '0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
