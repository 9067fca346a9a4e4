//go:build linux

package ordered

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// LoopPoller is what a LoopForwarder needs of the event loop it runs on (resp.Loop): its
// epoll set for the leaders' sockets, and a wake-up for a dial that finished.
type LoopPoller interface {
	Watch(fd int, write bool) error
	Unwatch(fd int)
	Wake()
}

// LoopForwarder is the Forwarder of one event loop (a resp.LoopTask): the loop owns one
// connection per leader, in its own epoll set. The loop's commands queue their calls
// (Start); after each round of ready sockets the loop writes every call queued in the round
// in one non-blocking write per leader (Tick); when a leader's socket is readable it reads
// the replies, matches them in order (FIFO) to the calls written, and a call whose last
// reply is in calls its Notify, there on the loop (Ready). No goroutine carries a request
// or a reply; a dial runs on a goroutine of its own, once per connection. A request is
// bounded as the Forwarder's are: a leader that does not take the bytes, or does not
// answer the oldest request outstanding, within the Timeout fails every call of the
// connection with ErrUnreachable; at most MaxPending requests are queued or outstanding.
type LoopForwarder struct {
	f  *Forwarder
	lp LoopPoller

	mu     sync.Mutex
	links  []*loopLink // one per leader, in the order first used; appended under mu
	closed bool        // the Forwarder closed, or the loop stopped
	shut   bool        // the loop closed every link after closed was set (loop's)
	// dirty: a Start, a dial or Close handed the loop something under mu since the last
	// Tick took it (a Tick with nothing new takes no lock).
	dirty atomic.Bool
	own   []*loopLink // links as the loop last copied it (the loop's)
}

// loopLink is the loop's connection to one leader.
type loopLink struct {
	addr string

	// Under the LoopForwarder's mu: what Start and the dial goroutine hand the loop.
	state     linkState
	queue     []*Call // started, not yet written
	pending   int     // requests of queue and inflight
	downUntil time.Time
	dialed    bool // the dial goroutine's result is in dialFD, dialErr
	dialFD    int
	dialErr   error

	// The loop goroutine's only.
	fd        int
	out       []byte // requests to write; out[:outOff] is written
	outOff    int
	writing   bool    // watched for writable (a write was cut short)
	inflight  []*Call // in write order; inflight[:head] are done
	head      int
	in        []byte // replies read; in[:inN] not yet matched
	inN       int
	lastMove  time.Time // the last reply read, or when a request was written with none outstanding
	freeQueue []*Call   // the queue slice taken last, given back empty
}

// maxReplyBuffer bounds the bytes of one reply not yet complete (a long array).
const maxReplyBuffer = 8 * maxReplyLen

type linkState uint8

const (
	linkIdle    linkState = iota // no connection: the next Start dials
	linkDialing                  // the dial goroutine runs
	linkUp                       // fd is the loop's
	linkDown                     // the last dial failed: Start fails at once until downUntil
)

// NewLoopForwarder returns the Forwarder of an event loop; Close of f fails and closes its
// connections too.
func (f *Forwarder) NewLoopForwarder(lp LoopPoller) *LoopForwarder {
	lf := &LoopForwarder{f: f, lp: lp}
	f.mu.Lock()
	lf.closed = f.closed
	f.loops = append(f.loops, lf)
	f.mu.Unlock()
	return lf
}

// Start queues c for the leader at addr; c.Notify (set) is called once its replies or Err
// are in, on the loop goroutine (Ready or Tick), or within Start when it fails at once.
// Start is called on the loop goroutine (a command of one of its connections) or by a
// command that the loop's watchdog deposed; Tick, on the loop, writes what it queued.
func (lf *LoopForwarder) Start(addr string, c *Call) {
	if c.n == 0 {
		c.Notify()
		return
	}
	if cap(c.Replies) < c.n {
		c.Replies = append(c.Replies[:cap(c.Replies)], make([]Reply, c.n-cap(c.Replies))...)
	}
	c.Replies = c.Replies[:c.n]
	cfg := &lf.f.cfg
	var err error
	dial := false
	lf.mu.Lock()
	l := lf.link(addr)
	switch {
	case lf.closed:
		err = fmt.Errorf("%w: %s: the forwarder is closed", ErrUnreachable, addr)
	case l.state == linkDown && time.Now().Before(l.downUntil):
		err = fmt.Errorf("%w: %s: the last connection attempt failed", ErrUnreachable, addr)
	case l.pending+c.n > cfg.MaxPending:
		err = fmt.Errorf("%w: %s: %d requests outstanding on the connection", ErrUnreachable, addr, cfg.MaxPending)
	default:
		l.queue = append(l.queue, c)
		l.pending += c.n
		if l.state == linkIdle || l.state == linkDown {
			l.state = linkDialing
			dial = true
			lf.f.wg.Add(1) // under mu, not closed: Close's Wait comes after
		}
	}
	lf.mu.Unlock()
	lf.dirty.Store(true)
	if dial {
		go lf.dial(l)
	}
	if err != nil {
		c.Err = err
		c.Notify()
	}
}

// link returns addr's link, made on first use (under mu).
func (lf *LoopForwarder) link(addr string) *loopLink {
	for _, l := range lf.links {
		if l.addr == addr {
			return l
		}
	}
	l := &loopLink{addr: addr, fd: -1}
	lf.links = append(lf.links, l)
	return l
}

// dial connects to the leader (handshake: AUTH, CLIENT SETNAME) and hands the socket to the
// loop: a descriptor duplicated out of the Go runtime's poller, non-blocking.
func (lf *LoopForwarder) dial(l *loopLink) {
	defer lf.f.wg.Done()
	fd := -1
	nc, err := handshake(l.addr, lf.f.cfg)
	if err == nil {
		fd, err = detachFD(nc)
	}
	if nc != nil {
		_ = nc.Close()
	}
	lf.mu.Lock()
	if lf.closed && lf.shut && fd >= 0 { // the loop is gone: nobody else would close it
		_ = unix.Close(fd)
		fd, err = -1, errors.New("forwarder closed")
	}
	l.dialed, l.dialFD, l.dialErr = true, fd, err
	lf.mu.Unlock()
	lf.dirty.Store(true)
	lf.lp.Wake()
}

// detachFD duplicates nc's socket out of the Go runtime's poller (the caller closes nc).
func detachFD(nc net.Conn) (int, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) {
		fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// failed is a call to finish with an error, outside the lock.
type failed struct {
	addr  string
	calls []*Call
	err   error
}

// Tick takes the links' dial results and queued calls (take), writes each link's requests in
// one write, fails a link whose leader left the oldest request outstanding unanswered for
// the Timeout, and returns when it must run again at the latest (resp.LoopTask).
func (lf *LoopForwarder) Tick(now time.Time) time.Time {
	if lf.dirty.Swap(false) && lf.take(now) {
		return time.Time{}
	}
	var due time.Time
	for _, l := range lf.own {
		if l.fd < 0 {
			continue
		}
		if l.outOff < len(l.out) && !l.writing {
			lf.write(l)
		}
		if l.fd >= 0 && l.head < len(l.inflight) {
			if now.Sub(l.lastMove) >= lf.f.cfg.Timeout {
				lf.fail(l, fmt.Errorf("no answer for %v", lf.f.cfg.Timeout))
				continue
			}
			if d := l.lastMove.Add(lf.f.cfg.Timeout); due.IsZero() || d.Before(due) {
				due = d
			}
		}
	}
	return due
}

// take takes, under mu, the links' dial results and queued calls: the queued requests join
// the bytes to write. It reports true when lf is closed (every link is then closed).
func (lf *LoopForwarder) take(now time.Time) bool {
	var fails []failed
	lf.mu.Lock()
	if lf.closed {
		lf.mu.Unlock()
		if !lf.shut {
			lf.shutAll(errors.New("forwarder closed"))
		}
		return true
	}
	lf.own = lf.links
	for _, l := range lf.links {
		if l.dialed {
			l.dialed = false
			if l.dialErr != nil {
				l.state, l.downUntil = linkDown, now.Add(lf.f.cfg.Backoff)
				fails = append(fails, failed{l.addr, l.queue, l.dialErr})
				lf.f.cfg.Log.Warn("ordered: cannot reach the leader", zap.String("leader", l.addr), zap.Error(l.dialErr))
				l.queue, l.pending = nil, 0
			} else {
				l.state, l.fd = linkUp, l.dialFD
				if err := lf.lp.Watch(l.fd, false); err != nil {
					fails = append(fails, lf.drop(l, err)...)
				}
			}
		}
		if l.state != linkUp || len(l.queue) == 0 {
			continue
		}
		if l.head == len(l.inflight) {
			l.inflight, l.head = l.inflight[:0], 0
			l.lastMove = now // the oldest request outstanding is now one of these
		} else if l.head > 0 && len(l.inflight)+len(l.queue) > cap(l.inflight) {
			l.inflight = l.inflight[:copy(l.inflight, l.inflight[l.head:])]
			l.head = 0
		}
		n := 0
		for _, c := range l.queue {
			l.out = append(l.out, c.buf...)
			n += c.n
		}
		l.inflight = append(l.inflight, l.queue...)
		clear(l.queue)
		l.queue, l.freeQueue = l.freeQueue[:0], l.queue[:0]
		lf.f.requests.Add(int64(n))
	}
	lf.mu.Unlock()
	lf.finish(fails)
	return false
}

// write writes l's pending requests without blocking; what the socket does not take waits
// for it to turn writable (Ready).
func (lf *LoopForwarder) write(l *loopLink) {
	for l.outOff < len(l.out) {
		n, err := rawWriteFD(l.fd, l.out[l.outOff:])
		if n > 0 {
			l.outOff += n
		}
		if err == nil {
			continue
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			if !l.writing {
				if err := lf.lp.Watch(l.fd, true); err != nil {
					lf.fail(l, err)
					return
				}
				l.writing = true
			}
			return
		}
		lf.fail(l, err)
		return
	}
	lf.f.writes.Add(1)
	if cap(l.out) > 1<<20 {
		l.out = nil
	} else {
		l.out = l.out[:0]
	}
	l.outOff = 0
	if l.writing {
		l.writing = false
		if err := lf.lp.Watch(l.fd, false); err != nil {
			lf.fail(l, err)
		}
	}
}

// Ready writes what waits for a writable socket and reads the replies of a readable one
// (resp.LoopTask).
func (lf *LoopForwarder) Ready(fd int, readable, writable bool, now time.Time) {
	var l *loopLink
	for _, x := range lf.own {
		if x.fd == fd {
			l = x
			break
		}
	}
	if l == nil {
		return
	}
	if writable && l.writing {
		lf.write(l)
	}
	if readable && l.fd >= 0 {
		lf.read(l, now)
	}
}

// read does one read of l's socket and finishes every call whose replies are all in.
func (lf *LoopForwarder) read(l *loopLink, now time.Time) {
	if len(l.in)-l.inN < 16<<10 { // a reply longer than the buffer, or the first read
		if l.inN > maxReplyBuffer {
			lf.fail(l, errors.New("reply too long"))
			return
		}
		b := make([]byte, max(2*len(l.in), 64<<10))
		copy(b, l.in[:l.inN])
		l.in = b
	}
	n, err := rawReadFD(l.fd, l.in[l.inN:])
	switch {
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
		return
	case err != nil:
		lf.fail(l, err)
		return
	case n == 0:
		lf.fail(l, io.EOF)
		return
	}
	l.inN += n
	off, done := 0, 0
	for off < l.inN {
		if l.head == len(l.inflight) {
			lf.fail(l, errors.New("a reply with no request outstanding"))
			return
		}
		c := l.inflight[l.head]
		m, pass, err := scanReply(l.in[off:l.inN], 0)
		if err != nil {
			lf.fail(l, err)
			return
		}
		if m == 0 {
			break // the rest of this reply comes with a later read
		}
		c.raw = append(c.raw, l.in[off:off+m]...)
		c.mixed = c.mixed || !pass
		off += m
		l.lastMove = now
		if c.got++; c.got == c.n {
			l.inflight[l.head] = nil
			l.head++
			done += c.n
			c.settle()
			c.finish()
		}
	}
	l.inN = copy(l.in, l.in[off:l.inN])
	if l.inN == 0 && len(l.in) > 1<<20 {
		l.in = nil // a long reply's buffer is not kept
	}
	if done > 0 {
		lf.mu.Lock()
		l.pending -= done
		lf.mu.Unlock()
	}
}

// fail ends l's connection (on the loop): every call written or queued on it fails with
// ErrUnreachable, and the next Start dials again.
func (lf *LoopForwarder) fail(l *loopLink, err error) {
	lf.mu.Lock()
	fails := lf.drop(l, err)
	lf.mu.Unlock()
	if !errors.Is(err, io.EOF) {
		lf.f.cfg.Log.Warn("ordered: connection to the leader failed", zap.String("leader", l.addr), zap.Error(err))
	}
	lf.finish(fails)
}

// drop closes l's socket and takes its calls, to fail (under mu, on the loop).
func (lf *LoopForwarder) drop(l *loopLink, err error) []failed {
	if l.fd >= 0 {
		lf.lp.Unwatch(l.fd)
		_ = unix.Close(l.fd)
	}
	var calls []*Call
	calls = append(calls, l.inflight[l.head:]...)
	calls = append(calls, l.queue...)
	l.fd, l.state, l.writing = -1, linkIdle, false
	l.out, l.outOff, l.inN = l.out[:0], 0, 0
	clear(l.inflight)
	l.inflight, l.head, l.queue, l.pending = l.inflight[:0], 0, nil, 0
	return []failed{{l.addr, calls, err}}
}

// finish fails the calls of fs (outside the lock).
func (lf *LoopForwarder) finish(fs []failed) {
	for _, f := range fs {
		for _, c := range f.calls {
			c.Err = fmt.Errorf("%w: %s: %v", ErrUnreachable, f.addr, f.err)
			c.finish()
		}
	}
}

// shutAll closes every link (the Forwarder closed, or the loop stopped), on the loop.
func (lf *LoopForwarder) shutAll(err error) {
	var fails []failed
	lf.mu.Lock()
	lf.closed, lf.shut = true, true
	for _, l := range lf.links {
		if l.dialed && l.dialFD >= 0 {
			_ = unix.Close(l.dialFD)
		}
		l.dialed = false
		fails = append(fails, lf.drop(l, err)...)
	}
	lf.mu.Unlock()
	lf.finish(fails)
}

// close marks lf closed (Forwarder.Close) and wakes its loop, whose Tick closes the links.
func (lf *LoopForwarder) close() {
	lf.mu.Lock()
	lf.closed = true
	lf.mu.Unlock()
	lf.dirty.Store(true)
	lf.lp.Wake()
}

// Close closes every link: the loop stops (resp.LoopTask).
func (lf *LoopForwarder) Close() { lf.shutAll(errors.New("server stopped")) }
