//go:build linux || freebsd || netbsd || openbsd

package clock

import (
	"syscall"
	"time"
)

// osSleep blocks the thread in nanosleep: microsecond precision, unlike the runtime's timers.
func osSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // interrupted early: the caller spins the rest
}
