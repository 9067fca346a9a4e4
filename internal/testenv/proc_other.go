//go:build !linux

package testenv

import (
	"syscall"
	"time"
)

func childAttr() *syscall.SysProcAttr { return nil }

// waitStopped cannot see thread states here; it gives the stop a moment to land.
func waitStopped(pid int, d time.Duration) bool {
	time.Sleep(100 * time.Millisecond)
	return true
}
