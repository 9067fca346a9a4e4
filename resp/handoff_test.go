//go:build linux

package resp

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/testkit"
	"golang.org/x/sys/unix"
)

// eventfdCount reads (and so drains) an eventfd without blocking: 0 when it is empty.
func eventfdCount(t *testing.T, fd int) uint64 {
	t.Helper()
	var b [8]byte
	n, err := unix.Read(fd, b[:])
	if err == unix.EAGAIN {
		return 0
	}
	if err != nil || n != 8 {
		t.Fatalf("read eventfd: %d, %v", n, err)
	}
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// TestWakeAckProtocol: the wake protocol with a wake put exactly between the loop's two steps
// of acknowledging (drain the eventfd, clear woken) by the ackWake seam. Afterwards woken
// must not be set while the eventfd is empty (the loop would never be woken again: every
// later wake returns early), and the next wake must reach the eventfd. Fails when ackWake
// clears the flag before draining.
func TestWakeAckProtocol(t *testing.T) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	hooked := 0
	lp := &loop{wakefd: fd, hooks: &loopHooks{ackWake: func(lp *loop) {
		hooked++
		lp.wake() // another goroutine's wake (its work queued first), between the steps
	}}}
	lp.wake()
	lp.ackWake()
	if hooked != 1 {
		t.Fatalf("ackWake seam ran %d times, want 1", hooked)
	}
	pending := eventfdCount(t, fd)
	if lp.woken.Load() && pending == 0 {
		t.Fatal("after the acknowledgement woken is set and the eventfd empty: every later wake is lost")
	}
	lp.hooks = nil
	if pending != 0 {
		lp.ackWake() // the loop's next iteration
	}
	lp.wake()
	if eventfdCount(t, fd) == 0 {
		t.Fatal("a wake after the acknowledgement did not reach the eventfd (lost wake-up)")
	}
}

// loopsOf waits for Serve to have started srv's loops and returns them.
func loopsOf(t *testing.T, srv *Server) []*loop {
	t.Helper()
	var loops []*loop
	if !testkit.Poll(5*time.Second, func() bool {
		srv.mu.Lock()
		loops = srv.loops
		srv.mu.Unlock()
		return len(loops) > 0
	}) {
		t.Fatal("the server's loops did not start within 5 s")
	}
	return loops
}

// probe dials a new connection and times its first PING.
func probe(t *testing.T, addr string) time.Duration {
	t.Helper()
	start := time.Now()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(nc, "PING\r\n")
	if line, err := bufio.NewReader(nc).ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("probe: %q, %v", line, err)
	}
	return time.Since(start)
}

// waitWokenClear waits until no loop of srv has woken set; a loop that lost a wake-up keeps
// it set for good.
func waitWokenClear(t *testing.T, srv *Server) {
	t.Helper()
	set := -1
	if !testkit.Poll(3*time.Second, func() bool {
		set = -1
		for i, lp := range loopsOf(t, srv) {
			if lp.woken.Load() {
				set = i
			}
		}
		return set < 0
	}) {
		t.Fatalf("loop %d: woken still set 3 s after the traffic stopped (a lost wake-up)", set)
	}
}

// TestLoopWakeBetweenDrainAndClear: on a running server, a wake lands exactly between the
// loop's drain of the eventfd and the clear of its flag (the ackWake seam). The loop must
// still learn of the next connection at once: woken is clear once the first client is
// served, and a new connection's first PING is not left to the 1 s sweep timeout. Fails with
// the acknowledgement steps swapped (the first PING then waits for the sweep timeout).
func TestLoopWakeBetweenDrainAndClear(t *testing.T) {
	var once sync.Once
	var fired atomic.Bool
	hooks := &loopHooks{ackWake: func(lp *loop) {
		once.Do(func() { fired.Store(true); lp.wake() })
	}}
	srv, addr := startHookedServer(t, Config{}, pong, hooks)
	probe(t, addr) // its adoption wakes the loop; the seam adds a wake mid-acknowledgement
	if !fired.Load() {
		t.Fatal("the ackWake seam never ran")
	}
	waitWokenClear(t, srv)
	for i := 0; i < 3; i++ {
		if d := probe(t, addr); d > 500*time.Millisecond {
			t.Fatalf("probe %d after the mid-acknowledgement wake: first PING took %v (the loop waits for its timeout: lost wake-up)", i, d)
		}
	}
}

// TestLoopIdleProbeAfterStress: connection churn, offloaded commands handed back and
// pipelines on two loops, then idle: every loop's woken flag clears and a new connection's
// first PING is answered at once, not at the loop's 1 s sweep timeout. With the
// acknowledgement steps in the wrong order (clear before drain), churn alone loses a wake-up
// within seconds.
func TestLoopIdleProbeAfterStress(t *testing.T) {
	fast := HandlerFunc(func(c *Conn, args [][]byte) { c.WriteSimple("PONG") })
	mixed := mayBlockFunc{fast, func(c *Conn, args [][]byte) bool { return string(args[0]) == "OFF" }}
	srv, addr := startHookedServer(t, Config{Loops: 2}, mixed, nil)
	stop := time.Now().Add(700 * time.Millisecond)
	var wg sync.WaitGroup
	var fails atomic.Int64
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for time.Now().Before(stop) {
				nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err != nil {
					fails.Add(1)
					return
				}
				_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
				// An offloaded command, handed back, then a pipeline on the loop.
				fmt.Fprint(nc, "OFF\r\nPING\r\nOFF\r\nPING\r\nPING\r\n")
				r := bufio.NewReader(nc)
				for i := 0; i < 5; i++ {
					if _, err := r.ReadString('\n'); err != nil {
						fails.Add(1)
						break
					}
				}
				_ = nc.Close()
			}
		}(g)
	}
	wg.Wait()
	if n := fails.Load(); n > 0 {
		t.Fatalf("%d clients failed during the stress", n)
	}
	waitWokenClear(t, srv)
	var worst time.Duration
	for i := 0; i < 6; i++ { // ids alternate loops: three probes each
		worst = max(worst, probe(t, addr))
	}
	if worst > 300*time.Millisecond {
		t.Fatalf("idle probe after the stress: slowest first PING %v, want well under the loop's 1 s timeout", worst)
	}
}

// mayBlockFunc is a handler with a Blocker made of a function.
type mayBlockFunc struct {
	HandlerFunc
	may func(c *Conn, args [][]byte) bool
}

func (m mayBlockFunc) MayBlock(c *Conn, args [][]byte) bool { return m.may(c, args) }

// resetClose closes nc with an RST (SO_LINGER 0), as a client resetting after its command
// went off the loop does (cmd/leafd's TestE2ELoopResetAttackCPU).
func resetClose(t *testing.T, nc net.Conn) {
	t.Helper()
	if err := nc.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	_ = nc.Close()
}

// TestLoopResetWhileOffloaded: a client resets its connection while its command runs off the
// loop, declared (offloaded) or caught by the watchdog (taken over). The loop must not spin
// on the socket's EPOLLHUP/EPOLLERR while the command runs: its epoll returns are counted
// (loop.iters) over 200 ms and must stay a handful (a spinning loop makes tens of thousands).
// Then the command ends, the connection is closed and another client is served. Fails when
// a busy connection keeps its place in the epoll set with interest 0 (EPOLLHUP and EPOLLERR
// are reported whatever the interest).
func TestLoopResetWhileOffloaded(t *testing.T) {
	for _, declare := range []bool{true, false} {
		name := "takenOver"
		if declare {
			name = "offloaded"
		}
		t.Run(name, func(t *testing.T) {
			bh := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
			var h Handler = bh
			if declare {
				h = blockerHandler{bh}
			}
			srv, addr := startLoopServer(t, Config{}, h)
			lp := loopsOf(t, srv)[0]
			a, _ := dial(t, addr)
			fmt.Fprint(a, "BLOCK\r\n")
			<-bh.started
			if !declare {
				for lp.deposed.Load() == 0 { // the watchdog takes the loop over (10-20 ms)
					time.Sleep(time.Millisecond)
				}
			}
			resetClose(t, a)
			before := lp.iters.Load()
			time.Sleep(200 * time.Millisecond)
			spun := lp.iters.Load() - before
			close(bh.release)
			if spun > 50 {
				t.Errorf("the loop returned from epoll %d times in 200 ms while the reset connection's command ran off it (spinning on EPOLLHUP)", spun)
			}
			if !testkit.Poll(5*time.Second, func() bool { return srv.Stats().ConnectedClients == 0 }) {
				t.Fatal("the reset connection is still open 5 s after its command ended")
			}
			if d := probe(t, addr); d > time.Second {
				t.Errorf("another client afterwards: first PING %v", d)
			}
		})
	}
}

// TestWatchdogSparesNewCommand: the watchdog deposes only the command it saw running a period
// earlier. A command that starts between its read of the command word and its
// compare-and-swap (the watch seam) is not deposed, whether the loop was idle at the earlier
// tick or ran the previous command of the same connection then. Fails when the watchdog
// compares the connection and a command count apart from the running state (it would then
// hand off a command that had just started).
func TestWatchdogSparesNewCommand(t *testing.T) {
	c := &Conn{}
	var taken []*Conn
	between := func(*loop) {}
	lp := &loop{hooks: &loopHooks{
		watch:    func(lp *loop) { between(lp) },
		takeover: func(c *Conn) { taken = append(taken, c) },
	}}
	// Idle at two ticks (the last command was c's), then c's next command starts: seen
	// running at one tick only, it is not deposed.
	lp.endCmd(lp.beginCmd(c))
	last := lp.watchCheck(lp.watchCheck(0))
	tok := lp.beginCmd(c)
	last = lp.watchCheck(last)
	if len(taken) != 0 {
		t.Fatal("the watchdog deposed a command that started after it last saw the loop idle")
	}
	// Seen running at the previous tick, but it ends and the next one starts between the
	// watchdog's read and its compare-and-swap.
	between = func(lp *loop) { lp.endCmd(tok); tok = lp.beginCmd(c) }
	last = lp.watchCheck(last)
	if len(taken) != 0 {
		t.Fatal("the watchdog deposed the command that had just started after the one it saw")
	}
	between = func(*loop) {}
	if lp.endCmd(tok) {
		t.Fatal("the running command was marked deposed")
	}
	// A command seen running at two ticks is deposed, and its owner learns it.
	tok = lp.beginCmd(c)
	lp.watchCheck(lp.watchCheck(last))
	if len(taken) != 1 || taken[0] != c {
		t.Fatalf("a command running for a whole period: taken over %d times, want once", len(taken))
	}
	if !lp.endCmd(tok) {
		t.Fatal("the deposed command's goroutine was not told it no longer owns the loop")
	}
}

// TestLoopRepliesBeforeOffload: the replies of pipelined commands before one that runs off
// the loop are sent before it waits, not after (a client pipelining MULTI ... EXEC sees its
// QUEUED replies while EXEC waits). Fails when the loop goes off-loop with replies pending.
func TestLoopRepliesBeforeOffload(t *testing.T) {
	bh := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	_, addr := startLoopServer(t, Config{}, blockerHandler{bh})
	a, ar := dial(t, addr)
	fmt.Fprint(a, "PING\r\nBLOCK\r\n")
	<-bh.started
	_ = a.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := ar.ReadString('\n')
	close(bh.release)
	if line != "+PONG\r\n" {
		t.Fatalf("reply of the command before the offloaded one, while it waits: %q, %v", line, err)
	}
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := ar.ReadString('\n'); line != "+DONE\r\n" {
		t.Fatalf("offloaded command: %q, %v", line, err)
	}
}

// gate is one command's start signal and release of gateHandler.
type gate struct{ started, release chan struct{} }

// gateHandler: "OFF name" (declared: MayBlock, it runs off the loop) and "BLOCK name" (not
// declared: it runs on the loop until the watchdog takes the loop over) signal their gate's
// start, wait for its release and answer DONE; anything else answers PONG.
type gateHandler struct {
	mu    sync.Mutex
	gates map[string]*gate
}

func (h *gateHandler) gate(name string) *gate {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gates == nil {
		h.gates = map[string]*gate{}
	}
	g := h.gates[name]
	if g == nil {
		g = &gate{started: make(chan struct{}), release: make(chan struct{})}
		h.gates[name] = g
	}
	return g
}

func (h *gateHandler) ServeRESP(c *Conn, args [][]byte) {
	if cmd := string(args[0]); (cmd == "OFF" || cmd == "BLOCK") && len(args) == 2 {
		g := h.gate(string(args[1]))
		close(g.started)
		<-g.release
		c.WriteSimple("DONE")
		return
	}
	c.WriteSimple("PONG")
}

func (h *gateHandler) MayBlock(c *Conn, args [][]byte) bool { return string(args[0]) == "OFF" }

// connOf finds, on the loop goroutine, the server side of the client connection nc.
func connOf(lp *loop, nc net.Conn) *Conn {
	for _, c := range lp.conns {
		if c.remote == nc.LocalAddr().String() {
			return c
		}
	}
	return nil
}

// waitFor polls cond (on the calling goroutine) until it holds, for at most 5 s.
func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// TestTakeoverAdoptsAcknowledgedWork: when the watchdog takes a loop over, the goroutine that
// takes it resumes the handed-back connections its predecessor already had the wake for,
// before it parks: at its first poll the handed-back connection A is no longer busy (its
// reply written), while the deposed command still blocks. Two ways to get there:
//   - run: one epoll batch holds the eventfd (A's hand-back) and then B's socket; the loop
//     acknowledges the wake, then B's command blocks and is deposed before the batch's
//     housekeep. Fails without the housekeep at the start of run (a 2 ms hand-back is then
//     answered only after the 1 s sweep timeout).
//   - housekeep: A1 and A2 are handed back together; A1's next pipelined command blocks while
//     housekeep resumes it and is deposed. Fails when housekeep takes all of returned at once
//     (A2 then waits in the deposed goroutine's slice until A1's command ends).
//
// The loop is held at its poll seam (idle: no command runs, the watchdog has nothing to
// depose) while the test makes the hand-backs and B's bytes ready, so the batch is the one
// wanted; the run case checks that the wake was acknowledged before B's command began.
func TestTakeoverAdoptsAcknowledgedWork(t *testing.T) {
	for _, path := range []string{"run", "housekeep"} {
		t.Run(path, func(t *testing.T) { testTakeoverAdopts(t, path) })
	}
}

func testTakeoverAdopts(t *testing.T, path string) {
	h := &gateHandler{}
	var (
		hold     atomic.Pointer[func(lp *loop)] // run once, at the next poll seam
		held     atomic.Bool                    // the hold has run
		watched  atomic.Pointer[net.Conn]       // the handed-back client to check
		acked    = make(chan bool, 1)           // run: B's command had not begun at the wake's ack
		firstNew = make(chan bool, 1)           // at the new goroutine's first poll: watched still busy
	)
	blockGate := h.gate("b")
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(blockGate.release) }) }
	defer release()
	hooks := &loopHooks{
		poll: func(lp *loop) {
			if f := hold.Swap(nil); f != nil {
				(*f)(lp)
				held.Store(true)
			}
			if lp.deposed.Load() > 0 {
				if nc := watched.Load(); nc != nil {
					c := connOf(lp, *nc)
					select {
					case firstNew <- c == nil || c.busy:
					default:
					}
				}
			}
		},
		ackWake: func(lp *loop) {
			if held.Load() {
				began := false
				select {
				case <-blockGate.started:
					began = true
				default:
				}
				select {
				case acked <- !began:
				default:
				}
			}
		},
	}
	srv, addr := startHookedServer(t, Config{}, h, hooks)
	lp := loopsOf(t, srv)[0]
	a, ar := dial(t, addr)
	b, br := dial(t, addr)
	for _, c := range []struct {
		nc net.Conn
		r  *bufio.Reader
	}{{a, ar}, {b, br}} {
		fmt.Fprint(c.nc, "PING\r\n")
		if line, err := c.r.ReadString('\n'); line != "+PONG\r\n" {
			t.Fatalf("PING: %q, %v", line, err)
		}
	}
	// inReturned reports, on the loop goroutine, whether nc's connection is handed back.
	inReturned := func(lp *loop, nc net.Conn) bool {
		c := connOf(lp, nc)
		lp.mu.Lock()
		defer lp.mu.Unlock()
		for _, r := range lp.returned {
			if r == c && c != nil {
				return true
			}
		}
		return false
	}
	var hf func(lp *loop)
	var check net.Conn // the handed-back connection that must be resumed by the new goroutine
	var checkR *bufio.Reader
	switch path {
	case "run":
		fmt.Fprint(a, "OFF a\r\n")
		<-h.gate("a").started
		check, checkR = a, ar
		hf = func(lp *loop) {
			close(h.gate("a").release)
			wakeReady := func() bool {
				fds := []unix.PollFd{{Fd: int32(lp.wakefd), Events: unix.POLLIN}}
				n, _ := unix.Poll(fds, 0)
				return n == 1
			}
			if !waitFor(func() bool { return inReturned(lp, a) && wakeReady() }) {
				t.Error("A's hand-back did not reach returned and the eventfd")
				return
			}
			fmt.Fprint(b, "BLOCK b\r\n")
			cb := connOf(lp, b)
			if !waitFor(func() bool { n, err := unix.IoctlGetInt(cb.fd, unix.SIOCINQ); return err == nil && n > 0 }) {
				t.Error("B's command did not reach its socket")
			}
		}
	case "housekeep":
		// A's OFF goes off the loop; its BLOCK waits in its buffer for the hand-back.
		fmt.Fprint(a, "OFF a\r\nBLOCK b\r\n")
		fmt.Fprint(b, "OFF c\r\n")
		<-h.gate("a").started
		<-h.gate("c").started
		check, checkR = b, br
		hf = func(lp *loop) {
			close(h.gate("a").release)
			if !waitFor(func() bool { return inReturned(lp, a) }) {
				t.Error("A's hand-back did not reach returned")
				return
			}
			close(h.gate("c").release)
			if !waitFor(func() bool { return inReturned(lp, b) }) {
				t.Error("B's hand-back did not reach returned")
			}
		}
	}
	watched.Store(&check)
	hold.Store(&hf)
	lp.wake() // the loop's next iteration runs the hold at its poll seam
	select {
	case busy := <-firstNew:
		if path == "run" {
			select {
			case ok := <-acked:
				if !ok {
					t.Fatal("setup: epoll returned B's socket before the eventfd; the batch was not the one wanted")
				}
			default:
				t.Fatal("setup: no wake was acknowledged in the held batch")
			}
		}
		if busy {
			t.Errorf("%s: the goroutine that took the loop over reached its poll with the hand-back its predecessor had the wake for not resumed (it would park until the sweep timeout)", path)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog did not take the loop over within 5 s")
	}
	// The handed-back client's reply is there while the deposed command still blocks (on a
	// failure above, the command is released first: the reply then comes after it).
	if t.Failed() {
		release()
	}
	_ = check.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := checkR.ReadString('\n')
	release()
	if line != "+DONE\r\n" {
		t.Fatalf("handed-back client while the deposed command blocks: %q, %v", line, err)
	}
	// The deposed command's client gets its reply, and both go on.
	blocked, blockedR := b, br
	if path == "housekeep" {
		blocked, blockedR = a, ar
		if line, err := ar.ReadString('\n'); line != "+DONE\r\n" { // A's OFF
			t.Fatalf("A's OFF: %q, %v", line, err)
		}
	}
	_ = blocked.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := blockedR.ReadString('\n'); line != "+DONE\r\n" {
		t.Fatalf("deposed command: %q, %v", line, err)
	}
	for _, c := range []struct {
		nc net.Conn
		r  *bufio.Reader
	}{{a, ar}, {b, br}} {
		fmt.Fprint(c.nc, "PING\r\n")
		if line, err := c.r.ReadString('\n'); line != "+PONG\r\n" {
			t.Fatalf("PING afterwards: %q, %v", line, err)
		}
	}
}

// batchTimer is gateHandler observing batches (BatchObserver): each batch's time is sent on
// took.
type batchTimer struct {
	*gateHandler
	took chan time.Duration
}

func (b batchTimer) BatchDone(c *Conn, took time.Duration) { b.took <- took }

// TestBatchTimeCoversOffLoop: a batch whose command ran off the loop, offloaded or taken over
// by the watchdog, is timed from its read to its replies written (the latency its client
// sees, leafd_command_duration_seconds), its time off the loop included. The server's clock
// is a fake that the test moves by 3 s while the command waits. Fails when the hand-back
// restarts the batch's clock (the time would then be counted from the hand-back).
func TestBatchTimeCoversOffLoop(t *testing.T) {
	for _, cmd := range []string{"OFF", "BLOCK"} {
		t.Run(cmd, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			h := batchTimer{&gateHandler{}, make(chan time.Duration, 16)}
			srv, addr := startLoopServer(t, Config{Now: clk.Now}, h)
			nc, r := dial(t, addr)
			g := h.gate("x")
			fmt.Fprintf(nc, "PING\r\n%s x\r\nPING\r\n", cmd) // one batch of three
			<-g.started
			if cmd == "BLOCK" && !waitFor(func() bool { return srv.Stats().LoopTakeovers == 1 }) {
				t.Fatal("the watchdog did not take the loop over")
			}
			const off = 3 * time.Second
			clk.Add(off)
			close(g.release)
			for _, want := range []string{"+PONG\r\n", "+DONE\r\n", "+PONG\r\n"} {
				if line, err := r.ReadString('\n'); line != want {
					t.Fatalf("got %q, %v; want %q", line, err, want)
				}
			}
			select {
			case took := <-h.took:
				if took < off {
					t.Errorf("the batch's time is %v, want at least the %v its command spent off the loop", took, off)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no batch was observed")
			}
			if st := srv.Stats(); st.TotalCommands != 3 {
				t.Errorf("commands counted %d, want 3", st.TotalCommands)
			}
		})
	}
}
