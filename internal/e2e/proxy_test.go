package e2e

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testkit"
)

// echoServer accepts connections on 127.0.0.1:0 and writes back what it reads; it is closed
// at cleanup.
func echoServer(t *testing.T) string {
	t.Helper()
	ln := testkit.Listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestProxyLag: with a lag, a round trip through the proxy takes it once, even with several
// chunks in flight.
func TestProxyLag(t *testing.T) {
	const lag = 100 * time.Millisecond
	p := StartProxy(t, echoServer(t))
	p.SetLag(lag)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 16)
	start := time.Now()
	for i := range 3 {
		if _, err := c.Write([]byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond) // pacing: three chunks apart, all in flight at once
	}
	got := 0
	for got < 3 {
		n, err := c.Read(buf[got:])
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	el := time.Since(start)
	if string(buf[:3]) != "abc" {
		t.Fatalf("got %q, want abc", buf[:3])
	}
	// The three chunks are delayed once each, overlapping: about lag + 20ms, far below
	// 3 × lag (a sleep per chunk in sequence).
	if el < lag || el >= 3*lag {
		t.Fatalf("three pipelined round trips took %v, want about %v (one lag)", el, lag)
	}
}

// TestProxyTargetLater: a proxy started without a target closes its connections until
// SetTarget names one, then forwards.
func TestProxyTargetLater(t *testing.T) {
	p := StartProxy(t, "")
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes through a proxy without a target, want the connection closed", n)
	}
	c.Close()
	p.SetTarget(echoServer(t))
	c, err = net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil || b[0] != 'x' {
		t.Fatalf("after SetTarget: read %q, %v; want the echo", b, err)
	}
}

// TestRefusedAddr: a connection to RefusedAddr is refused, and the port cannot be bound by
// another server while the test holds it.
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("dial %s: connected, want refused", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("listen %s: bound, want the port held", addr)
	}
}
