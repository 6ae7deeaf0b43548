package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// checkBoltPages walks the page tree of a bbolt file and reports the
// first damage it finds, without bbolt: bbolt asserts its page invariants
// with panics, some on goroutines of its own (the free-page scan at Open),
// where no recover can reach them, so a damaged raft.db would kill the
// process with a trace instead of a message. The walk reads only page
// the pages in use, and checks what bbolt would assert: a valid meta page,
// every reachable page within the file and the high-water mark, naming
// itself by its own ID, of the right type, with its elements inside it,
// reached once, and its keys strictly increasing and within the bounds
// its parent's branch keys set. Pages nothing refers to (free pages) are
// not read: damage there loses nothing.
//
// bbolt's layout (format version 2, host byte order, little-endian on
// every platform rangealloc builds for):
//
//	page     = id:8 flags:2 count:2 overflow:4, then count elements
//	meta     = page 0 and 1 at offset 16: magic:4 version:4 pageSize:4 flags:4
//	           root:8 sequence:8 freelist:8 pgid:8 txid:8 checksum:8 (FNV-64a of what precedes)
//	branch   = pos:4 ksize:4 pgid:8            (pos from the element's start)
//	leaf     = flags:4 pos:4 ksize:4 vsize:4   (flags&1: the value is a bucket: root:8 sequence:8)
func checkBoltPages(f io.ReaderAt, size int64) error {
	m, err := boltMeta(f, size)
	if err != nil {
		return err
	}
	if int64(m.hwm)*int64(m.pageSize) > size {
		return fmt.Errorf("file is %d bytes, shorter than its %d pages of %d bytes: cut short", size, m.hwm, m.pageSize)
	}
	w := &pageWalk{f: f, m: m, seen: map[uint64]bool{}}
	return w.walk(m.root, 0, nil, nil)
}

const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	pageHeader      = 16
	elemSize        = 16
	branchPage      = 0x01
	leafPage        = 0x02
	bucketLeafFlag  = 0x01
	metaSize        = 64
	metaChecksumOff = 56
	maxTreeDepth    = 64
)

type boltMetaInfo struct {
	pageSize uint32
	root     uint64
	hwm      uint64 // pages in use: the high-water mark
	txid     uint64
}

// boltMeta returns the newer valid meta page of the two, as bbolt does.
func boltMeta(f io.ReaderAt, size int64) (boltMetaInfo, error) {
	read := func(off int64) (boltMetaInfo, error) {
		b := make([]byte, metaSize)
		if _, err := f.ReadAt(b, off+pageHeader); err != nil {
			return boltMetaInfo{}, fmt.Errorf("meta page at %d: %w", off, err)
		}
		le := binary.LittleEndian
		h := fnv.New64a()
		h.Write(b[:metaChecksumOff])
		switch {
		case le.Uint32(b[0:]) != boltMagic:
			return boltMetaInfo{}, fmt.Errorf("meta page at %d: not a bolt file (bad magic)", off)
		case le.Uint32(b[4:]) != boltVersion:
			return boltMetaInfo{}, fmt.Errorf("meta page at %d: bolt format version %d", off, le.Uint32(b[4:]))
		case le.Uint64(b[metaChecksumOff:]) != h.Sum64():
			return boltMetaInfo{}, fmt.Errorf("meta page at %d: checksum mismatch", off)
		}
		m := boltMetaInfo{pageSize: le.Uint32(b[8:]), root: le.Uint64(b[16:]), hwm: le.Uint64(b[40:]), txid: le.Uint64(b[48:])}
		if m.pageSize < 512 || m.pageSize > 1<<20 || m.pageSize&(m.pageSize-1) != 0 {
			return boltMetaInfo{}, fmt.Errorf("meta page at %d: page size %d", off, m.pageSize)
		}
		return m, nil
	}
	m0, err0 := read(0)
	ps := int64(m0.pageSize)
	if err0 != nil {
		ps = int64(os.Getpagesize())
	}
	if size < 2*ps {
		return boltMetaInfo{}, fmt.Errorf("file is %d bytes, too short for its two meta pages", size)
	}
	m1, err1 := read(ps)
	switch {
	case err0 != nil && err1 != nil:
		return boltMetaInfo{}, errors.Join(err0, err1)
	case err0 != nil:
		return m1, nil
	case err1 != nil || m0.txid >= m1.txid:
		return m0, nil
	}
	return m1, nil
}

type pageWalk struct {
	f    io.ReaderAt
	m    boltMetaInfo
	seen map[uint64]bool
}

// walk checks page id, reached at the given depth of the tree, and every
// page below it. Its keys must lie in [lo, hi) (nil: unbounded); a
// bucket's pages start afresh.
func (w *pageWalk) walk(id uint64, depth int, lo, hi []byte) error {
	switch {
	case depth > maxTreeDepth:
		return fmt.Errorf("page %d: tree deeper than %d", id, maxTreeDepth)
	case id < 2 || id >= w.m.hwm:
		return fmt.Errorf("a reference to page %d, outside the pages in use [2, %d)", id, w.m.hwm)
	case w.seen[id]:
		return fmt.Errorf("page %d is referred to twice", id)
	}
	w.seen[id] = true
	ps := int64(w.m.pageSize)
	hdr := make([]byte, pageHeader)
	if _, err := w.f.ReadAt(hdr, int64(id)*ps); err != nil {
		return fmt.Errorf("page %d: %w", id, err)
	}
	le := binary.LittleEndian
	self, flags, count, overflow := le.Uint64(hdr), le.Uint16(hdr[8:]), int64(le.Uint16(hdr[10:])), uint64(le.Uint32(hdr[12:]))
	span := (int64(overflow) + 1) * ps
	switch {
	case self != id:
		return fmt.Errorf("page %d names itself %d (zeroed or overwritten)", id, self)
	case flags != branchPage && flags != leafPage:
		return fmt.Errorf("page %d: flags %#x, want a branch or leaf page", id, flags)
	case id+overflow >= w.m.hwm:
		return fmt.Errorf("page %d: %d overflow pages run past the pages in use", id, overflow)
	case pageHeader+count*elemSize > span:
		return fmt.Errorf("page %d: %d elements do not fit in it", id, count)
	}
	page := make([]byte, span)
	if _, err := w.f.ReadAt(page, int64(id)*ps); err != nil {
		return fmt.Errorf("page %d: %w", id, err)
	}
	type child struct {
		id     uint64
		lo, hi []byte
	}
	var children []child
	var prev []byte
	for i := int64(0); i < count; i++ {
		start := pageHeader + i*elemSize // offsets count from the element's own start
		e := page[start:]
		var key []byte
		if flags == branchPage {
			pos, ksize := int64(le.Uint32(e)), int64(le.Uint32(e[4:]))
			if start+pos+ksize > span {
				return fmt.Errorf("page %d: branch element %d points past the page", id, i)
			}
			key = page[start+pos : start+pos+ksize]
			children = append(children, child{id: le.Uint64(e[8:]), lo: key})
		} else {
			eflags, pos, ksize, vsize := le.Uint32(e), int64(le.Uint32(e[4:])), int64(le.Uint32(e[8:])), int64(le.Uint32(e[12:]))
			if start+pos+ksize+vsize > span {
				return fmt.Errorf("page %d: leaf element %d points past the page", id, i)
			}
			key = page[start+pos : start+pos+ksize]
			if eflags&bucketLeafFlag != 0 {
				if vsize < 16 {
					return fmt.Errorf("page %d: bucket element %d is %d bytes", id, i, vsize)
				}
				if root := le.Uint64(page[start+pos+ksize:]); root != 0 { // 0: an inline bucket, held in the value
					children = append(children, child{id: root}) // a bucket's keys start afresh
				}
			}
		}
		switch {
		case prev != nil && bytes.Compare(key, prev) <= 0:
			return fmt.Errorf("page %d: key %d is out of order", id, i)
		case lo != nil && bytes.Compare(key, lo) < 0, hi != nil && bytes.Compare(key, hi) >= 0:
			return fmt.Errorf("page %d: key %d lies outside the range its parent gives it", id, i)
		}
		prev = key
	}
	if flags == branchPage { // child i holds the keys from its own to the next one's
		for i := range children {
			children[i].hi = hi
			if i+1 < len(children) {
				children[i].hi = children[i+1].lo
			}
		}
	}
	for _, c := range children {
		if err := w.walk(c.id, depth+1, c.lo, c.hi); err != nil {
			return err
		}
	}
	return nil
}
