package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childAttr makes the kernel kill a service when the test binary dies without cleaning up
// (a crashed or killed go test), so no mariadbd or java is left behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until every thread of pid is in the stopped state ('T' in
// /proc/<pid>/task/<tid>/stat), for at most d.
func waitStopped(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if allStopped(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func allStopped(pid int) bool {
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "stat"))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		// The state follows the command name in parentheses, which may contain spaces.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' && b[i+2] != 't' {
			return false
		}
	}
	return true
}
