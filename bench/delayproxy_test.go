package bench

import (
	"net"
	"sync"
	"testing"
	"time"
)

// delayProxy forwards loopback TCP to a target and holds every chunk the target sends back
// for a fixed delay before passing it on: each request/reply round trip between the client
// and the target takes delay longer, like a database at that network distance. It is a delay
// line, not a sleep per chunk: chunks keep their order and spacing, and several chunks in
// flight are each delayed once (a sleep per chunk would add the delay once per chunk).
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func startDelayProxy(t testing.TB, target string, delay time.Duration) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

func (p *delayProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *delayProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *delayProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			continue
		}
		p.wg.Add(3)
		go p.pipe(c, up) // requests: at once
		chunks := make(chan chunk, 4096)
		go p.read(up, chunks)     // replies: stamped on arrival ...
		go p.write(c, up, chunks) // ... passed on delay later
	}
}

type chunk struct {
	at   time.Time
	data []byte
}

func (p *delayProxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	defer p.untrack(src, dst)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *delayProxy) read(src net.Conn, out chan<- chunk) {
	defer p.wg.Done()
	defer close(out)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			out <- chunk{at: time.Now().Add(p.delay), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			return
		}
	}
}

func (p *delayProxy) write(dst, up net.Conn, in <-chan chunk) {
	defer p.wg.Done()
	defer p.untrack(dst, up)
	for c := range in {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d)
		}
		if _, err := dst.Write(c.data); err != nil {
			// Drain so that read never blocks on a full channel; untrack closes up.
			p.untrack(dst, up)
			for range in {
			}
			return
		}
	}
}

// TestDelayProxy: a round trip through the proxy takes the delay once, even with several
// chunks in flight.
func TestDelayProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() { // echo server
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
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
	const delay = 100 * time.Millisecond
	p := startDelayProxy(t, ln.Addr().String(), delay)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	start := time.Now()
	for i := range 3 {
		if _, err := c.Write([]byte{byte('a' + i)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
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
	// The three chunks are delayed once each, overlapping: about delay + 20ms, far below
	// 3 × delay (a sleep per chunk in sequence).
	if el < delay || el >= 3*delay {
		t.Fatalf("three pipelined round trips took %v, want about %v (one delay)", el, delay)
	}
	c.Close()
	<-done
}
