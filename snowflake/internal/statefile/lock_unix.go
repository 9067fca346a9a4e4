//go:build unix

package statefile

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking flock. The kernel drops it when the process dies, so
// a crash never leaves a stale lock.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// incarnation is "boot=<boot id> dev=<device> ino=<inode>" of dir, or "" when the boot id or
// the directory's identity is unknown.
func incarnation(dir string) string {
	boot := bootID()
	fi, err := os.Stat(dir)
	if err != nil || boot == "" {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("boot=%s dev=%d ino=%d", boot, uint64(st.Dev), uint64(st.Ino))
}
