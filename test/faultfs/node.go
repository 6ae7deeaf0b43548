package faultfs

import (
	"context"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is one inode of the mounted tree; it reaches its backing file by
// its current path. Namespace changes are in namespace.go.
type node struct {
	fs.Inode
	fsys *FS
	ino  uint64 // backing inode number
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
)

// relPath is the node's path relative to the root; for an orphan (an
// unlinked open file) it names no existing file.
func (n *node) relPath() string { return n.Path(n.Root()) }
func (n *node) path() string    { return filepath.Join(n.fsys.backing, n.relPath()) }
func (n *node) isRoot() bool    { return &n.Inode == n.Root() }
func (n *node) child(name string) string {
	return filepath.Join(n.path(), name)
}

func (n *node) childRel(name string) string {
	if !n.fsys.logging() {
		return ""
	}
	return filepath.Join(n.relPath(), name)
}

// hidden is true for the reserved private directory at the root.
func (n *node) hidden(name string) bool { return name == privName && n.isRoot() }

// newChild makes (or finds) the go-fuse inode for a backing file.
func (n *node) newChild(ctx context.Context, st *syscall.Stat_t, gen uint64) *fs.Inode {
	return n.NewInode(ctx, &node{fsys: n.fsys, ino: st.Ino},
		fs.StableAttr{Mode: st.Mode & syscall.S_IFMT, Ino: st.Ino, Gen: gen})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.ENOENT
	}
	var st syscall.Stat_t
	gen, err := statGen(unix.AT_FDCWD, n.child(name), unix.AT_SYMLINK_NOFOLLOW, &st)
	if err != nil {
		return nil, errno(err)
	}
	out.Attr.FromStat(&st)
	return n.newChild(ctx, &st, gen), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*handle); ok {
		return h.Getattr(ctx, out)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(n.path(), &st); err != nil {
		return errno(err)
	}
	out.FromStat(&st)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	h, _ := f.(*handle)
	op := Op{Kind: OpSetattr}
	if sz, ok := in.GetSize(); ok {
		op.Kind, op.Off = OpTruncate, int64(sz)
	}
	if n.fsys.logging() {
		op.Path = n.relPath()
	}
	if e := n.fsys.do(op, func() syscall.Errno { return n.setattr(h, in) }); e != 0 {
		return e
	}
	return n.Getattr(ctx, f, out)
}

func (n *node) setattr(h *handle, in *fuse.SetAttrIn) syscall.Errno {
	p := n.path()
	if m, ok := in.GetMode(); ok {
		if err := chmod(h, p, m); err != nil {
			return errno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		if err := chown(h, p, u, g); err != nil {
			return errno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		if e := n.truncate(h, p, int64(sz)); e != 0 {
			return e
		}
	}
	mt, mok := in.GetMTime()
	at, aok := in.GetATime()
	if !mok && !aok {
		return 0
	}
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	if aok {
		ts[0] = unix.NsecToTimespec(at.UnixNano())
	}
	if mok {
		ts[1] = unix.NsecToTimespec(mt.UnixNano())
	}
	if h != nil {
		return errno(unix.UtimesNanoAt(unix.AT_FDCWD, fdPath(h.fd), ts, 0))
	}
	return errno(unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
}

func (n *node) truncate(h *handle, p string, size int64) syscall.Errno {
	if h != nil {
		return n.fsys.truncate(n.ino, h.fd, size)
	}
	fd, err := syscall.Open(p, syscall.O_RDWR|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return errno(err)
	}
	defer syscall.Close(fd)
	return n.fsys.truncate(n.ino, fd, size)
}

func chmod(h *handle, p string, m uint32) error {
	if h != nil {
		return syscall.Fchmod(h.fd, m&07777)
	}
	return syscall.Chmod(p, m&07777)
}

func chown(h *handle, p string, u, g int) error {
	if h != nil {
		return syscall.Fchown(h.fd, u, g)
	}
	return syscall.Lchown(p, u, g)
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// openFlags are the open(2) flags passed on to the backing file: the
// kernel has dealt with creation, truncation (it sends SETATTR), append
// (it sends offsets at end of file) and direct I/O; the real disk's
// O_SYNC is not modelled.
func openFlags(flags uint32) int {
	drop := uint32(syscall.O_APPEND | syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC |
		syscall.O_NOCTTY | syscall.O_DIRECT | syscall.O_SYNC | syscall.O_DSYNC | fuse.FMODE_EXEC)
	return int(flags&^drop) | syscall.O_CLOEXEC | syscall.O_NOFOLLOW
}

// openRW opens the backing file read-write if it can (pre-images must be
// readable, writes writable), else as asked.
func openRW(p string, fl int, mode uint32) (int, error) {
	fd, err := syscall.Open(p, fl&^syscall.O_ACCMODE|syscall.O_RDWR, mode)
	if err == nil || fl&syscall.O_ACCMODE == syscall.O_RDWR {
		return fd, err
	}
	return syscall.Open(p, fl, mode)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	p := n.path()
	fd, err := openRW(p, openFlags(flags), 0)
	if err != nil {
		return nil, 0, errno(err)
	}
	h := &handle{n: n, fd: fd, sync: flags&syscall.O_DSYNC != 0}
	if flags&syscall.O_TRUNC != 0 { // only without atomic_o_trunc, which go-fuse does not ask for
		op := Op{Kind: OpTruncate}
		if n.fsys.logging() {
			op.Path = n.relPath()
		}
		if e := n.fsys.do(op, func() syscall.Errno { return n.fsys.truncate(n.ino, fd, 0) }); e != 0 {
			_ = syscall.Close(fd)
			return nil, 0, e
		}
	}
	return h, 0, 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ds, e := fs.NewLoopbackDirStream(n.path())
	if e != 0 {
		return nil, e
	}
	defer ds.Close()
	var list []fuse.DirEntry
	for ds.HasNext() {
		de, e := ds.Next()
		if e != 0 {
			return nil, e
		}
		if !n.hidden(de.Name) {
			list = append(list, de)
		}
	}
	return fs.NewListDirStream(list), 0
}

// Fsync makes a file's data, or a directory's entries, durable. The real
// disk is not synced: its durability is not what is modelled.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	fsys := n.fsys
	op := Op{Kind: OpFsync}
	if n.IsDir() {
		op.Kind = OpFsyncDir
	}
	if fsys.logging() {
		op.Path = n.relPath()
	}
	return fsys.do(op, func() syscall.Errno {
		fsys.mu.Lock()
		if n.IsDir() {
			fsys.syncDir(n.ino)
		}
		u := fsys.m.files[n.ino]
		fsys.mu.Unlock()
		if u != nil && !n.IsDir() {
			u.sync()
		}
		return 0
	})
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(n.fsys.backing, &s); err != nil {
		return errno(err)
	}
	out.FromStatfsT(&s)
	return 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	buf := make([]byte, 4096)
	m, err := syscall.Readlink(n.path(), buf)
	if err != nil {
		return nil, errno(err)
	}
	return buf[:m], 0
}

// statGen stats path (relative to dirfd, with statx flags) and returns a
// generation from the birth time, so a reused inode number is a new
// go-fuse inode.
func statGen(dirfd int, path string, flags int, st *syscall.Stat_t) (uint64, error) {
	var sx unix.Statx_t
	err := unix.Statx(dirfd, path, flags, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &sx)
	if err != nil {
		return 0, err
	}
	*st = syscall.Stat_t{
		Dev:     unix.Mkdev(sx.Dev_major, sx.Dev_minor),
		Ino:     sx.Ino,
		Nlink:   uint64(sx.Nlink),
		Mode:    uint32(sx.Mode),
		Uid:     sx.Uid,
		Gid:     sx.Gid,
		Rdev:    unix.Mkdev(sx.Rdev_major, sx.Rdev_minor),
		Size:    int64(sx.Size),
		Blksize: int64(sx.Blksize),
		Blocks:  int64(sx.Blocks),
		Atim:    syscall.Timespec{Sec: sx.Atime.Sec, Nsec: int64(sx.Atime.Nsec)},
		Mtim:    syscall.Timespec{Sec: sx.Mtime.Sec, Nsec: int64(sx.Mtime.Nsec)},
		Ctim:    syscall.Timespec{Sec: sx.Ctime.Sec, Nsec: int64(sx.Ctime.Nsec)},
	}
	if sx.Mask&unix.STATX_BTIME == 0 {
		return 1, nil
	}
	return uint64(sx.Btime.Sec)*1e9 + uint64(sx.Btime.Nsec) + 1, nil
}
