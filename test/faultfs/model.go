package faultfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// slot is what a directory entry holds: an inode (by backing inode
// number), or nothing.
type slot struct {
	ino uint64
	ok  bool
}

// model is what the file system remembers beyond the backing directory
// to rebuild the durable state. Inodes are named by their backing inode
// numbers. Guarded by FS.mu (fileUndo has its own lock for its contents).
//
// Invariants:
//   - journals[d][name] is the entry name had in directory d at d's last
//     fsync (or at Mount); a name not in journals[d] has not changed since.
//     So the durable entries of d are its current entries overlaid with
//     journals[d].
//   - refs[i] counts the journal slots that hold inode i. An inode that
//     loses its last name while refs[i] > 0 is parked in the graveyard as
//     grave/<i> (grave[i]), so it and its data survive to be restored; it
//     is removed when refs[i] drops to 0.
//   - files[i] is nil for a file whose backing data is its durable data,
//     else it holds the durable size and first pre-images (fileUndo).
type model struct {
	journals map[uint64]map[string]slot
	refs     map[uint64]int
	grave    map[uint64]bool
	files    map[uint64]*fileUndo
}

func (m *model) reset() {
	m.journals = map[uint64]map[string]slot{}
	m.refs = map[uint64]int{}
	m.grave = map[uint64]bool{}
	m.files = map[uint64]*fileUndo{}
}

func (f *FS) privDir() string  { return filepath.Join(f.backing, privName) }
func (f *FS) graveDir() string { return filepath.Join(f.privDir(), "grave") }
func (f *FS) gravePath(ino uint64) string {
	return filepath.Join(f.graveDir(), strconv.FormatUint(ino, 10))
}

// journal remembers, before name in directory dir changes, what it held,
// unless it has changed already since dir's last fsync. Call with f.mu.
func (f *FS) journal(dir uint64, name string, cur slot) {
	j := f.m.journals[dir]
	if j == nil {
		j = map[string]slot{}
		f.m.journals[dir] = j
	}
	if _, seen := j[name]; seen {
		return
	}
	j[name] = cur
	if cur.ok {
		f.m.refs[cur.ino]++
	}
}

// syncDir makes directory dir's entries durable. Call with f.mu.
func (f *FS) syncDir(dir uint64) {
	j := f.m.journals[dir]
	delete(f.m.journals, dir)
	for _, s := range j {
		if s.ok {
			f.unref(s.ino)
		}
	}
}

func (f *FS) unref(ino uint64) {
	f.m.refs[ino]--
	if f.m.refs[ino] > 0 {
		return
	}
	delete(f.m.refs, ino)
	if f.m.grave[ino] {
		delete(f.m.grave, ino)
		p := f.gravePath(ino)
		if err := syscall.Unlink(p); err == syscall.EISDIR || err == syscall.EPERM {
			_ = os.RemoveAll(p)
		}
		f.forget(ino)
	}
}

// forget drops what the model holds about an inode that no longer exists
// (or is about to be reused). Call with f.mu.
func (f *FS) forget(ino uint64) {
	f.syncDir(ino)
	delete(f.m.files, ino)
}

// born registers a new inode: a new file's durable state is empty, a new
// directory's entries are all journaled as they are made.
func (f *FS) born(ino uint64, mode uint32) {
	f.forget(ino)
	if mode&syscall.S_IFMT == syscall.S_IFREG {
		f.m.files[ino] = &fileUndo{dirty: true}
	}
}

// unlinkPath removes the name at path, whose stat is st, from the backing
// directory. If that was the inode's last name and a journal still holds
// the inode, the inode is parked in the graveyard instead. Call with f.mu,
// after journaling the name.
func (f *FS) unlinkPath(path string, st *syscall.Stat_t) syscall.Errno {
	isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR
	last := isDir || st.Nlink <= 1
	if last && f.m.refs[st.Ino] > 0 {
		return f.bury(path, st.Ino)
	}
	var err error
	if isDir {
		err = syscall.Rmdir(path)
	} else {
		err = syscall.Unlink(path)
	}
	if err != nil {
		return errno(err)
	}
	if last {
		f.forget(st.Ino)
	}
	return 0
}

// bury moves path to the graveyard as the inode ino.
func (f *FS) bury(path string, ino uint64) syscall.Errno {
	if err := os.MkdirAll(f.graveDir(), 0o700); err != nil {
		return errno(err)
	}
	if err := syscall.Rename(path, f.gravePath(ino)); err != nil {
		return errno(err)
	}
	f.m.grave[ino] = true
	return 0
}

// unbury undoes bury after a failed rename-over.
func (f *FS) unbury(path string, ino uint64) {
	if syscall.Rename(f.gravePath(ino), path) == nil {
		delete(f.m.grave, ino)
	}
}

// errno maps an error to an errno; EIO for what is not one.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}
