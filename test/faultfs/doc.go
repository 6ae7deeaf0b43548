// Package faultfs is a fault-injecting file system for tests, in the
// manner of Jepsen's lazyfs: a FUSE pass-through over a backing directory,
// mounted at a mount point, that can stall (Freeze), fail at an exact
// operation (FailFrom), and lose power (Crash) under the strict POSIX
// durability model below. Tests use it in-process (os calls on the mount)
// or through child processes whose data directories lie under the mount.
//
// # API
//
//	func Available() error                    // nil, or wraps ErrUnavailable (not root, no /dev/fuse)
//	func Mount(backing, mountpoint string, opts ...Option) (*FS, error)
//	func MountT(t testing.TB, backing, mountpoint string, opts ...Option) *FS // skips if unavailable; Close on Cleanup
//	func UnmountStale(mountpoint string) error // clears a mount left by a dead test
//	func WithLog() Option; func WithDebug() Option
//	func (*FS) Freeze(); Thaw(); Waiting() int
//	func (*FS) FailFrom(n int); Cut() bool; Ops() int64
//	func (*FS) SetLogging(on bool); Log() []Op; ClearLog()
//	func (*FS) Crash() error; Close() error
//	func (*FS) Backing() string; Mountpoint() string; Path(elem ...string) string
//
// Mount needs root and /dev/fuse; it mounts with go-fuse's direct mount
// (no fusermount). Whatever backing holds at Mount is durable.
//
// # The crash model (the contract of Crash)
//
// Crash keeps exactly what a strict POSIX file system guarantees to have
// on disk, and drops everything else:
//
//   - File data: every byte written to a file since that file's last
//     fsync or fdatasync is lost, and so is every size change: a file
//     extended since goes back to its size at its last fsync, a truncate
//     since is undone, fallocate growth or hole punching is undone. A
//     write through an O_SYNC or O_DSYNC descriptor is durable at once;
//     the kernel follows each such write with an fsync of the file, so the
//     file's other unsynced writes become durable with it.
//   - Directory entries: every entry change in a directory (create, mkdir,
//     mknod, symlink, link, rename, unlink, rmdir) made since that
//     directory's last fsync is lost: a name made is gone, a name removed
//     is back, pointing at the inode it named, whose content is that
//     inode's durable content. A rename is undone on each side on its own:
//     the old name comes back unless the source directory was fsynced, the
//     new name disappears unless the destination directory was fsynced
//     (and the entry it replaced comes back). Fsync of a file does not make
//     its name durable; fsync of a directory does not make its files' data
//     durable.
//   - So a file created and never fsynced whose directory was fsynced
//     exists empty (or with its last fsynced content), and a directory
//     made and never fsynced itself comes back empty even if its parent
//     was fsynced (hashicorp/raft's FileSnapshotStore loses state.bin and
//     meta.json this way: see TestRaftFileSnapshotStore).
//   - The durable tree is read from the root down through each
//     directory's durable entries. A directory that two durable entries
//     name (a directory rename undone on one side only) appears twice, as
//     two copies; an entry that would put a directory inside itself is
//     dropped. File inodes keep their identity: hard links stay links.
//   - Not modelled: metadata (mode, owner, times, xattrs) is kept as it
//     is; sync(2) and syncfs(2) make nothing durable; the real disk is
//     never fsynced (its durability is not what is modelled).
//
// Kill the processes that use the mount before Crash (a power cut kills
// them too). If files are still open, Crash does not wait: it detaches the
// mount lazily, and those descriptors get EIO from then on. Requests
// blocked by Freeze, and any in flight, fail with EIO and have no effect.
// After Crash the backing directory holds exactly the durable state (a
// test may inspect it directly), and the same mount point serves it again
// through a new mount, so no kernel cache holds pre-crash data. Crash
// clears Freeze and FailFrom; Ops and the log go on (the log gets an
// OpCrash marker).
//
// Close is a clean shutdown: it thaws, unmounts (lazily if busy) and leaves
// the backing directory with everything written, durable or not.
//
// # Faults
//
// Freeze makes every FUSE request block until Thaw, reads included, except
// the ones no process waits for (release after close(2), forget). A
// request blocked by Freeze that the kernel interrupts (its process got a
// fatal signal) is answered EINTR, so frozen processes can be killed.
// Close and Crash work while frozen.
//
// FailFrom(n) counts mutating operations from the call: the n-th fails
// with EIO without effect, and from then on every request, mutating or
// not, fails with EIO (a dead disk) until Crash. The mutating operations,
// counted once per FUSE request, are: create, mkdir, mknod, symlink, link,
// rename, unlink, rmdir, write (a large write(2) may arrive as several
// requests of up to 128 KiB), truncate and every other setattr (chmod,
// chown, utimes), fallocate, fsync and fsyncdir. Open, read, close
// (flush/release), lookup, readdir and statfs are not counted. Ops returns
// the count since Mount; operations refused after the cut are not
// counted. The log (WithLog, SetLogging) records each mutating operation
// as an Op with its number, kind, path(s), range and result, which lets a
// test check, for example, that every name a program relies on was made
// durable.
//
// # Implementation and invariants
//
// Operations pass through to the backing directory at once. For undo, the
// model keeps, per file inode, the size at its last fsync and the first
// pre-image of each 4 KiB page changed since (fsync drops them: it copies
// nothing), and per directory inode a journal of the first previous value
// of each name changed since its last fsync (fsyncdir drops it). Inodes
// are named by backing inode numbers. An inode that loses its last name
// while a journal still holds it is moved into a graveyard,
// <backing>/.faultfs/grave/<ino>, and deleted once no journal holds it.
// .faultfs is reserved: invisible through the mount, refused as a name,
// removed by Crash and Close. Crash builds the durable tree in
// .faultfs/stage (hard-linking file inodes after putting their durable
// content back), then swaps it in. The model is guarded by one mutex;
// namespace changes hold it, writes hold only a per-file lock; Freeze
// never holds either while blocking. Freeze, the cut and retired mounts
// apply at the FUSE protocol level, so they cover every request.
//
// # Limits
//
//   - Never mmap a file of the mount in the process that serves it (the
//     test process): a page fault on such a mapping parks a thread outside
//     any system call, and a garbage collection that starts meanwhile
//     waits for it forever while the FUSE server is stopped. Run programs
//     that mmap (bbolt, raft-boltdb, raft-wal's meta store) in child
//     processes, as the tests here do. Likewise a test process that dies
//     with files of its own mount open can hang in exit; the next Mount or
//     UnmountStale at that mount point aborts the connection and frees it.
//   - Shared writable mmap works, but its stores reach the model when the
//     kernel writes the pages back (msync, fsync, munmap, reclaim), not
//     when they are made.
//   - Locks (flock, fcntl) are the kernel's own, local to this machine:
//     they work across processes here and vanish at Crash.
//   - Extended attributes return ENOTSUP; O_TMPFILE, copy_file_range
//     offload (the kernel falls back to read/write) and ioctls are not
//     supported; fallocate's collapse/insert range saves the whole tail.
//   - A shrinking truncate saves the truncated durable pages (its cost is
//     the durable size cut off); Crash walks the whole backing tree.
package faultfs
