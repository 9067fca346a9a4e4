//go:build linux

// Command ceiling is the fastest server redis-benchmark can be pointed at: one thread on
// epoll that answers PING with +PONG and every other command with :1, and does nothing else
// (no keys, no IDs, no timeouts). bench/compare.sh runs it with CEILING=1 to show how much
// of a request's cost on this machine is the client's and the kernel's: no server can beat
// redis-server by more than this one does under the same load.
//
// Usage: ceiling -addr 127.0.0.1:PORT [-spin]   (-spin: poll with a zero timeout, never sleep)
package main

import (
	"bytes"
	"flag"
	"log"
	"net"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6390", "listen address")
	spin := flag.Bool("spin", false, "poll with a zero timeout instead of sleeping in epoll_wait")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	lf, err := ln.(*net.TCPListener).File()
	if err != nil {
		log.Fatal(err)
	}
	lfd := int(lf.Fd())
	if err := unix.SetNonblock(lfd, true); err != nil {
		log.Fatal(err)
	}
	ep, err := unix.EpollCreate1(0)
	if err != nil {
		log.Fatal(err)
	}
	add := func(fd int) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			log.Fatal(err)
		}
	}
	add(lfd)
	timeout := 1000
	if *spin {
		timeout = 0
	}
	pending := map[int][]byte{} // unparsed input per connection
	events := make([]unix.EpollEvent, 128)
	buf := make([]byte, 64<<10)
	var out []byte
	for {
		// lf stays reachable: the finalizer of an unreachable *os.File closes its descriptor.
		runtime.KeepAlive(lf)
		n, err := unix.EpollWait(ep, events, timeout)
		if err != nil && err != unix.EINTR {
			log.Fatal(err)
		}
		for _, ev := range events[:max(n, 0)] {
			fd := int(ev.Fd)
			if fd == lfd {
				if c, _, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC); err == nil {
					_ = unix.SetsockoptInt(c, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
					add(c)
				}
				continue
			}
			r, err := unix.Read(fd, buf)
			if err == unix.EAGAIN {
				continue
			}
			if r <= 0 {
				delete(pending, fd)
				_ = unix.Close(fd)
				continue
			}
			in := append(pending[fd], buf[:r]...)
			out = out[:0]
			for {
				name, used, ok := next(in)
				if !ok {
					break
				}
				in = in[used:]
				if bytes.EqualFold(name, []byte("PING")) {
					out = append(out, "+PONG\r\n"...)
				} else {
					out = append(out, ":1\r\n"...)
				}
			}
			pending[fd] = append(pending[fd][:0], in...)
			if len(out) > 0 {
				_, _ = unix.Write(fd, out)
			}
		}
	}
}

// next parses one command (an array of bulk strings, or an inline line) from in and returns
// its name and the bytes it used; ok is false while the command is incomplete.
func next(in []byte) (name []byte, used int, ok bool) {
	eol := bytes.Index(in, []byte("\r\n"))
	if eol < 0 {
		return nil, 0, false
	}
	if in[0] != '*' {
		f := bytes.Fields(in[:eol])
		if len(f) == 0 {
			return nil, eol + 2, true
		}
		return f[0], eol + 2, true
	}
	args, err := strconv.Atoi(string(in[1:eol]))
	if err != nil {
		os.Exit(2)
	}
	pos := eol + 2
	for i := 0; i < args; i++ {
		e := bytes.Index(in[pos:], []byte("\r\n"))
		if e < 0 {
			return nil, 0, false
		}
		l, err := strconv.Atoi(string(in[pos+1 : pos+e]))
		if err != nil {
			os.Exit(2)
		}
		start := pos + e + 2
		if start+l+2 > len(in) {
			return nil, 0, false
		}
		if i == 0 {
			name = in[start : start+l]
		}
		pos = start + l + 2
	}
	return name, pos, true
}
