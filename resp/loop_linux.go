//go:build linux

package resp

import (
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The event-loop model (ModelEventLoop): each loop is one goroutine that waits in epoll_wait
// (level-triggered) on the sockets of its connections and, per ready socket, does one read,
// runs every complete command in the buffer through the same parser and Handler as the
// goroutine model, and writes the replies with one write. No goroutine per connection, no
// netpoller hand-off, no deadlines: a request costs a read, a write and a share of an
// epoll_wait, as in redis-server.
//
// What the goroutine model gets from blocking I/O is done here by hand:
//   - backpressure: when a write is cut short (EAGAIN), the connection stops running commands
//     and reading until its socket is writable and the pending bytes are sent; pending bytes
//     never exceed nextFlush plus one reply, and one reply over MaxOutputBuffer closes it;
//   - timeouts: a sweep (every rearmEvery of the timeout) closes connections idle for
//     IdleTimeout and those whose pending replies did not move for WriteTimeout;
//   - blocking commands: a command the Handler says may block (Blocker) runs on a goroutine
//     of its own while the loop goes on; a command that blocks without saying so (a segment
//     wait, say) is caught by the loop's watchdog, which hands the loop to a new goroutine
//     after watchEvery..2*watchEvery, so the other connections of the loop stall at most that
//     long; the old goroutine finishes the command and hands the connection back;
//   - a panicking command closes its connection only;
//   - a handler's work beside its connections (a follower's connections to a leader) is a
//     LoopTask (looptask.go): its descriptors sit in the loop's epoll set, and its Tick runs
//     after every round.
// TLS connections stay on the goroutine model (Listen with TLS never starts loops).

const loopsSupported = true

// watchEvery is the watchdog's period (see above).
const watchEvery = 10 * time.Millisecond

// lockLoopThread is a build-time switch for benchmarks, like readYield:
// -ldflags '-X github.com/leafd/leafd/resp.lockLoopThread=on' locks the loop goroutine to its
// OS thread (as gnet can). Off by default: leafd has other goroutines (segment loads, the
// snowflake lease, the watchdog), and a locked loop makes each of them cost a thread switch.
var lockLoopThread = "off"

// loopPoll is a build-time switch for benchmarks: "off" makes the loop block in epoll_wait at
// once instead of polling first (see run).
var loopPoll = "on"

var pollFirst = loopPoll != "off"

// loopPark is a build-time switch for benchmarks: "off" makes an idle loop block its thread in
// epoll_wait instead of parking in the Go runtime's poller (see park).
var loopPark = "on"

var parkInPoller = loopPark != "off"

type status uint8

// loop.cmd is one word, (sequence << 2) | state: the sequence number of the latest command
// run on the loop goroutine and whether it is running (cmdOnLoop), finished (cmdIdle) or was
// deposed by the watchdog (cmdDeposed). Every command gets a new sequence number, so a
// compare-and-swap on the word acts on one command only: the watchdog can depose only the
// command it saw running a period earlier, never one that has just started (docs/DESIGN.md,
// "The loop's hand-offs").
const (
	cmdIdle    uint64 = 0
	cmdOnLoop  uint64 = 1
	cmdDeposed uint64 = 2
	cmdMask    uint64 = 3
)

const (
	stOK      status = iota // the connection goes on (the loop updates its epoll interest)
	stClose                 // close the connection now
	stBusy                  // a goroutine other than the loop owns the connection
	stDeposed               // the watchdog gave the loop to a new goroutine: return at once
)

type loop struct {
	srv     *Server
	blocker Blocker // the handler's Blocker, or nil
	epfd    int
	// epf holds epfd in the Go runtime's poller: an idle loop parks its goroutine there
	// (see park) instead of blocking its thread in epoll_wait.
	epf   *os.File
	epraw syscall.RawConn
	// park's state, used by the goroutine running the loop only.
	parkFn     func(uintptr) bool
	parkEvents []unix.EpollEvent
	parkN      int
	parkErr    error
	// parkDeadline is the read deadline last set on epf (zero: none yet).
	parkDeadline time.Time
	wakefd       int
	// conns is owned by the goroutine running the loop.
	conns     map[int]*Conn
	lastSweep time.Time

	mu       sync.Mutex
	incoming []*Conn // accepted, not yet registered
	returned []*Conn // handed back by offloaded commands and deposed loop goroutines
	// stopped is set (under mu) when the loop has returned for Shutdown: a connection
	// accepted just before Shutdown and adopted after that is closed by adopt, not queued
	// for a loop that will never read incoming again.
	stopped bool
	// woken is set by wake before it writes the eventfd and cleared by ackWake after it has
	// drained it: while it is set, the eventfd is readable or about to be (see ackWake).
	woken atomic.Bool

	// The watchdog reads these: the connection whose command runs (or ran last) on the loop
	// goroutine, written only while no command runs on it, and the command word (cmd*).
	inCmd atomic.Pointer[Conn]
	cmd   atomic.Uint64
	stop  chan struct{}
	jobs  chan offJob // to an idle offload goroutine (startOffload)
	// deposed counts the watchdog's hand-offs, offloads the commands run off the loop
	// (Stats), iters the loop's epoll returns (tests: a loop that polls in vain shows here).
	deposed  atomic.Int64
	offloads atomic.Int64
	iters    atomic.Int64
	// spin is Config.LoopSpin (negative: none); spins counts the empty polls of spinPoll and
	// parks the polls that parked (tests).
	spin  time.Duration
	spins atomic.Int64
	parks atomic.Int64

	// The handler's LoopTask (looptask.go), nil when none; the descriptors it watches (and
	// their epoll interest), the connections its callbacks resumed (ResumeOnLoop) and the
	// deadline its last Tick gave. Owned by the goroutine running the loop.
	task       LoopTask
	watched    map[int]uint32
	local      []*Conn
	localSpare []*Conn
	taskDue    time.Time

	hooks *loopHooks // tests only; nil in production
}

// loopHooks are seams for tests: each runs, when set, at one point of a hand-off protocol
// so that a test can put the other side's step exactly there instead of hoping a race hits
// it. Set before Serve (Server.hooks), never changed afterwards.
type loopHooks struct {
	// ackWake: on the loop goroutine, between draining the eventfd and clearing woken.
	ackWake func(lp *loop)
	// watch: on the watchdog, between reading the command word and its compare-and-swap.
	watch func(lp *loop)
	// takeover, when set, is called instead of starting a new loop goroutine after a
	// deposal (unit tests of watchCheck on a loop that has no epoll).
	takeover func(c *Conn)
	// poll: on the loop goroutine, before each poll of epoll (after the iteration's
	// housekeep, and after the entry housekeep of a goroutine that took the loop over).
	poll func(lp *loop)
}

func (s *Server) startLoops(n int) error {
	if n < 1 {
		n = 1
	}
	b, _ := s.handler.(Blocker)
	tasker, _ := s.handler.(LoopTasker)
	var loops []*loop
	closeAll := func() {
		for _, lp := range loops {
			lp.closeFDs()
		}
	}
	for i := 0; i < n; i++ {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			closeAll()
			return err
		}
		wfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			_ = unix.Close(epfd)
			closeAll()
			return err
		}
		lp := &loop{srv: s, blocker: b, epfd: epfd, wakefd: wfd, conns: make(map[int]*Conn),
			stop: make(chan struct{}), jobs: make(chan offJob), lastSweep: s.now(), hooks: s.hooks,
			spin: s.cfg.LoopSpin}
		loops = append(loops, lp)
		if tasker != nil {
			lp.watched = make(map[int]uint32)
			lp.task = tasker.LoopTask(&Loop{lp: lp})
		}
		if parkInPoller {
			if err := unix.SetNonblock(epfd, true); err != nil {
				closeAll()
				return err
			}
			lp.epf = os.NewFile(uintptr(epfd), "epoll")
			if lp.epraw, err = lp.epf.SyscallConn(); err != nil {
				closeAll()
				return err
			}
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wfd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wfd, &ev); err != nil {
			closeAll()
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		closeAll()
		return nil
	}
	s.loops = loops
	for _, lp := range loops {
		s.loopWG.Add(2)
		go lp.run(nil)
		go lp.watch()
	}
	return nil
}

// closeLoops releases the loops' descriptors (Shutdown), once every loop goroutine, watchdog
// and offloaded command has returned, so that no late wake-up writes to a descriptor number
// reused since.
func (s *Server) closeLoops() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loopsClosed {
		return
	}
	s.loopsClosed = true
	for _, lp := range s.loops {
		lp.closeFDs()
	}
}

func (lp *loop) closeFDs() {
	if lp.epf != nil {
		_ = lp.epf.Close()
	} else {
		_ = unix.Close(lp.epfd)
	}
	_ = unix.Close(lp.wakefd)
}

// wakeLoops makes every loop look at the server's state (Shutdown).
func (s *Server) wakeLoops() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loopsClosed {
		return
	}
	for _, lp := range s.loops {
		lp.wake()
	}
}

// wake makes the loop look at its queues (incoming, returned) and the server's state. The
// caller has queued its work (under lp.mu) first. Only the first wake after the loop
// acknowledged the last one writes the eventfd; the others find woken set and rely on that
// write, which the loop has not consumed yet (ackWake clears woken only after draining).
func (lp *loop) wake() {
	if lp.woken.Swap(true) {
		return
	}
	var one = [8]byte{1}
	// A raw write (the eventfd is non-blocking and never full): as an ordinary system call
	// it would wake the runtime's sysmon thread out of its idle sleep, a context switch on a
	// busy core at each wake (a suspended connection's Resume wakes the loop once per answer
	// from a leader).
	_, _ = rawWrite(lp.wakefd, one[:])
}

// ackWake consumes the wake-ups the eventfd holds, in this order: drain the eventfd, then
// clear woken; the caller then drains the queues (housekeep, later in the same iteration).
// A wake that sets woken after the clear writes the eventfd again, so the next epoll_wait
// returns; a wake that found woken set before the clear queued its work before that, so
// housekeep sees it. The other order (clear, then drain) swallows a wake landing between the
// two: its write is drained, woken stays set, and every later wake returns early, so the
// loop then learns of new connections and handed-back ones only at its sweep timeout
// (TestLoopWakeBetweenDrainAndClear).
func (lp *loop) ackWake() {
	var b [8]byte
	_, _ = rawRead(lp.wakefd, b[:])
	if lp.hooks != nil && lp.hooks.ackWake != nil {
		lp.hooks.ackWake(lp)
	}
	lp.woken.Store(false)
}

// adopt takes an accepted TCP connection onto a loop: the socket is duplicated out of the Go
// runtime's poller (the net.Conn is closed) and registered with the loop's epoll.
func (s *Server) adopt(c *Conn, nc net.Conn) bool {
	sc, ok := nc.(syscallConner)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	fd := -1
	var derr error
	if err := rc.Control(func(f uintptr) {
		fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil || derr != nil {
		return false
	}
	// The duplicate shares the socket (and its O_NONBLOCK); closing the net.Conn removes the
	// original descriptor from the runtime's poller.
	_ = nc.Close()
	// Shutdown reads c.nc under s.mu (the connection is already in s.conns), so the hand-over
	// from the runtime's poller to the loop is published under it too.
	s.mu.Lock()
	c.fd = fd
	c.nc = nil
	s.mu.Unlock()
	c.lastRead = c.born
	lp := s.loops[int(uint64(c.id)%uint64(len(s.loops)))]
	c.lp = lp
	lp.mu.Lock()
	if lp.stopped {
		lp.mu.Unlock()
		_ = unix.Close(fd)
		s.dropConn(c)
		return true
	}
	lp.incoming = append(lp.incoming, c)
	lp.mu.Unlock()
	lp.wake()
	return true
}

type syscallConner interface {
	SyscallConn() (syscall.RawConn, error)
}

// run is the loop. busy, when set, is the connection whose command blocked the previous loop
// goroutine (the watchdog started this one): it is left alone until handed back.
func (lp *loop) run(busy *Conn) {
	defer lp.srv.loopWG.Done()
	if lockLoopThread == "on" {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	if busy != nil {
		busy.busy = true
		lp.detach(busy)
	}
	// Housekeep before the first poll: a goroutine that takes the loop over may inherit work
	// whose wake its predecessor already acknowledged (ackWake drained the eventfd, then a
	// later socket of the same epoll batch was deposed and returned before its housekeep),
	// and nothing would wake it for that work until the sweep timeout
	// (TestTakeoverAdoptsAcknowledgedWork).
	if now := lp.srv.now(); lp.housekeep(now) || lp.tick(now) {
		return
	}
	events := make([]unix.EpollEvent, 128)
	// worked: the last poll found a ready descriptor (the loop spins before it parks).
	worked := false
	for {
		if lp.hooks != nil && lp.hooks.poll != nil {
			lp.hooks.poll(lp)
		}
		// Poll first without the runtime's system-call bookkeeping: under load there is
		// almost always a ready socket, and a thread that never sits in a blocking system
		// call is never handed off by sysmon (each hand-off is a context switch on the one
		// core). Only when nothing is ready does the loop let the other goroutines run and
		// then block in epoll_wait as an ordinary system call.
		var n int
		var err error
		if pollFirst {
			n, err = rawEpollPoll(lp.epfd, events)
			if n == 0 && err == nil && worked && lp.spin > 0 {
				n, err = lp.spinPoll(events)
			}
		}
		if n <= 0 {
			switch {
			case lp.epraw != nil:
				n, err = lp.park(events)
			case pollFirst:
				runtime.Gosched()
				n, err = unix.EpollWait(lp.epfd, events, lp.parkMillis())
			default:
				n, err = unix.EpollWait(lp.epfd, events, lp.parkMillis())
			}
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			lp.srv.log.Error("epoll_wait failed", zap.Error(err))
			time.Sleep(10 * time.Millisecond)
		}
		lp.iters.Add(1)
		now := lp.srv.now()
		worked = n > 0
		for i := 0; i < n; i++ {
			fd := int(events[i].Fd)
			if fd == lp.wakefd {
				lp.ackWake()
				continue
			}
			c := lp.conns[fd]
			if c == nil {
				if _, ok := lp.watched[fd]; ok && lp.taskReady(fd, events[i].Events, now) {
					return
				}
				continue
			}
			if c.busy {
				// A goroutine owns it, and its client sent more or hung up: out of the epoll
				// set until handed back (detach). Detached only then, a command off the loop
				// costs no epoll_ctl while its client just waits for the reply.
				lp.detach(c)
				continue
			}
			c.now = now
			if lp.settle(c, lp.handle(c, events[i].Events)) {
				return
			}
		}
		if lp.housekeep(now) || lp.tick(now) {
			return
		}
	}
}

// spinPoll polls on until a socket is ready or lp.spin has passed. The loop calls it when a
// poll right after a round with work found nothing. A client that writes to a parked loop's
// socket wakes the loop's thread from its own system call, and on a virtual machine an idle
// core's wake-up is an inter-processor interrupt through the hypervisor: at a high request
// rate that cost falls on the client and bounds the throughput (a faster server that parks
// between requests is slower than redis-server, which is rarely idle; see
// docs/BENCHMARKS.md). A loop that polls on for a moment after its work finds the next
// request without being woken. The spin polls the same epoll set as the loop, the eventfd
// included, so a wake (a new connection, a hand-back, Shutdown) ends it like any ready
// socket. It is bounded: an idle loop parks after lp.spin, so it costs at most that much CPU
// per burst of work, and the other goroutines of its core (a segment load, a lease renewal)
// wait at most that long for it, once per burst; under steady load the loop finds work at
// every poll and does not spin at all.
func (lp *loop) spinPoll(events []unix.EpollEvent) (int, error) {
	start := time.Now()
	for {
		n, err := rawEpollPoll(lp.epfd, events)
		if n != 0 || err != nil {
			return n, err
		}
		lp.spins.Add(1)
		if time.Since(start) >= lp.spin {
			return 0, nil
		}
	}
}

// waitMillis is epoll_wait's timeout: the sweep interval.
func (lp *loop) waitMillis() int {
	d := time.Second
	cfg := &lp.srv.cfg
	if cfg.IdleTimeout > 0 && lp.srv.readRearm < d {
		d = lp.srv.readRearm
	}
	if cfg.WriteTimeout > 0 && lp.srv.writeRearm < d {
		d = lp.srv.writeRearm
	}
	if ms := int(d / time.Millisecond); ms > 0 {
		return ms
	}
	return 1
}

// settle applies a connection's status after the loop worked on it. It reports true when
// the calling goroutine is no longer the loop (deposed) and must return.
func (lp *loop) settle(c *Conn, st status) bool {
	switch st {
	case stDeposed:
		return true
	case stBusy:
		return false // detached by run if the socket turns ready meanwhile
	case stClose:
		lp.closeConn(c)
		return false
	}
	pending := c.stalled()
	if !pending && c.drainClose {
		lp.closeConn(c)
		return false
	}
	if pending {
		lp.setEvents(c, unix.EPOLLOUT)
	} else {
		lp.setEvents(c, unix.EPOLLIN)
	}
	return false
}

func (lp *loop) setEvents(c *Conn, ev uint32) {
	if c.detached {
		// Back from a goroutine that owned it (detach): into the epoll set again.
		e := unix.EpollEvent{Events: ev, Fd: int32(c.fd)}
		if err := unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_ADD, c.fd, &e); err != nil {
			lp.srv.log.Warn("epoll_ctl add failed; connection closed", zap.Error(err))
			lp.closeConn(c)
			return
		}
		c.detached, c.events = false, ev
		return
	}
	if c.events == ev {
		return
	}
	e := unix.EpollEvent{Events: ev, Fd: int32(c.fd)}
	if err := unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_MOD, c.fd, &e); err == nil {
		c.events = ev
	}
}

// detach takes a connection out of the loop's epoll set while a goroutine other than the
// loop owns it (an offloaded command whose socket turned ready, or one the watchdog took the
// loop from). An interest of 0 would not do: EPOLLHUP and EPOLLERR cannot be masked, so after the client's reset a
// level-triggered epoll_wait would return the socket at once on every call and the loop
// would spin, skipping it, until the command ends (TestLoopResetWhileOffloaded).
// setEvents adds it back when the connection is handed back.
func (lp *loop) detach(c *Conn) {
	if c.detached {
		return
	}
	if err := unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_DEL, c.fd, nil); err != nil {
		lp.srv.log.Warn("epoll_ctl del failed", zap.Error(err))
	}
	c.detached, c.events = true, 0
}
