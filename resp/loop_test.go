//go:build linux

package resp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/testkit"
)

// startLoopServer starts an event-loop server with one loop and returns it with its address.
func startLoopServer(t *testing.T, cfg Config, h Handler) (*Server, string) {
	t.Helper()
	return startHookedServer(t, cfg, h, nil)
}

// startHookedServer is startLoopServer with test seams in the loops (nil: none). cfg.Loops
// is kept when set.
func startHookedServer(t *testing.T, cfg Config, h Handler, hooks *loopHooks) (*Server, string) {
	t.Helper()
	cfg.Model = ModelEventLoop
	if cfg.Loops == 0 {
		cfg.Loops = 1
	}
	srv, err := NewServer(cfg, h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	srv.hooks = hooks
	addr, _ := testkit.ServeLocal(t, srv)
	return srv, addr
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return nc, bufio.NewReader(nc)
}

// blockingHandler answers BLOCK once release is closed and anything else with PONG.
type blockingHandler struct {
	started chan struct{}
	release chan struct{}
}

func (h *blockingHandler) ServeRESP(c *Conn, args [][]byte) {
	if string(args[0]) == "BLOCK" {
		close(h.started)
		<-h.release
		c.WriteSimple("DONE")
		return
	}
	c.WriteSimple("PONG")
}

type blockerHandler struct{ *blockingHandler }

func (h blockerHandler) MayBlock(c *Conn, args [][]byte) bool { return string(args[0]) == "BLOCK" }

// blockedLoop: one connection's command blocks; another connection of the same loop is
// still served, and the blocked one gets its reply and goes on afterwards.
func blockedLoop(t *testing.T, declare bool) *Server {
	bh := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	var h Handler = bh
	if declare {
		h = blockerHandler{bh}
	}
	srv, addr := startLoopServer(t, Config{}, h)
	a, ar := dial(t, addr)
	b, br := dial(t, addr)
	fmt.Fprint(a, "BLOCK\r\n")
	<-bh.started
	fmt.Fprint(b, "PING\r\n")
	if line, err := br.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("other client while a command blocks the loop: got %q, %v", line, err)
	}
	close(bh.release)
	if line, err := ar.ReadString('\n'); line != "+DONE\r\n" {
		t.Fatalf("blocked client: got %q, %v", line, err)
	}
	for i := 0; i < 3; i++ { // handed back to the loop: served as before
		fmt.Fprint(a, "PING\r\nPING\r\n")
		for j := 0; j < 2; j++ {
			if line, err := ar.ReadString('\n'); line != "+PONG\r\n" {
				t.Fatalf("blocked client afterwards: got %q, %v", line, err)
			}
		}
	}
	return srv
}

// TestLoopWatchdog: a command that blocks without saying so makes the watchdog hand the
// loop to a new goroutine.
func TestLoopWatchdog(t *testing.T) {
	srv := blockedLoop(t, false)
	if n := srv.loops[0].deposed.Load(); n < 1 {
		t.Errorf("watchdog hand-offs: %d, want at least 1", n)
	}
}

// TestLoopBlockerOffload: a command the handler declares blocking (Blocker) runs off the
// loop at once: the watchdog has nothing to do.
func TestLoopBlockerOffload(t *testing.T) {
	srv := blockedLoop(t, true)
	if n := srv.loops[0].deposed.Load(); n != 0 {
		t.Errorf("watchdog hand-offs: %d, want 0 (the command was declared blocking)", n)
	}
}

// TestLoopBackpressure: a client that sends a long pipeline and does not read its replies
// stops the connection: no command runs while replies wait for the socket, and the unsent
// replies stay within nextFlush plus one reply. Every reply arrives once the client reads.
func TestLoopBackpressure(t *testing.T) {
	const reply = 1000
	var bad atomic.Value
	var maxPending atomic.Int64
	h := HandlerFunc(func(c *Conn, args [][]byte) {
		if c.stalled() {
			bad.Store("a command ran while replies waited for the socket")
		}
		if p := int64(len(c.out) - c.outOff); p > maxPending.Load() {
			maxPending.Store(p)
		}
		c.WriteBulkString(strings.Repeat("r", reply))
	})
	srv, addr := startLoopServer(t, Config{}, h)
	nc, r := dial(t, addr)
	_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
	const n = 20000 // 20 MB of replies: far more than the socket buffers hold
	go func() { _, _ = io.WriteString(nc, strings.Repeat("GET\r\n", n)) }()
	time.Sleep(300 * time.Millisecond) // let the buffers fill (not a proof of anything)
	for i := 0; i < n; i++ {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if line != fmt.Sprintf("$%d\r\n", reply) {
			t.Fatalf("reply %d: header %q", i, line)
		}
		if _, err := r.Discard(reply + 2); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	if v := bad.Load(); v != nil {
		t.Error(v)
	}
	if p := maxPending.Load(); p > flushAt+reply+16 {
		t.Errorf("pending replies reached %d bytes, want at most %d", p, flushAt+reply+16)
	}
	// The loop counts a batch's commands after writing its replies: the last count may land
	// just after the client read the last reply.
	if !testkit.Poll(5*time.Second, func() bool { return srv.Stats().TotalCommands >= n }) || srv.Stats().TotalCommands != n {
		t.Errorf("commands: %d, want %d", srv.Stats().TotalCommands, n)
	}
}

// TestLoopWriteTimeout: a client that never reads its replies is closed after WriteTimeout.
func TestLoopWriteTimeout(t *testing.T) {
	big := HandlerFunc(func(c *Conn, args [][]byte) { c.WriteBulkString(strings.Repeat("r", 10000)) })
	srv, addr := startLoopServer(t, Config{WriteTimeout: 300 * time.Millisecond}, big)
	nc, _ := dial(t, addr)
	go func() { _, _ = io.WriteString(nc, strings.Repeat("GET\r\n", 5000)) }() // 50 MB of replies
	if !testkit.Poll(10*time.Second, func() bool {
		return srv.Stats().TotalConnections != 0 && srv.Stats().ConnectedClients == 0
	}) {
		t.Fatal("a client that does not read its replies is still connected after 10 s (write timeout 300 ms)")
	}
}

// TestIdleTimeout: a client that sends nothing is closed after IdleTimeout.
func TestIdleTimeout(t *testing.T) {
	eachModel(t, func(t *testing.T, model string) {
		addr := startTestServer(t, Config{Model: model, IdleTimeout: 300 * time.Millisecond}, pong)
		nc, r := dial(t, addr)
		start := time.Now()
		if _, err := r.ReadByte(); err != io.EOF {
			t.Fatalf("idle client: got %v, want EOF", err)
		}
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Errorf("closed after %v, before the idle timeout", d)
		}
		_ = nc
	})
}

// TestMaxClients: a client over MaxClients is told so and closed; the one served goes on.
func TestMaxClients(t *testing.T) {
	eachModel(t, func(t *testing.T, model string) {
		addr := startTestServer(t, Config{Model: model, MaxClients: 1}, pong)
		a, ar := dial(t, addr)
		fmt.Fprint(a, "PING\r\n")
		if line, err := ar.ReadString('\n'); line != "+PONG\r\n" {
			t.Fatalf("first client: %q, %v", line, err)
		}
		_, br := dial(t, addr)
		if line, _ := br.ReadString('\n'); line != "-ERR max number of clients reached\r\n" {
			t.Errorf("second client: got %q", line)
		}
		fmt.Fprint(a, "PING\r\n")
		if line, err := ar.ReadString('\n'); line != "+PONG\r\n" {
			t.Fatalf("first client afterwards: %q, %v", line, err)
		}
	})
}

// TestHostileHeadersClose: protocol errors are answered and close the connection, and
// CloseAfterReply (QUIT) delivers its reply first, on both models.
func TestHostileHeadersClose(t *testing.T) {
	quit := HandlerFunc(func(c *Conn, args [][]byte) {
		if string(args[0]) == "QUIT" {
			c.CloseAfterReply()
		}
		c.WriteSimple("OK")
	})
	eachModel(t, func(t *testing.T, model string) {
		addr := startTestServer(t, Config{Model: model}, quit)
		for _, tc := range []struct{ in, want string }{
			{"*1\r\n$9223372036854775807\r\nab", "-ERR Protocol error: invalid bulk length\r\n"},
			{"*3000000000\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
			{"PING\r\nQUIT\r\nPING\r\n", "+OK\r\n+OK\r\n"},
		} {
			nc, r := dial(t, addr)
			fmt.Fprint(nc, tc.in)
			got, err := io.ReadAll(r)
			if string(got) != tc.want || err != nil {
				t.Errorf("%q: got %q, %v; want %q then close", tc.in, got, err, tc.want)
			}
		}
	})
}

// TestShutdownRacesAdopt: connections accepted while Shutdown runs are handed from the
// runtime's poller to a loop (adopt) at the same time as Shutdown walks the connection set.
// Under -race this caught adopt publishing c.nc = nil outside s.mu (a CI failure).
func TestShutdownRacesAdopt(t *testing.T) {
	for round := 0; round < 20; round++ {
		srv, addr := listenServer(t, Config{Model: ModelEventLoop}, HandlerFunc(func(c *Conn, args [][]byte) {
			c.WriteSimple("PONG")
		}))
		done := make(chan struct{})
		go func() { _ = srv.Serve(); close(done) }()
		var dials sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 8; i++ {
			dials.Add(1)
			go func() {
				defer dials.Done()
				<-start
				for j := 0; j < 4; j++ {
					nc, err := net.DialTimeout("tcp", addr.String(), time.Second)
					if err != nil {
						return
					}
					_, _ = nc.Write([]byte("PING\r\n"))
					_ = nc.Close()
				}
			}()
		}
		close(start)
		// Shut down once accepting is under way, so later accepts overlap the walk.
		for srv.Stats().TotalConnections < 2 {
			runtime.Gosched()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("round %d: Shutdown: %v", round, err)
		}
		cancel()
		<-done
		dials.Wait()
	}
}
