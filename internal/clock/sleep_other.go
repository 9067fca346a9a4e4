//go:build !(linux || freebsd || netbsd || openbsd)

package clock

import "time"

// osSleep: no precise OS sleep here; the caller yields until its deadline instead.
func osSleep(time.Duration) {}
