//go:build linux

package statefile

import (
	"os"
	"strings"
)

// bootID is the kernel's random id of this boot; a test replaces it to model a reboot.
var bootID = func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
