//go:build linux

package ordered

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The LoopForwarder tests' harness: a loop the test runs itself, and a leader whose bytes
// the test writes.

// manualLoop plays the event loop for a LoopForwarder on the test's goroutine: its own epoll
// set and an eventfd for Wake, and step runs one round (the ready descriptors' Ready, then
// Tick), as resp's loop does.
type manualLoop struct {
	t       *testing.T
	epfd    int
	wakefd  int
	watched map[int]bool
	writing map[int]bool // watched for writable too
	lf      *LoopForwarder
	events  []unix.EpollEvent
	readies int // Ready calls for a readable descriptor
}

// startLoopRig is the set-up of most LoopForwarder tests: a raw leader (and its address), a
// Forwarder with cfg and a manual loop on it, all closed when the test ends, the Forwarder
// first.
func startLoopRig(t *testing.T, cfg ForwarderConfig) (*rawLeader, string, *Forwarder, *manualLoop) {
	t.Helper()
	leader := startRawLeader(t)
	f := NewForwarder(cfg)
	m := newManualLoop(t, f)
	t.Cleanup(func() { _ = f.Close() })
	return leader, leader.ln.Addr().String(), f, m
}

func newManualLoop(t *testing.T, f *Forwarder) *manualLoop {
	t.Helper()
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	wfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wfd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wfd, &ev); err != nil {
		t.Fatal(err)
	}
	m := &manualLoop{t: t, epfd: epfd, wakefd: wfd, watched: map[int]bool{}, writing: map[int]bool{},
		events: make([]unix.EpollEvent, 16)}
	m.lf = f.NewLoopForwarder(m)
	t.Cleanup(func() {
		m.lf.Close()
		_ = unix.Close(epfd)
		_ = unix.Close(wfd)
	})
	return m
}

func (m *manualLoop) Watch(fd int, write bool) error {
	ev := uint32(unix.EPOLLIN)
	if write {
		ev |= unix.EPOLLOUT
	}
	op := unix.EPOLL_CTL_MOD
	if !m.watched[fd] {
		op = unix.EPOLL_CTL_ADD
	}
	e := unix.EpollEvent{Events: ev, Fd: int32(fd)}
	if err := unix.EpollCtl(m.epfd, op, fd, &e); err != nil {
		return err
	}
	m.watched[fd], m.writing[fd] = true, write
	return nil
}

func (m *manualLoop) Unwatch(fd int) {
	delete(m.watched, fd)
	delete(m.writing, fd)
	_ = unix.EpollCtl(m.epfd, unix.EPOLL_CTL_DEL, fd, nil)
}

func (m *manualLoop) Wake() {
	one := [8]byte{1}
	_, _ = unix.Write(m.wakefd, one[:])
}

// step waits up to wait for a ready descriptor, runs the round and returns Tick's deadline.
func (m *manualLoop) step(wait time.Duration) time.Time {
	n, err := unix.EpollWait(m.epfd, m.events, int(wait/time.Millisecond))
	if err != nil && !errors.Is(err, unix.EINTR) {
		m.t.Fatal(err)
	}
	now := time.Now()
	for _, ev := range m.events[:max(n, 0)] {
		fd := int(ev.Fd)
		if fd == m.wakefd {
			var b [8]byte
			_, _ = unix.Read(fd, b[:])
			continue
		}
		r := ev.Events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0
		if r {
			m.readies++
		}
		m.lf.Ready(fd, r, ev.Events&(unix.EPOLLOUT|unix.EPOLLERR) != 0, now)
	}
	return m.lf.Tick(now)
}

// until runs rounds until done reports true, failing the test after limit.
func (m *manualLoop) until(limit time.Duration, what string, done func() bool) {
	m.t.Helper()
	end := time.Now().Add(limit)
	m.lf.Tick(time.Now())
	for !done() {
		if time.Now().After(end) {
			m.t.Fatalf("%s: not after %v", what, limit)
		}
		m.step(10 * time.Millisecond)
	}
}

// started is a call started on the manual loop and whether its Notify ran.
type started struct {
	c    *Call
	done bool
}

func (m *manualLoop) start(f *Forwarder, addr string, reqs ...[][]byte) *started {
	s := &started{c: f.NewCall()}
	for _, r := range reqs {
		s.c.Add(r)
	}
	s.c.Notify = func() { s.done = true }
	m.lf.Start(addr, s.c)
	return s
}

// rawLeader accepts one connection at a time and lets the test read its requests and write
// its replies byte for byte.
type rawLeader struct {
	ln    net.Listener
	conns chan net.Conn
}

func startRawLeader(t *testing.T) *rawLeader {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &rawLeader{ln: ln, conns: make(chan net.Conn, 4)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// The handshake (CLIENT SETNAME) is answered here; the rest is the test's.
			br := bufio.NewReader(c)
			if _, err := readCommand(br); err != nil {
				_ = c.Close()
				continue
			}
			_, _ = io.WriteString(c, "+OK\r\n")
			l.conns <- &bufConn{Conn: c, br: br}
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return l
}

type bufConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.br.Read(p) }

// accept waits for the forwarder's connection while the manual loop runs.
func (l *rawLeader) accept(m *manualLoop) *bufConn {
	m.t.Helper()
	var c net.Conn
	m.until(5*time.Second, "the forwarder's connection", func() bool {
		select {
		case c = <-l.conns:
			return true
		default:
			return false
		}
	})
	m.t.Cleanup(func() { _ = c.Close() })
	return c.(*bufConn)
}

// readRequests reads n requests on the leader's side of c (the manual loop runs meanwhile,
// on another goroutine's behalf: the caller runs it).
func readRequests(t *testing.T, c *bufConn, n int) []string {
	t.Helper()
	var out []string
	for range n {
		args, err := readCommand(c.br)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.Join(args, " "))
	}
	return out
}
