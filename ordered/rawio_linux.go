//go:build linux

package ordered

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// rawIO reads and writes a connection to a leader with read(2) and write(2) issued without
// the runtime's system-call bookkeeping, inside the poller's RawConn callbacks (which wait
// for readiness and honour the deadlines). A write on loopback runs the receiver's side of
// TCP too and can take tens of microseconds: as an ordinary system call that long, the
// runtime's monitor hands its processor to another thread each time, a context switch on a
// busy core. The socket is non-blocking, so neither call blocks.
type rawIO struct {
	rc      syscall.RawConn
	buf     []byte // of the call in progress
	n       int
	err     error
	readFn  func(uintptr) bool
	writeFn func(uintptr) bool
}

// newRawIO returns the raw reader and writer of nc, or nil when nc has no raw descriptor
// (the callers then use nc itself).
func newRawIO(nc net.Conn) *rawIO {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawIO{rc: rc}
	r.readFn, r.writeFn = r.read, r.write // one closure each, not one per call
	return r
}

func (r *rawIO) read(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.buf[0])), uintptr(len(r.buf)))
		switch e {
		case 0:
			r.n = int(n)
			if n == 0 {
				r.err = io.EOF
			}
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.err = e
		return true
	}
}

// Read is io.Reader (for the reader goroutine's bufio.Reader only).
func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.buf, r.n, r.err = p, 0, nil
	if err := r.rc.Read(r.readFn); err != nil {
		r.buf = nil
		return 0, err
	}
	r.buf = nil
	return r.n, r.err
}

func (r *rawIO) write(fd uintptr) bool {
	for r.n < len(r.buf) {
		b := r.buf[r.n:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case 0:
			r.n += int(n)
			continue
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		r.err = e
		return true
	}
	return true
}

// writeAll writes b whole (the writer goroutine's only). A rawIO is used by one reader and
// one writer goroutine: they must not share it, so each has its own (newRawIO per side).
func (r *rawIO) writeAll(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	r.buf, r.n, r.err = b, 0, nil
	err := r.rc.Write(r.writeFn)
	r.buf = nil
	if err != nil {
		return err
	}
	return r.err
}

// rawReadFD and rawWriteFD are read(2) and write(2) of a non-blocking socket the event loop
// owns (LoopForwarder), without the runtime's system-call bookkeeping: they never block.
func rawReadFD(fd int, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func rawWriteFD(fd int, p []byte) (int, error) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
