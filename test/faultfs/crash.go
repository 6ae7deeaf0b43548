package faultfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// scan is the current backing tree, by inode.
type scan struct {
	where   map[uint64]string            // a path of each inode
	stat    map[uint64]syscall.Stat_t    // its stat
	entries map[uint64]map[string]uint64 // current entries of each directory
}

// restore rewrites the backing directory to the durable state (see doc).
// The file system must be unmounted; call with f.mu.
//
// It builds the durable tree in a staging directory, hard-linking each
// file inode there (after putting its durable content back) and making
// directories, symlinks and device nodes anew, then replaces the backing
// root's contents with the staging tree. A directory inode that two
// durable entries name (possible when a directory rename is undone in one
// directory and not in the other) is made twice; an entry that would put a
// directory inside itself is dropped.
func (f *FS) restore() error {
	sc := &scan{
		where:   map[uint64]string{},
		stat:    map[uint64]syscall.Stat_t{},
		entries: map[uint64]map[string]uint64{},
	}
	var rootSt syscall.Stat_t
	if err := syscall.Stat(f.backing, &rootSt); err != nil {
		return fmt.Errorf("faultfs: crash: %w", err)
	}
	var errs []error
	sc.walk(f.backing, rootSt.Ino, privName, &errs)
	if graves, err := os.ReadDir(f.graveDir()); err == nil {
		for _, g := range graves {
			sc.add(filepath.Join(f.graveDir(), g.Name()), &errs)
		}
	}
	stage := filepath.Join(f.privDir(), "stage")
	if err := os.MkdirAll(stage, 0o700); err != nil {
		return fmt.Errorf("faultfs: crash: %w", err)
	}
	b := &builder{f: f, sc: sc, undone: map[uint64]bool{}, errs: errs}
	b.dir(rootSt.Ino, stage, map[uint64]bool{rootSt.Ino: true})
	if err := f.swapIn(stage); err != nil {
		b.errs = append(b.errs, err)
	}
	if err := os.RemoveAll(f.privDir()); err != nil {
		b.errs = append(b.errs, err)
	}
	return errors.Join(b.errs...)
}

// walk records directory dir (inode ino) and everything under it, except
// the entry skip.
func (sc *scan) walk(dir string, ino uint64, skip string, errs *[]error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		*errs = append(*errs, err)
		return
	}
	ents := map[string]uint64{}
	sc.entries[ino] = ents
	for _, de := range des {
		if de.Name() == skip {
			continue
		}
		if child, ok := sc.add(filepath.Join(dir, de.Name()), errs); ok {
			ents[de.Name()] = child
		}
	}
}

// add records the file at p (and, for a directory, its contents).
func (sc *scan) add(p string, errs *[]error) (uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		*errs = append(*errs, err)
		return 0, false
	}
	if _, seen := sc.where[st.Ino]; !seen {
		sc.where[st.Ino], sc.stat[st.Ino] = p, st
		if isDir(&st) {
			sc.walk(p, st.Ino, "", errs)
		}
	}
	return st.Ino, true
}

// durable returns the durable entries of directory ino: its current ones
// overlaid with its journal.
func (f *FS) durable(sc *scan, ino uint64) map[string]uint64 {
	out := map[string]uint64{}
	for name, child := range sc.entries[ino] {
		out[name] = child
	}
	for name, s := range f.m.journals[ino] {
		if s.ok {
			out[name] = s.ino
		} else {
			delete(out, name)
		}
	}
	return out
}

type builder struct {
	f      *FS
	sc     *scan
	undone map[uint64]bool // file inodes whose durable content is back
	errs   []error
}

// dir makes at dst the durable entries of directory inode ino; anc holds
// the directory inodes from the root down to ino.
func (b *builder) dir(ino uint64, dst string, anc map[uint64]bool) {
	ents := b.f.durable(b.sc, ino)
	names := make([]string, 0, len(ents))
	for name := range ents {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		child := ents[name]
		if err := b.entry(child, filepath.Join(dst, name), anc); err != nil {
			b.errs = append(b.errs, fmt.Errorf("faultfs: crash: restore %s: %w", name, err))
		}
	}
}

func (b *builder) entry(ino uint64, dst string, anc map[uint64]bool) error {
	src, ok := b.sc.where[ino]
	if !ok {
		return fmt.Errorf("inode %d is gone", ino)
	}
	st := b.sc.stat[ino]
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		if anc[ino] {
			return nil // would contain itself
		}
		if err := os.Mkdir(dst, os.FileMode(st.Mode&0o777)); err != nil {
			return err
		}
		_ = syscall.Chmod(dst, st.Mode&07777)
		_ = syscall.Lchown(dst, int(st.Uid), int(st.Gid))
		anc[ino] = true
		b.dir(ino, dst, anc)
		delete(anc, ino)
		return nil
	case syscall.S_IFREG:
		if !b.undone[ino] {
			if err := b.f.putBack(ino, src); err != nil {
				return err
			}
			b.undone[ino] = true
		}
		return os.Link(src, dst)
	case syscall.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
		_ = syscall.Lchown(dst, int(st.Uid), int(st.Gid))
		return nil
	default:
		if err := syscall.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return err
		}
		_ = syscall.Lchown(dst, int(st.Uid), int(st.Gid))
		return nil
	}
}

// putBack gives the file inode ino (at path p) its durable content.
func (f *FS) putBack(ino uint64, p string) error {
	u := f.m.files[ino]
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.dirty {
		return nil
	}
	fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	return u.apply(fd)
}

// swapIn replaces everything at the backing root but the private
// directory with the contents of stage.
func (f *FS) swapIn(stage string) error {
	old, err := os.ReadDir(f.backing)
	if err != nil {
		return err
	}
	for _, de := range old {
		if de.Name() == privName {
			continue
		}
		if err := os.RemoveAll(filepath.Join(f.backing, de.Name())); err != nil {
			return err
		}
	}
	fresh, err := os.ReadDir(stage)
	if err != nil {
		return err
	}
	for _, de := range fresh {
		if err := os.Rename(filepath.Join(stage, de.Name()), filepath.Join(f.backing, de.Name())); err != nil {
			return err
		}
	}
	return nil
}
