//go:build unix

package testaddr

import (
	"os"
	"syscall"
)

// lock takes an exclusive flock on f without waiting: false when another
// open of the file (in any process) holds it.
func lock(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}
