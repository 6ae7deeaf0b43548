//go:build !(linux || darwin || freebsd)

package node

import (
	"fmt"
	"runtime"
)

// statfsFree cannot read the free space here: such a node is never
// called low (checkDisk), so --min-free-disk has no effect.
func statfsFree(dir string) (uint64, error) {
	return 0, fmt.Errorf("free space of %s: not supported on %s", dir, runtime.GOOS)
}
