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
// clears the flag before draining (the order of issue 21 item 1).
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		srv.mu.Lock()
		loops := srv.loops
		srv.mu.Unlock()
		if len(loops) > 0 {
			return loops
		}
		if time.Now().After(deadline) {
			t.Fatal("the server's loops did not start within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
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
	deadline := time.Now().Add(3 * time.Second)
	for {
		set := -1
		for i, lp := range loopsOf(t, srv) {
			if lp.woken.Load() {
				set = i
			}
		}
		if set < 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("loop %d: woken still set 3 s after the traffic stopped (a lost wake-up)", set)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLoopWakeBetweenDrainAndClear: on a running server, a wake lands exactly between the
// loop's drain of the eventfd and the clear of its flag (the ackWake seam). The loop must
// still learn of the next connection at once: woken is clear once the first client is
// served, and a new connection's first PING is not left to the 1 s sweep timeout. Fails with
// the acknowledgement steps swapped (issue 21 item 1: a first PING of 272-775 ms afterwards).
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
// first PING is answered at once, not at the loop's 1 s sweep timeout. Issue 21 saw churn
// alone lose a wake-up within seconds with the old acknowledgement order.
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

// resetClose closes nc with an RST (SO_LINGER 0), as the attack of issue 21 item 2 did.
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
// a busy connection keeps its place in the epoll set with interest 0 (issue 21 item 2).
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
			deadline := time.Now().Add(5 * time.Second)
			for srv.Stats().ConnectedClients != 0 {
				if time.Now().After(deadline) {
					t.Fatal("the reset connection is still open 5 s after its command ended")
				}
				time.Sleep(5 * time.Millisecond)
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
// compares the connection and a command count apart from the running state (issue 21 item
// 5: the old code's hand-off of a command that had just started).
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
