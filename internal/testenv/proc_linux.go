package testenv

import "syscall"

// childAttr makes the kernel kill a service when the test binary dies without cleaning up
// (a crashed or killed go test), so no mariadbd or java is left behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
