package e2e

// A loopback TCP proxy between a client and a server (leafd and its database or ZooKeeper, a
// benchmark client and leafd): it forwards, delays every chunk, holds every reply for a
// fixed lag (a server at a network distance), blackholes (accepts and forwards nothing) or
// resets connections, and moves to another target like a virtual IP on failover.

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ProxyMode is what the proxy does with connections and the chunks they carry.
type ProxyMode int32

const (
	ProxyPass      ProxyMode = iota // forward as is
	ProxyDelay                      // forward each chunk after the configured delay
	ProxyBlackhole                  // accept and read, forward nothing, never close
	ProxyReset                      // close every connection at once
)

func (m ProxyMode) String() string {
	return [...]string{"pass", "delay", "blackhole", "reset"}[m]
}

// Proxy listens on 127.0.0.1:0 and forwards to target according to its mode and lag, which
// can be changed at any time. It is closed at test cleanup (or Close), waiting for its
// goroutines.
type Proxy struct {
	target atomic.Pointer[string]
	rr     atomic.Pointer[[]string] // SetTargets: new connections dealt round-robin
	next   atomic.Uint64
	ln     net.Listener
	mode   atomic.Int32
	delay  atomic.Int64 // ns, for ProxyDelay
	lag    atomic.Int64 // ns, SetLag
	chunks atomic.Int64 // reads from the dialing side forwarded (Chunks)

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartProxy starts a proxy to target in pass mode. An empty target is one set later
// (SetTarget, once the server has reported its port): until then connections are closed.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.target.Store(&target)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Chunks is the number of reads from the side that dialed the proxy that it forwarded: a
// peer that waits for each reply before it sends the next request costs one per request.
func (p *Proxy) Chunks() int64 { return p.chunks.Load() }

// SetMode switches the behaviour. Leaving blackhole, and entering reset, closes every open
// connection: a blackholed stream has lost bytes and cannot carry the protocol any more.
func (p *Proxy) SetMode(m ProxyMode, delay time.Duration) {
	p.delay.Store(int64(delay))
	old := ProxyMode(p.mode.Swap(int32(m)))
	if m == ProxyReset || (old == ProxyBlackhole && m != ProxyBlackhole) {
		p.closeConns()
	}
}

// SetLag holds every chunk the target sends back for d before passing it on, so that every
// request/reply round trip takes d longer, like a server at that network distance. It is a
// delay line, not a sleep per chunk (ProxyDelay): chunks keep their order and spacing, and
// chunks in flight together are each delayed once. Requests pass at once.
func (p *Proxy) SetLag(d time.Duration) { p.lag.Store(int64(d)) }

// SetTarget points new connections at target and closes every open one, as a virtual IP
// that moves to another server does.
func (p *Proxy) SetTarget(target string) {
	p.target.Store(&target)
	p.closeConns()
}

// SetTargets deals new connections round-robin over targets, as a load balancer in front of
// the members of a multi-writer cluster does, and closes every open one.
func (p *Proxy) SetTargets(targets ...string) {
	p.rr.Store(&targets)
	p.closeConns()
}

// CloseConns closes every open connection (their clients reconnect, to the next target).
func (p *Proxy) CloseConns() { p.closeConns() }

// dial is the target of a new connection.
func (p *Proxy) dial() *string {
	if ts := p.rr.Load(); ts != nil && len(*ts) > 0 {
		return &(*ts)[p.next.Add(1)%uint64(len(*ts))]
	}
	return p.target.Load()
}

func (p *Proxy) current() ProxyMode { return ProxyMode(p.mode.Load()) }

// track registers c; false when the proxy is closed (c is then closed).
func (p *Proxy) track(cs ...net.Conn) bool {
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

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *Proxy) closeConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Close stops accepting, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.closeConns()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		switch p.current() {
		case ProxyReset:
			c.Close()
			continue
		case ProxyBlackhole:
			if p.track(c) {
				p.wg.Add(1)
				go p.sink(c)
			}
			continue
		}
		tgt := p.target.Load()
		to := *p.dial()
		if to == "" {
			c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", to, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			continue
		}
		// SetTarget or SetMode(reset) may have run while we dialed: they closed what was
		// tracked then, so close this one ourselves.
		if p.target.Load() != tgt || p.current() == ProxyReset {
			p.untrack(c, up)
			continue
		}
		p.wg.Add(3)
		go p.pipe(c, up, &p.chunks) // requests
		replies := make(chan chunk, 4096)
		go p.read(up, replies)     // replies: stamped on arrival ...
		go p.write(c, up, replies) // ... and passed on after the lag
	}
}

// sink reads and drops everything from c until it is closed.
func (p *Proxy) sink(c net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(io.Discard, c)
	p.untrack(c)
}

// forward writes one chunk to dst according to the mode current now; false ends the
// connection.
func (p *Proxy) forward(dst net.Conn, b []byte) (sent, ok bool) {
	switch p.current() {
	case ProxyDelay:
		time.Sleep(time.Duration(p.delay.Load()))
	case ProxyBlackhole:
		return false, true // swallow: the peer waits for an answer that never comes
	case ProxyReset:
		return false, false
	}
	_, err := dst.Write(b)
	return err == nil, err == nil
}

// pipe copies src to dst chunk by chunk, applying the mode current at each chunk; count,
// when set, counts the chunks forwarded.
func (p *Proxy) pipe(src, dst net.Conn, count *atomic.Int64) {
	defer p.wg.Done()
	defer p.untrack(src, dst)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			sent, ok := p.forward(dst, buf[:n])
			if !ok {
				return
			}
			if sent && count != nil {
				count.Add(1)
			}
		}
		if err != nil {
			return // EOF, reset, or closed by SetMode/Close: the other direction follows
		}
	}
}

// chunk is a read of the target's replies and when it may be passed on.
type chunk struct {
	at   time.Time
	data []byte
}

// read stamps each read of src with the time the lag lets it go, in order.
func (p *Proxy) read(src net.Conn, out chan<- chunk) {
	defer p.wg.Done()
	defer close(out)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			out <- chunk{at: time.Now().Add(time.Duration(p.lag.Load())), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			return
		}
	}
}

// write passes each chunk on to dst once its time has come, applying the mode current then.
func (p *Proxy) write(dst, src net.Conn, in <-chan chunk) {
	defer p.wg.Done()
	defer func() {
		p.untrack(dst, src)
		for range in { // read ends on the closed src; never leave it blocked on a full channel
		}
	}()
	for c := range in {
		if d := time.Until(c.at); d > 0 {
			time.Sleep(d) // the lag: the chunk's own time, not a pause per chunk
		}
		if _, ok := p.forward(dst, c.data); !ok {
			return
		}
	}
}
