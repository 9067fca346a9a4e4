//go:build linux

package resp

// The loop's system calls (loop_linux.go): epoll_wait parked in the Go runtime's poller, and
// read, write and a zero-timeout epoll_wait without the runtime's system-call bookkeeping.

import (
	"errors"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// park waits, in the Go runtime's poller, until the loop's epoll descriptor has a ready
// socket (or the sweep interval passes), then polls it. The loop goroutine parks like any
// goroutine waiting for I/O: its thread runs the other goroutines (segment loads, the admin
// port) and no thread sits in a blocking epoll_wait that sysmon would have to hand off.
//
// The deadline wakes the loop for its sweep and its task's Tick (parkMillis). One set at an
// earlier park and still ahead, no later than this park needs, is kept: the loop then wakes
// no later than it must (at worst earlier, for one more round), and a park under load costs
// no timer update. A deadline that has passed is set anew (TestLoopTaskDeadline fails if a
// later one is kept).
func (lp *loop) park(events []unix.EpollEvent) (int, error) {
	lp.parks.Add(1)
	now := time.Now()
	want := now.Add(time.Duration(lp.parkMillis()) * time.Millisecond)
	if d := lp.parkDeadline; !d.After(now) || d.After(want) {
		_ = lp.epf.SetReadDeadline(want)
		lp.parkDeadline = want
	}
	if lp.parkFn == nil {
		lp.parkFn = lp.parkPoll // one closure per loop, not one per park
	}
	lp.parkEvents, lp.parkN, lp.parkErr = events, 0, nil
	err := lp.epraw.Read(lp.parkFn)
	n, perr := lp.parkN, lp.parkErr
	lp.parkEvents = nil
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return 0, nil
		}
		return 0, err
	}
	return n, perr
}

func (lp *loop) parkPoll(uintptr) bool {
	n, err := rawEpollPoll(lp.epfd, lp.parkEvents)
	if errors.Is(err, unix.EINTR) {
		n, err = 0, nil
	}
	lp.parkN, lp.parkErr = n, err
	return n > 0 || err != nil
}

// rawEpollPoll is epoll_wait with a zero timeout (epoll_pwait without a signal mask, which
// every Linux architecture has), without the runtime's system-call bookkeeping: it never
// blocks.
func rawEpollPoll(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// rawRead and rawWrite are read(2) and write(2) on a non-blocking socket without the
// runtime's system-call bookkeeping (entersyscall/exitsyscall): they never block, so the
// scheduler has nothing to hand off. p must not be empty.
func rawRead(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, syscall.EINVAL // makeRoom leaves room; never reached
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawWrite(fd int, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
