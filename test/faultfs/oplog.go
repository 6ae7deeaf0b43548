package faultfs

import (
	"fmt"
	"syscall"
)

// OpKind names a mutating operation.
type OpKind string

// The kinds of Op. OpCrash is a marker the log gets at each Crash.
const (
	OpCreate    OpKind = "create"
	OpMkdir     OpKind = "mkdir"
	OpMknod     OpKind = "mknod"
	OpSymlink   OpKind = "symlink"
	OpLink      OpKind = "link"
	OpRename    OpKind = "rename"
	OpUnlink    OpKind = "unlink"
	OpRmdir     OpKind = "rmdir"
	OpWrite     OpKind = "write"
	OpTruncate  OpKind = "truncate"
	OpSetattr   OpKind = "setattr"
	OpFallocate OpKind = "fallocate"
	OpFsync     OpKind = "fsync"
	OpFsyncDir  OpKind = "fsyncdir"
	OpCrash     OpKind = "crash"
)

// Op is one entry of the operation log.
type Op struct {
	// Seq is the operation's number in Ops() (1-based since Mount).
	Seq  int64
	Kind OpKind
	// Path is relative to the mount root ("" is the root itself). For
	// an operation on an open file that has been unlinked it is the
	// path go-fuse reports for orphans.
	Path string
	// Path2 is the destination of rename and link, the target of
	// symlink.
	Path2 string
	// Off and Len: write and fallocate range; Off is the new size for
	// truncate.
	Off, Len int64
	// Sync is set on writes through an O_SYNC/O_DSYNC descriptor.
	Sync bool
	// Err is the result (0 on success).
	Err syscall.Errno
}

func (o Op) String() string {
	s := fmt.Sprintf("#%d %s %q", o.Seq, o.Kind, o.Path)
	if o.Path2 != "" {
		s += fmt.Sprintf(" -> %q", o.Path2)
	}
	switch o.Kind {
	case OpWrite, OpFallocate:
		s += fmt.Sprintf(" [%d,+%d)", o.Off, o.Len)
	case OpTruncate:
		s += fmt.Sprintf(" size=%d", o.Off)
	}
	if o.Sync {
		s += " sync"
	}
	if o.Err != 0 {
		s += " err=" + o.Err.Error()
	}
	return s
}

// SetLogging turns the operation log on or off. While on, every mutating
// operation (see Op) is appended to the log when it completes, in
// completion order.
func (f *FS) SetLogging(on bool) { f.logOn.Store(on) }

// Log returns a copy of the operation log.
func (f *FS) Log() []Op {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	return append([]Op(nil), f.oplog...)
}

// ClearLog empties the operation log.
func (f *FS) ClearLog() {
	f.logMu.Lock()
	defer f.logMu.Unlock()
	f.oplog = nil
}

func (f *FS) logging() bool { return f.logOn.Load() }

func (f *FS) record(op Op) {
	if !f.logOn.Load() {
		return
	}
	f.logMu.Lock()
	defer f.logMu.Unlock()
	f.oplog = append(f.oplog, op)
}

func (f *FS) recordCrash() {
	f.record(Op{Seq: f.ops.Load(), Kind: OpCrash})
}
