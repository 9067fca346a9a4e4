//go:build unix

package statefile

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock. The kernel drops it when the process dies, so
// a crash never leaves a stale lock.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
