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

// incarnation is "boot=<boot id> dev=<device> ino=<inode> lock=<inode>" of dir and its lock
// file, or "" when the boot id or an identity is unknown.
func incarnation(dir string, lock *os.File) string {
	boot := bootID()
	fi, err := os.Stat(dir)
	if err != nil || boot == "" {
		return ""
	}
	lfi, err := lock.Stat()
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	lst, lok := lfi.Sys().(*syscall.Stat_t)
	if !ok || !lok {
		return ""
	}
	return fmt.Sprintf("boot=%s dev=%d ino=%d lock=%d", boot, uint64(st.Dev), uint64(st.Ino), uint64(lst.Ino))
}
