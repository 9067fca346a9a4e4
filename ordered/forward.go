package ordered

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// ForwardClientName is the CLIENT SETNAME of the Forwarder's connections: an instance never
// forwards again a request that came through one (a leader that lost its lease answers
// TRYAGAIN instead), so a request cannot travel in a loop.
const ForwardClientName = "leafd-forward"

// ErrUnreachable: the leader did not answer (dial, write or reply failed or timed out). The
// request may or may not have run there; its IDs, if any, are never issued by anyone else.
var ErrUnreachable = errors.New("ordered: leader unreachable")

// ForwarderConfig configures a Forwarder. Zero fields take the defaults given.
type ForwarderConfig struct {
	// Password is sent with AUTH on each new connection (the cluster's --requirepass).
	Password string
	// Conns is the number of connections per leader (default 2): each carries many clients'
	// requests, pipelined.
	Conns int
	// Timeout bounds a dial, a write, and the wait for the oldest reply outstanding (default
	// 1s): a leader that stops answering fails its connection's requests with ErrUnreachable.
	Timeout time.Duration
	// MaxPending bounds the requests queued or outstanding on one connection (default 4096).
	MaxPending int
	// Backoff: after a failed dial, requests to that leader fail at once for this long
	// (default 100ms).
	Backoff time.Duration
	Log     *zap.Logger
}

// Forwarder carries requests to leaders over pooled RESP connections: per connection one
// writer goroutine writes every request queued since its last write in one write (a batch of
// many clients' requests) and one reader goroutine matches the replies to the requests in
// order (FIFO). A Call holds one request or a client's whole pipeline: its requests go on one
// connection, back to back in one write, so they run at the leader in their order and cost
// one round trip together. Run blocks its caller until the call's last reply; no goroutine
// is started per request. Safe for concurrent use. On an event loop, calls go out on the
// loop's own connections instead (NewLoopForwarder, loopfwd_linux.go).
type Forwarder struct {
	cfg    ForwarderConfig
	mu     sync.Mutex
	peers  map[string]*peer
	known  atomic.Pointer[map[string]*peer] // a copy of peers, read without the lock
	loops  []*LoopForwarder                 // NewLoopForwarder's (loopfwd_linux.go)
	closed bool
	wg     sync.WaitGroup
	calls  sync.Pool

	writes, requests atomic.Int64
}

// Writes is the number of writes to leaders so far, Requests the requests they carried: a
// pipeline forwarded whole costs one write (one round trip), not one per request.
func (f *Forwarder) Writes() int64 { return f.writes.Load() }

// Requests is the number of requests written to leaders so far.
func (f *Forwarder) Requests() int64 { return f.requests.Load() }

// NewForwarder returns a Forwarder.
func NewForwarder(cfg ForwarderConfig) *Forwarder {
	if cfg.Conns <= 0 {
		cfg.Conns = 2
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 4096
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	f := &Forwarder{cfg: cfg, peers: map[string]*peer{}}
	f.calls.New = func() any { return &Call{done: make(chan struct{}, 1)} }
	return f
}

// Reply is one RESP reply as read from the leader.
type Reply struct {
	Kind  byte // ':' integer, '-' error, '+' simple string, '$' bulk string, '*' array, '_' null
	Int   int64
	Str   []byte // text of '-', '+', '$'
	Elems []Reply
}

// Call is one or more requests forwarded together (NewCall, Add, Run), and their replies.
type Call struct {
	buf  []byte
	n    int // requests in buf
	got  int // replies matched (the reader's, under the pconn's lock)
	done chan struct{}
	// Replies holds one reply per request, in the requests' order (valid after Run when Err
	// is nil and Raw is nil).
	Replies []Reply
	// Raw, when not nil once the call finished without Err, holds every reply instead, as
	// the leader sent it, back to back: a LoopForwarder's call whose replies are all
	// integers, bulk strings (not null), simple strings or errors (without a CR inside),
	// the same bytes in RESP2 and RESP3 and as a client connection would encode them.
	// Replies is then not filled. It aliases the call's own buffer (until Release).
	Raw   []byte
	raw   []byte // the replies read so far (LoopForwarder)
	mixed bool   // a reply of raw is not one Raw may carry
	Err   error
	// Notify, when set, is called instead of waking Run's caller: once, when every reply is
	// in or Err is set, on a goroutine of the Forwarder's (or within Start). Start needs it.
	Notify func()
}

// NewCall returns an empty call (from a pool): Add its requests, Run it, Release it.
func (f *Forwarder) NewCall() *Call {
	c := f.calls.Get().(*Call)
	c.reset()
	return c
}

// reset empties c for new requests.
func (c *Call) reset() {
	c.buf, c.n, c.got, c.Err, c.Notify = c.buf[:0], 0, 0, nil, nil
	c.Raw, c.raw, c.mixed = nil, c.raw[:0], false
}

// Add appends a request to c (before Run).
func (c *Call) Add(args [][]byte) {
	c.buf = appendCommand(c.buf, args)
	c.n++
}

// Len is the number of requests added.
func (c *Call) Len() int { return c.n }

// Run sends c's requests to the leader at addr, in order, on one connection and in one
// write, and waits for every reply (or Err: then none of the replies is valid).
func (f *Forwarder) Run(addr string, c *Call) {
	if c.n == 0 {
		return
	}
	if f.send(addr, c) {
		<-c.done
	}
}

// Start is Run without the wait: c.Notify (set) is called once the replies or Err are in;
// when c fails at once, within Start.
func (f *Forwarder) Start(addr string, c *Call) {
	if c.n == 0 || !f.send(addr, c) {
		c.Notify()
	}
}

// send queues c for addr; false when it failed at once (c.Err set).
func (f *Forwarder) send(addr string, c *Call) bool {
	if cap(c.Replies) < c.n {
		c.Replies = append(c.Replies[:cap(c.Replies)], make([]Reply, c.n-cap(c.Replies))...)
	}
	c.Replies = c.Replies[:c.n]
	p, err := f.peer(addr)
	if err == nil {
		err = p.pick().send(c) // queued: c is the Forwarder's until it finishes
	}
	if err != nil {
		c.Err = err
		return false
	}
	return true
}

// finish wakes c's waiter (Run) or calls its Notify (Start).
func (c *Call) finish() {
	if c.Notify != nil {
		c.Notify()
		return
	}
	c.done <- struct{}{}
}

// Do sends args to the leader at addr and waits for the reply (Replies[0], or Err); pass the
// call to Release when done with the reply.
func (f *Forwarder) Do(addr string, args [][]byte) *Call {
	c := f.NewCall()
	c.Add(args)
	f.Run(addr, c)
	return c
}

// Release returns c for reuse; its replies must not be used afterwards.
func (f *Forwarder) Release(c *Call) {
	if cap(c.buf) > 64<<10 {
		c.buf = nil
	}
	if cap(c.raw) > 64<<10 {
		c.raw = nil
	}
	c.Raw = nil
	if cap(c.Replies) > 1024 {
		c.Replies = nil
	}
	f.calls.Put(c)
}

// Close closes every connection and waits for their goroutines. Requests outstanding fail
// with ErrUnreachable. Idempotent.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	peers := f.peers
	f.peers = map[string]*peer{}
	f.known.Store(nil)
	loops := f.loops
	f.mu.Unlock()
	for _, lf := range loops {
		lf.close()
	}
	for _, p := range peers {
		for _, pc := range p.conns {
			pc.fail(nil, errors.New("forwarder closed"), true)
		}
	}
	f.wg.Wait()
	return nil
}

func (f *Forwarder) peer(addr string) (*peer, error) {
	if m := f.known.Load(); m != nil { // the common case: no lock
		if p := (*m)[addr]; p != nil {
			return p, nil
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, fmt.Errorf("%w: %s: the forwarder is closed", ErrUnreachable, addr)
	}
	p := f.peers[addr]
	if p == nil {
		p = &peer{addr: addr, conns: make([]*pconn, f.cfg.Conns)}
		for i := range p.conns {
			p.conns[i] = &pconn{f: f, p: p, addr: addr}
		}
		f.peers[addr] = p
		m := make(map[string]*peer, len(f.peers))
		for k, v := range f.peers {
			m[k] = v
		}
		f.known.Store(&m)
	}
	return p, nil
}

// peer is one leader's connections. Calls go to the connection rr names until its writer
// takes them: the calls queued meanwhile share that write, and the next ones go to the next
// connection.
type peer struct {
	addr  string
	conns []*pconn
	rr    atomic.Uint64
}

func (p *peer) pick() *pconn {
	return p.conns[p.rr.Load()%uint64(len(p.conns))]
}

// pconn is one pipelined connection slot to a leader: at most one live link at a time,
// dialed again on demand after a failure.
type pconn struct {
	f    *Forwarder
	p    *peer
	addr string

	mu        sync.Mutex
	cur       *link // nil: not connected
	dialing   bool
	closed    bool      // the Forwarder closed
	downUntil time.Time // after a failed dial
	queue     []*Call   // to write, in order
	inflight  []*Call   // written on cur, awaiting their replies, in order
	pending   int       // requests of queue and inflight
}

// link is one TCP connection of a pconn and its two goroutines.
type link struct {
	nc   net.Conn
	wake chan struct{} // a request was queued
	dead chan struct{} // closed when the link failed
}

func (l *link) nudge() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// send queues c; the caller then waits for c.finish. A connection is dialed on demand, on a
// goroutine started by the first sender that finds none (a sender on an event loop must not
// wait for the dial).
func (pc *pconn) send(c *Call) error {
	pc.mu.Lock()
	if pc.closed {
		pc.mu.Unlock()
		return fmt.Errorf("%w: %s: the forwarder is closed", ErrUnreachable, pc.addr)
	}
	if pc.cur == nil && !pc.dialing && time.Now().Before(pc.downUntil) {
		pc.mu.Unlock()
		return fmt.Errorf("%w: %s: the last connection attempt failed", ErrUnreachable, pc.addr)
	}
	if pc.pending+c.n > pc.f.cfg.MaxPending {
		pc.mu.Unlock()
		return fmt.Errorf("%w: %s: %d requests outstanding on the connection", ErrUnreachable, pc.addr, pc.f.cfg.MaxPending)
	}
	pc.queue = append(pc.queue, c)
	pc.pending += c.n
	l := pc.cur
	dial := l == nil && !pc.dialing
	if dial {
		pc.dialing = true
		pc.f.wg.Add(1) // under mu, not closed: before Close's fail, so before its Wait
	}
	pc.mu.Unlock()
	switch {
	case dial:
		go pc.connect()
	case l != nil:
		l.nudge()
	}
	return nil
}

// connect dials, authenticates and names the connection, then starts its writer and reader;
// on failure every queued request fails.
func (pc *pconn) connect() {
	defer pc.f.wg.Done()
	cfg := pc.f.cfg
	nc, err := handshake(pc.addr, cfg)
	pc.mu.Lock()
	pc.dialing = false
	if err == nil && pc.closed {
		err = errors.New("forwarder closed")
	}
	if err != nil {
		if nc != nil {
			_ = nc.Close()
		}
		pc.downUntil = time.Now().Add(cfg.Backoff)
		q := pc.queue
		pc.queue, pc.pending = nil, 0
		pc.mu.Unlock()
		cfg.Log.Warn("ordered: cannot reach the leader", zap.String("leader", pc.addr), zap.Error(err))
		for _, c := range q {
			c.Err = fmt.Errorf("%w: %s: %v", ErrUnreachable, pc.addr, err)
			c.finish()
		}
		return
	}
	l := &link{nc: nc, wake: make(chan struct{}, 1), dead: make(chan struct{})}
	pc.cur = l
	pc.mu.Unlock()
	pc.f.wg.Add(2)
	go pc.writer(l)
	go pc.reader(l)
	l.nudge()
}

// handshake dials addr, authenticates and names the connection (ForwardClientName).
func handshake(addr string, cfg ForwarderConfig) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	_ = nc.SetDeadline(time.Now().Add(cfg.Timeout))
	var b []byte
	n := 1
	if cfg.Password != "" {
		b = appendCommand(b, [][]byte{[]byte("AUTH"), []byte(cfg.Password)})
		n++
	}
	b = appendCommand(b, [][]byte{[]byte("CLIENT"), []byte("SETNAME"), []byte(ForwardClientName)})
	if _, err := nc.Write(b); err != nil {
		return nc, err
	}
	br := bufio.NewReader(nc)
	for range n {
		var r Reply
		if err := readReply(br, &r, 0); err != nil {
			return nc, err
		}
		if r.Kind == '-' {
			return nc, fmt.Errorf("handshake refused: %s", r.Str)
		}
	}
	if br.Buffered() > 0 {
		return nc, errors.New("handshake: unexpected data")
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, nil
}

// writer writes every queued request in one write, moving them to inflight first (so the
// reader finds them in the order they went out).
func (pc *pconn) writer(l *link) {
	defer pc.f.wg.Done()
	var buf []byte
	write := func(b []byte) error { _, err := l.nc.Write(b); return err }
	if w := newRawIO(l.nc); w != nil {
		write = w.writeAll
	}
	for {
		select {
		case <-l.dead:
			return
		case <-l.wake:
		}
		// Let the goroutines that are about to queue calls (many clients' requests read in
		// one round of the event loop) run first: they share this write instead of each
		// costing one (a write on loopback also runs the receiver's side of TCP).
		runtime.Gosched()
		pc.mu.Lock()
		if pc.cur != l {
			pc.mu.Unlock()
			return
		}
		if len(pc.queue) == 0 {
			pc.mu.Unlock()
			continue
		}
		now := time.Now()
		if len(pc.inflight) == 0 { // the oldest reply outstanding is now one of these
			_ = l.nc.SetReadDeadline(now.Add(pc.f.cfg.Timeout))
		}
		buf = buf[:0]
		n := 0
		for _, c := range pc.queue {
			buf = append(buf, c.buf...)
			n += c.n
			pc.inflight = append(pc.inflight, c)
		}
		clear(pc.queue)
		pc.queue = pc.queue[:0]
		pc.p.rr.Add(1) // the next calls go to the next connection
		pc.mu.Unlock()
		pc.f.writes.Add(1)
		pc.f.requests.Add(int64(n))
		_ = l.nc.SetWriteDeadline(now.Add(pc.f.cfg.Timeout))
		if err := write(buf); err != nil {
			pc.fail(l, err, false)
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
}

// reader matches each reply to the oldest request outstanding (the next reply slot of the
// oldest call).
func (pc *pconn) reader(l *link) {
	defer pc.f.wg.Done()
	var src io.Reader = l.nc
	if r := newRawIO(l.nc); r != nil {
		src = r
	}
	br := bufio.NewReaderSize(src, 32<<10)
	var r Reply // read here, then swapped into the call (each keeps reusable buffers)
	for {
		if err := readReply(br, &r, 0); err != nil {
			pc.fail(l, err, false)
			return
		}
		pc.mu.Lock()
		if pc.cur != l || len(pc.inflight) == 0 {
			pc.mu.Unlock()
			pc.fail(l, errors.New("a reply with no request outstanding"), false)
			return
		}
		c := pc.inflight[0]
		c.Replies[c.got], r = r, c.Replies[c.got]
		c.got++
		pc.pending--
		last := c.got == c.n
		if last {
			pc.inflight[0] = nil
			pc.inflight = pc.inflight[1:]
		}
		if br.Buffered() == 0 { // the next read waits on the socket: bound it by the oldest
			if len(pc.inflight) > 0 {
				_ = l.nc.SetReadDeadline(time.Now().Add(pc.f.cfg.Timeout))
			} else {
				_ = l.nc.SetReadDeadline(time.Time{})
			}
		}
		pc.mu.Unlock()
		if last {
			c.finish()
		}
	}
}

// fail ends link l (nil: the current one, if any): closes it and fails every request queued
// or outstanding; closed marks the slot closed for good (Forwarder.Close).
func (pc *pconn) fail(l *link, err error, closed bool) {
	pc.mu.Lock()
	if closed {
		pc.closed = true
		l = pc.cur
	}
	if l == nil || pc.cur != l {
		pc.mu.Unlock()
		return
	}
	pc.cur = nil
	reqs := append(pc.inflight, pc.queue...)
	pc.inflight, pc.queue, pc.pending = nil, nil, 0
	pc.mu.Unlock()
	close(l.dead)
	_ = l.nc.Close()
	if !closed && !errors.Is(err, io.EOF) {
		pc.f.cfg.Log.Warn("ordered: connection to the leader failed", zap.String("leader", pc.addr), zap.Error(err))
	}
	for _, c := range reqs {
		c.Err = fmt.Errorf("%w: %s: %v", ErrUnreachable, pc.addr, err)
		c.finish()
	}
}
