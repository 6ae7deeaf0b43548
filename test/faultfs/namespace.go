package faultfs

import (
	"context"
	"io"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Every namespace change runs under FS.mu: it checks the backing
// directory, journals the names it is about to change (see model), then
// changes the backing directory. A journaled name whose change then fails
// holds what it holds now, which undoes nothing: harmless.

var (
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeMkdirer   = (*node)(nil)
	_ fs.NodeMknoder   = (*node)(nil)
	_ fs.NodeSymlinker = (*node)(nil)
	_ fs.NodeLinker    = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRmdirer   = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
)

func isDir(st *syscall.Stat_t) bool { return st.Mode&syscall.S_IFMT == syscall.S_IFDIR }

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.hidden(name) {
		return nil, nil, 0, syscall.EPERM
	}
	var ch *fs.Inode
	var h *handle
	e := n.fsys.do(Op{Kind: OpCreate, Path: n.childRel(name)}, func() syscall.Errno {
		var st syscall.Stat_t
		fd, gen, e := n.createLocked(name, flags, mode, &st)
		if e != 0 {
			return e
		}
		out.Attr.FromStat(&st)
		ch = n.newChild(ctx, &st, gen)
		cn, ok := ch.Operations().(*node)
		if !ok {
			_ = syscall.Close(fd)
			return syscall.EIO
		}
		h = &handle{n: cn, fd: fd, sync: flags&syscall.O_DSYNC != 0}
		return 0
	})
	if e != 0 {
		return nil, nil, 0, e
	}
	return ch, h, 0, 0
}

func (n *node) createLocked(name string, flags, mode uint32, st *syscall.Stat_t) (int, uint64, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	p := n.child(name)
	if syscall.Lstat(p, st) == nil {
		return -1, 0, syscall.EEXIST // the kernel creates only names it found free
	}
	f.journal(n.ino, name, slot{})
	fl := openFlags(flags)&^syscall.O_ACCMODE | syscall.O_RDWR | syscall.O_CREAT | syscall.O_EXCL
	fd, err := syscall.Open(p, fl, mode&07777)
	if err != nil {
		return -1, 0, errno(err)
	}
	_ = syscall.Fchmod(fd, mode&07777) // undo our own umask
	gen, err := statGen(fd, "", unix.AT_EMPTY_PATH, st)
	if err != nil {
		_ = syscall.Close(fd)
		return -1, 0, errno(err)
	}
	f.born(st.Ino, st.Mode)
	return fd, gen, 0
}

// makeEntry makes the new name name in n with mk (under FS.mu) and returns
// its inode. fresh is false for link, whose inode is not new.
func (n *node) makeEntry(ctx context.Context, op Op, name string, out *fuse.EntryOut, fresh bool, mk func(p string) error) (*fs.Inode, syscall.Errno) {
	if n.hidden(name) {
		return nil, syscall.EPERM
	}
	var ch *fs.Inode
	e := n.fsys.do(op, func() syscall.Errno {
		var st syscall.Stat_t
		gen, e := n.makeLocked(name, fresh, mk, &st)
		if e != 0 {
			return e
		}
		out.Attr.FromStat(&st)
		ch = n.newChild(ctx, &st, gen)
		return 0
	})
	return ch, e
}

func (n *node) makeLocked(name string, fresh bool, mk func(string) error, st *syscall.Stat_t) (uint64, syscall.Errno) {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	p := n.child(name)
	if syscall.Lstat(p, st) == nil {
		return 0, syscall.EEXIST
	}
	f.journal(n.ino, name, slot{})
	if err := mk(p); err != nil {
		return 0, errno(err)
	}
	gen, err := statGen(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, st)
	if err != nil {
		return 0, errno(err)
	}
	if fresh {
		f.born(st.Ino, st.Mode)
	}
	return gen, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.makeEntry(ctx, Op{Kind: OpMkdir, Path: n.childRel(name)}, name, out, true, func(p string) error {
		if err := syscall.Mkdir(p, mode&07777); err != nil {
			return err
		}
		return syscall.Chmod(p, mode&07777)
	})
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.makeEntry(ctx, Op{Kind: OpMknod, Path: n.childRel(name)}, name, out, true, func(p string) error {
		return syscall.Mknod(p, mode, int(rdev))
	})
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	op := Op{Kind: OpSymlink, Path: n.childRel(name), Path2: target}
	return n.makeEntry(ctx, op, name, out, true, func(p string) error {
		return syscall.Symlink(target, p)
	})
}

// Link makes a hard link; the model tracks inodes, so links are undone
// like any other name.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	tn, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	op := Op{Kind: OpLink, Path2: n.childRel(name)}
	if n.fsys.logging() {
		op.Path = tn.relPath()
	}
	return n.makeEntry(ctx, op, name, out, false, func(p string) error {
		tp := tn.path()
		var st syscall.Stat_t
		if err := syscall.Lstat(tp, &st); err != nil {
			return err
		}
		if isDir(&st) {
			return syscall.EPERM
		}
		return syscall.Link(tp, p)
	})
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.hidden(name) {
		return syscall.ENOENT
	}
	return n.fsys.do(Op{Kind: OpUnlink, Path: n.childRel(name)}, func() syscall.Errno {
		return n.remove(name, false)
	})
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.hidden(name) {
		return syscall.ENOENT
	}
	return n.fsys.do(Op{Kind: OpRmdir, Path: n.childRel(name)}, func() syscall.Errno {
		return n.remove(name, true)
	})
}

func (n *node) remove(name string, dir bool) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	p := n.child(name)
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return errno(err)
	}
	switch {
	case dir && !isDir(&st):
		return syscall.ENOTDIR
	case !dir && isDir(&st):
		return syscall.EISDIR
	case dir:
		if e := checkEmpty(p); e != 0 {
			return e
		}
	}
	f.journal(n.ino, name, slot{ino: st.Ino, ok: true})
	return f.unlinkPath(p, &st)
}

// checkEmpty is ENOTEMPTY unless the directory p has no entries.
func checkEmpty(p string) syscall.Errno {
	d, err := os.Open(p)
	if err != nil {
		return errno(err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if len(names) > 0 {
		return syscall.ENOTEMPTY
	}
	if err != nil && err != io.EOF {
		return errno(err)
	}
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if n.hidden(name) {
		return syscall.ENOENT
	}
	if np.hidden(newName) {
		return syscall.EPERM
	}
	op := Op{Kind: OpRename, Path: n.childRel(name), Path2: np.childRel(newName)}
	return n.fsys.do(op, func() syscall.Errno { return n.rename(name, np, newName, flags) })
}

func (n *node) rename(name string, np *node, newName string, flags uint32) syscall.Errno {
	f := n.fsys
	f.mu.Lock()
	defer f.mu.Unlock()
	sp, dp := n.child(name), np.child(newName)
	var sst, dst syscall.Stat_t
	if err := syscall.Lstat(sp, &sst); err != nil {
		return errno(err)
	}
	dexists := syscall.Lstat(dp, &dst) == nil
	switch {
	case flags == unix.RENAME_EXCHANGE:
		if !dexists {
			return syscall.ENOENT
		}
		f.journal(n.ino, name, slot{ino: sst.Ino, ok: true})
		f.journal(np.ino, newName, slot{ino: dst.Ino, ok: true})
		return errno(unix.Renameat2(unix.AT_FDCWD, sp, unix.AT_FDCWD, dp, unix.RENAME_EXCHANGE))
	case flags&^unix.RENAME_NOREPLACE != 0:
		return syscall.EINVAL
	case dexists && flags != 0:
		return syscall.EEXIST
	case dexists && dst.Ino == sst.Ino:
		return 0 // two names of one inode: rename(2) does nothing
	}
	if dexists {
		if e := replaceable(&sst, &dst, dp); e != 0 {
			return e
		}
	}
	f.journal(n.ino, name, slot{ino: sst.Ino, ok: true})
	f.journal(np.ino, newName, slot{ino: dst.Ino, ok: dexists})
	if !dexists {
		return errno(syscall.Rename(sp, dp))
	}
	return f.renameOver(sp, dp, &dst)
}

func replaceable(src, dst *syscall.Stat_t, dp string) syscall.Errno {
	switch {
	case isDir(src) && !isDir(dst):
		return syscall.ENOTDIR
	case !isDir(src) && isDir(dst):
		return syscall.EISDIR
	case isDir(dst):
		return checkEmpty(dp)
	}
	return 0
}

// renameOver renames sp over the existing dp (stat dst), parking dst's
// inode in the graveyard if the durable state still needs it.
func (f *FS) renameOver(sp, dp string, dst *syscall.Stat_t) syscall.Errno {
	last := isDir(dst) || dst.Nlink <= 1
	if last && f.m.refs[dst.Ino] > 0 {
		if e := f.bury(dp, dst.Ino); e != 0 {
			return e
		}
		if err := syscall.Rename(sp, dp); err != nil {
			f.unbury(dp, dst.Ino)
			return errno(err)
		}
		return 0
	}
	if err := syscall.Rename(sp, dp); err != nil {
		return errno(err)
	}
	if last {
		f.forget(dst.Ino)
	}
	return 0
}
