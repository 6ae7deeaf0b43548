//go:build !(linux || darwin || freebsd)

package storage

import (
	"fmt"
	"runtime"
)

// FreeBytes cannot read the free space here: such a node is never
// called low (checkDisk), so --min-free-disk has no effect.
func FreeBytes(dir string) (uint64, error) {
	return 0, fmt.Errorf("free space of %s: not supported on %s", dir, runtime.GOOS)
}
