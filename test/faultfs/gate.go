package faultfs

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// gatedFS wraps go-fuse's node file system at the raw protocol level so
// that Freeze, a FailFrom cut and a retired mount apply to every request,
// including the ones (lookup, getattr, readdir, statfs, ...) that never
// reach the model. Init, Forget, Release, ReleaseDir, String, SetDebug and
// OnUnmount pass straight through: they have no reply anyone waits for.
type gatedFS struct {
	fuse.RawFileSystem
	g *mountGen
}

// enter blocks while frozen, then admits the request unless the mount is
// retired or a cut has happened. On success the caller must call exit.
func (r *gatedFS) enter(cancel <-chan struct{}) fuse.Status {
	if r.g.dead.Load() {
		return fuse.EIO
	}
	if st := r.g.fsys.waitThaw(cancel); st != fuse.OK {
		return st
	}
	r.g.inflight.RLock()
	if r.g.dead.Load() || r.g.fsys.tripped.Load() {
		r.g.inflight.RUnlock()
		return fuse.EIO
	}
	return fuse.OK
}

func (r *gatedFS) exit() { r.g.inflight.RUnlock() }

func (r *gatedFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Lookup(c, h, name, out)
}

func (r *gatedFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.GetAttr(c, in, out)
}

func (r *gatedFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.SetAttr(c, in, out)
}

func (r *gatedFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Mknod(c, in, name, out)
}

func (r *gatedFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Mkdir(c, in, name, out)
}

func (r *gatedFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Unlink(c, h, name)
}

func (r *gatedFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Rmdir(c, h, name)
}

func (r *gatedFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Rename(c, in, oldName, newName)
}

func (r *gatedFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Link(c, in, name, out)
}

func (r *gatedFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Symlink(c, h, target, name, out)
}

func (r *gatedFS) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	if st := r.enter(c); st != fuse.OK {
		return nil, st
	}
	defer r.exit()
	return r.RawFileSystem.Readlink(c, h)
}

func (r *gatedFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Access(c, in)
}

func (r *gatedFS) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if st := r.enter(c); st != fuse.OK {
		return 0, st
	}
	defer r.exit()
	return r.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (r *gatedFS) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	if st := r.enter(c); st != fuse.OK {
		return 0, st
	}
	defer r.exit()
	return r.RawFileSystem.ListXAttr(c, h, dest)
}

func (r *gatedFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (r *gatedFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.RemoveXAttr(c, h, attr)
}

func (r *gatedFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Create(c, in, name, out)
}

// Tmpfile (O_TMPFILE) is not supported: its inode has no name to undo.
func (r *gatedFS) Tmpfile(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return fuse.ENOTSUP
}

func (r *gatedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Open(c, in, out)
}

func (r *gatedFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if st := r.enter(c); st != fuse.OK {
		return nil, st
	}
	defer r.exit()
	return r.RawFileSystem.Read(c, in, buf)
}

func (r *gatedFS) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Lseek(c, in, out)
}

func (r *gatedFS) GetLk(c <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.GetLk(c, in, out)
}

func (r *gatedFS) SetLk(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.SetLk(c, in)
}

func (r *gatedFS) SetLkw(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.SetLkw(c, in)
}

// Release and ReleaseDir pass straight through, even when frozen, retired
// or cut: they only close backing descriptors, nothing waits for them (the
// kernel sends them after close(2) has returned), and refusing them would
// leak the descriptors.

func (r *gatedFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if st := r.enter(c); st != fuse.OK {
		return 0, st
	}
	defer r.exit()
	return r.RawFileSystem.Write(c, in, data)
}

func (r *gatedFS) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if st := r.enter(c); st != fuse.OK {
		return 0, st
	}
	defer r.exit()
	return r.RawFileSystem.Writev(c, in, data)
}

// CopyFileRange is refused with ENOSYS, so the kernel falls back to plain
// reads and writes, which the model sees.
func (r *gatedFS) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return 0, fuse.ENOSYS
}

// Ioctl is refused: an ioctl could change data behind the model's back.
func (r *gatedFS) Ioctl(c <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	return fuse.Status(syscall.ENOTTY)
}

func (r *gatedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Flush(c, in)
}

func (r *gatedFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Fsync(c, in)
}

func (r *gatedFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Fallocate(c, in)
}

func (r *gatedFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.OpenDir(c, in, out)
}

func (r *gatedFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.ReadDir(c, in, out)
}

func (r *gatedFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.ReadDirPlus(c, in, out)
}

func (r *gatedFS) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.FsyncDir(c, in)
}

func (r *gatedFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.StatFs(c, h, out)
}

func (r *gatedFS) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	if st := r.enter(c); st != fuse.OK {
		return st
	}
	defer r.exit()
	return r.RawFileSystem.Statx(c, in, out)
}
