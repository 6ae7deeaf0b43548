package faultfs

import (
	"context"
	"math"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// pageSize is the granularity of the pre-images kept for undo.
const pageSize = 4096

// fileUndo is the undo record of one regular file since its last fsync:
// the durable size, and the durable content of every page that has been
// changed since (its first pre-image, clipped to the durable size). The
// durable content of the file is the backing content with pages put back
// and cut to size. A clean file (durable = backing) has dirty == false.
type fileUndo struct {
	mu    sync.Mutex
	dirty bool
	size  int64
	pages map[int64][]byte
}

// undo returns the undo record of inode ino, making one if needed.
func (f *FS) undo(ino uint64) *fileUndo {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.m.files[ino]
	if u == nil {
		u = &fileUndo{}
		f.m.files[ino] = u
	}
	return u
}

// prepare must be called, with u.mu held, before the backing content of
// [off, end) changes (end may be math.MaxInt64) or the size changes: it
// saves the durable content of every page of that range not saved yet.
func (u *fileUndo) prepare(fd int, off, end int64) error {
	if !u.dirty {
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return err
		}
		u.dirty, u.size, u.pages = true, st.Size, nil
	}
	end = min(end, u.size)
	for p := off / pageSize; p*pageSize < end; p++ {
		if _, ok := u.pages[p]; ok {
			continue
		}
		img, err := readPage(fd, p, u.size)
		if err != nil {
			return err
		}
		if u.pages == nil {
			u.pages = map[int64][]byte{}
		}
		u.pages[p] = img
	}
	return nil
}

// readPage reads page p of fd, clipped to size; what cannot be read is a
// hole (zeros).
func readPage(fd int, p, size int64) ([]byte, error) {
	img := make([]byte, min(pageSize, size-p*pageSize))
	for n := 0; n < len(img); {
		m, err := syscall.Pread(fd, img[n:], p*pageSize+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return img, nil
}

// sync makes the file's content durable.
func (u *fileUndo) sync() {
	u.mu.Lock()
	u.dirty, u.size, u.pages = false, 0, nil
	u.mu.Unlock()
}

// apply writes the durable content back into fd (used by Crash).
func (u *fileUndo) apply(fd int) error {
	if !u.dirty {
		return nil
	}
	for p, img := range u.pages {
		if _, err := syscall.Pwrite(fd, img, p*pageSize); err != nil {
			return err
		}
	}
	return syscall.Ftruncate(fd, u.size)
}

// handle is an open regular file: a backing descriptor, opened read-write
// when possible so pre-images can be read.
type handle struct {
	n    *node
	fd   int
	sync bool // O_SYNC or O_DSYNC (the kernel sends an fsync after each write)
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
	_ fs.FileLseeker   = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := 0
	for n < len(dest) {
		m, err := syscall.Pread(h.fd, dest[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, errno(err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f := h.n.fsys
	op := Op{Kind: OpWrite, Off: off, Len: int64(len(data)), Sync: h.sync}
	if f.logging() {
		op.Path = h.n.relPath()
	}
	var written uint32
	errno := f.do(op, func() syscall.Errno {
		u := f.undo(h.n.ino)
		u.mu.Lock()
		defer u.mu.Unlock()
		if err := u.prepare(h.fd, off, off+int64(len(data))); err != nil {
			return errno(err)
		}
		w, err := pwriteAll(h.fd, data, off)
		written = uint32(w)
		return errno(err)
	})
	return written, errno
}

func pwriteAll(fd int, data []byte, off int64) (int, error) {
	n := 0
	for n < len(data) {
		m, err := syscall.Pwrite(fd, data[n:], off+int64(n))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	return errno(syscall.Close(h.fd))
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd, &st); err != nil {
		return errno(err)
	}
	out.FromStat(&st)
	return 0
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(h.fd, int64(off), int(whence))
	return uint64(n), errno(err)
}

// Flush does nothing: locks are the kernel's (see doc), and close of the
// backing descriptor happens at Release.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	f := h.n.fsys
	op := Op{Kind: OpFallocate, Off: int64(off), Len: int64(size)}
	if f.logging() {
		op.Path = h.n.relPath()
	}
	return f.do(op, func() syscall.Errno {
		start, end := int64(off), int64(off+size)
		switch {
		case mode&(unix.FALLOC_FL_COLLAPSE_RANGE|unix.FALLOC_FL_INSERT_RANGE) != 0:
			end = math.MaxInt64 // shifts the whole tail
		case mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) == 0:
			start, end = 0, 0 // plain allocation: content unchanged, size may grow
		}
		u := f.undo(h.n.ino)
		u.mu.Lock()
		defer u.mu.Unlock()
		if err := u.prepare(h.fd, start, end); err != nil {
			return errno(err)
		}
		return errno(syscall.Fallocate(h.fd, mode, int64(off), int64(size)))
	})
}

// truncate sets the size of the file open as fd, keeping undo.
func (f *FS) truncate(ino uint64, fd int, size int64) syscall.Errno {
	u := f.undo(ino)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.prepare(fd, size, math.MaxInt64); err != nil {
		return errno(err)
	}
	return errno(syscall.Ftruncate(fd, size))
}
