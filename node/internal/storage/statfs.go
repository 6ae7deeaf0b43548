//go:build linux || darwin || freebsd

package storage

import "syscall"

// FreeBytes is the space, in bytes, that an unprivileged process may
// still write on the file system holding dir (statfs: available blocks
// times the block size).
func FreeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}
