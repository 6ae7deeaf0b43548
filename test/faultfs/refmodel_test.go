package faultfs

import (
	"bytes"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// refModel is the reference: a pure in-memory statement of the strict
// POSIX crash model (see doc.go), kept as a current tree plus, per inode,
// its state at its last fsync. It shares no code with the file system.
type refModel struct {
	root *mnode
}

type mnode struct {
	dir     bool
	data    []byte            // file: current content
	durData []byte            // file: content at last fsync
	kids    map[string]*mnode // dir: current entries
	durKids map[string]*mnode // dir: entries at last fsync
}

func newDir() *mnode {
	return &mnode{dir: true, kids: map[string]*mnode{}, durKids: map[string]*mnode{}}
}

func newRefModel() *refModel { return &refModel{root: newDir()} }

// lookup returns the node at the slash-separated path p ("" = root).
func (m *refModel) lookup(p string) *mnode {
	n := m.root
	if p == "" {
		return n
	}
	for _, el := range splitPath(p) {
		if n == nil || !n.dir {
			return nil
		}
		n = n.kids[el]
	}
	return n
}

func splitPath(p string) []string { return strings.Split(p, "/") }

func (m *refModel) create(dir *mnode, name string) *mnode {
	n := &mnode{}
	dir.kids[name] = n
	return n
}

func (m *refModel) mkdir(dir *mnode, name string) { dir.kids[name] = newDir() }

func (n *mnode) write(off int64, b []byte) {
	if end := off + int64(len(b)); end > int64(len(n.data)) {
		n.data = append(n.data, make([]byte, end-int64(len(n.data)))...)
	}
	copy(n.data[off:], b)
}

func (n *mnode) truncate(size int64) {
	if size <= int64(len(n.data)) {
		n.data = n.data[:size]
		return
	}
	n.data = append(n.data, make([]byte, size-int64(len(n.data)))...)
}

func (n *mnode) fsync() {
	if n.dir {
		n.durKids = map[string]*mnode{}
		for k, v := range n.kids {
			n.durKids[k] = v
		}
		return
	}
	n.durData = bytes.Clone(n.data)
}

// rename moves an entry; two names of one inode make it a no-op, as in
// rename(2). A replaced entry simply loses its name.
func (m *refModel) rename(sd *mnode, sname string, dd *mnode, dname string) {
	n := sd.kids[sname]
	if dd.kids[dname] == n {
		return
	}
	delete(sd.kids, sname)
	dd.kids[dname] = n
}

// tentry is one file of a rendered tree.
type tentry struct {
	Dir  bool
	Data string
}

// current renders the current tree as path -> entry.
func (m *refModel) current() map[string]tentry {
	out := map[string]tentry{}
	var walk func(n *mnode, p string)
	walk = func(n *mnode, p string) {
		for name, k := range n.kids {
			kp := path.Join(p, name)
			if k.dir {
				out[kp] = tentry{Dir: true}
				walk(k, kp)
			} else {
				out[kp] = tentry{Data: string(k.data)}
			}
		}
	}
	walk(m.root, "")
	return out
}

// durable renders what survives a crash: from the root, each directory's
// entries at its last fsync, each file's content at its last fsync. A
// directory reached twice is rendered twice; one that would contain
// itself is left out.
func (m *refModel) durable() map[string]tentry {
	out := map[string]tentry{}
	anc := map[*mnode]bool{m.root: true}
	var walk func(n *mnode, p string)
	walk = func(n *mnode, p string) {
		for name, k := range n.durKids {
			kp := path.Join(p, name)
			switch {
			case k.dir && anc[k]:
			case k.dir:
				out[kp] = tentry{Dir: true}
				anc[k] = true
				walk(k, kp)
				delete(anc, k)
			default:
				out[kp] = tentry{Data: string(k.durData)}
			}
		}
	}
	walk(m.root, "")
	return out
}

// crash replaces the model by its durable state, everything durable. File
// inodes keep their identity (hard links stay links); directories reached
// twice become two directories.
func (m *refModel) crash() {
	files := map[*mnode]*mnode{}
	anc := map[*mnode]bool{m.root: true}
	var build func(old *mnode) *mnode
	build = func(old *mnode) *mnode {
		d := newDir()
		for name, k := range old.durKids {
			switch {
			case k.dir && anc[k]:
				continue
			case k.dir:
				anc[k] = true
				d.kids[name] = build(k)
				delete(anc, k)
			default:
				nf := files[k]
				if nf == nil {
					nf = &mnode{data: bytes.Clone(k.durData), durData: bytes.Clone(k.durData)}
					files[k] = nf
				}
				d.kids[name] = nf
			}
		}
		d.fsync()
		return d
	}
	m.root = build(m.root)
}

// paths lists the current paths of files (dirs false) or directories
// (dirs true, root "" included), sorted.
func (m *refModel) paths(dirs bool) []string {
	var out []string
	if dirs {
		out = append(out, "")
	}
	for p, e := range m.current() {
		if e.Dir == dirs {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// readTree renders the tree under root as the model does.
func readTree(root string) (map[string]tentry, error) {
	out := map[string]tentry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		if d.IsDir() {
			out[filepath.ToSlash(rel)] = tentry{Dir: true}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			out[filepath.ToSlash(rel)] = tentry{Data: "symlink to " + target}
			return err
		}
		b, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = tentry{Data: string(b)}
		return err
	})
	return out, err
}
