//go:build linux

// Command ceiling is the fastest server redis-benchmark can be pointed at: one thread on
// epoll that parses commands with leafd's parser, answers PING with +PONG and every other
// command with :1, and does nothing else (no keys, no IDs, no timeouts). bench/compare.sh runs it with CEILING=1 to show how much
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
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/leafd/leafd/resp"
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
	type conn struct {
		in []byte // unparsed input
		p  *resp.Parser
	}
	conns := map[int]*conn{}
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
					conns[c] = &conn{p: resp.NewParser(resp.DefaultLimits())}
					add(c)
				}
				continue
			}
			r, err := unix.Read(fd, buf)
			if err == unix.EAGAIN {
				continue
			}
			c := conns[fd]
			if r <= 0 || c == nil {
				delete(conns, fd)
				_ = unix.Close(fd)
				continue
			}
			c.in = append(c.in, buf[:r]...)
			out = out[:0]
			used := 0
			for used < len(c.in) {
				args, n, err := c.p.Next(c.in[used:], true)
				if err != nil {
					out = append(out, "-ERR protocol error\r\n"...)
					used = len(c.in)
					c.p.Reset()
					break
				}
				if n == 0 {
					break
				}
				used += n
				if len(args) > 0 && bytes.EqualFold(args[0], []byte("PING")) {
					out = append(out, "+PONG\r\n"...)
				} else if len(args) > 0 {
					out = append(out, ":1\r\n"...)
				}
			}
			c.in = append(c.in[:0], c.in[used:]...)
			if len(out) > 0 {
				_, _ = unix.Write(fd, out)
			}
		}
	}
}
