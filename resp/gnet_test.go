//go:build linux && gnet

package resp

// Tests of the gnet variant's own mechanisms (gnet_linux.go). The tests that take every model
// (eachModel: limits, hostile headers, max clients, timeouts, shutdown, panics, split
// pipelines) run on it too when built with -tags gnet.

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

func startGnetServer(t *testing.T, cfg Config, h Handler) (*Server, string) {
	t.Helper()
	cfg.Model = ModelGnet
	if cfg.Loops == 0 {
		cfg.Loops = 1
	}
	srv, err := NewServer(cfg, h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Serve(); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return srv, addr.String()
}

// gnetConnOf finds c's gnet connection (on its loop, from a command).
func gnetConnOf(srv *Server, c *Conn) *gnetConn {
	srv.gn.mu.Lock()
	defer srv.gn.mu.Unlock()
	for g := range srv.gn.conns {
		if g.c == c {
			return g
		}
	}
	return nil
}

// releaseAtCleanup makes a failing test release its blocked command before the server's
// Shutdown (cleanups run last-registered first), so that a failure fails instead of hanging.
func releaseAtCleanup(t *testing.T, bh *blockingHandler) func() {
	var once sync.Once
	release := func() { once.Do(func() { close(bh.release) }) }
	t.Cleanup(release)
	return release
}

func gnetWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGnetOffload: a command the handler declares may wait runs off the gnet loop: another
// connection of the same (only) loop is answered meanwhile, the replies pipelined before it
// are sent before it waits, and the connection goes on after the hand-back. Fails when the
// variant runs mayWait commands on the loop or loses the connection on the way back.
func TestGnetOffload(t *testing.T) {
	bh := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	srv, addr := startGnetServer(t, Config{}, blockerHandler{bh})
	release := releaseAtCleanup(t, bh)
	a, ar := dial(t, addr)
	b, br := dial(t, addr)
	fmt.Fprint(a, "PING\r\nBLOCK\r\n")
	<-bh.started
	if line, err := ar.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("reply before the offloaded command, while it waits: %q, %v", line, err)
	}
	fmt.Fprint(b, "PING\r\n")
	if line, err := br.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("other client while a command runs off the loop: got %q, %v", line, err)
	}
	fmt.Fprint(a, "PING\r\n") // arrives while busy: kept until the hand-back
	release()
	for _, want := range []string{"+DONE\r\n", "+PONG\r\n"} {
		if line, err := ar.ReadString('\n'); line != want {
			t.Fatalf("offloaded client: got %q, %v; want %q", line, err, want)
		}
	}
	fmt.Fprint(a, "PING\r\nPING\r\n")
	for j := 0; j < 2; j++ {
		if line, err := ar.ReadString('\n'); line != "+PONG\r\n" {
			t.Fatalf("offloaded client afterwards: got %q, %v", line, err)
		}
	}
	if n := srv.Stats().LoopOffloads; n != 1 {
		t.Errorf("LoopOffloads: %d, want 1", n)
	}
}

// TestGnetUndeclaredBlockStallsLoop records what the variant cannot do: gnet owns its loop
// goroutine, so there is no watchdog to take the loop from a command that waits without
// saying so; the loop's other connections wait for it (our loop answers them within 10-20 ms,
// TestLoopWatchdog). It fails if that changes, and then docs/BENCHMARKS.md should say so.
func TestGnetUndeclaredBlockStallsLoop(t *testing.T) {
	bh := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	_, addr := startGnetServer(t, Config{}, bh)
	release := releaseAtCleanup(t, bh)
	a, ar := dial(t, addr)
	b, br := dial(t, addr)
	fmt.Fprint(a, "BLOCK\r\n")
	<-bh.started
	fmt.Fprint(b, "PING\r\n")
	_ = b.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if line, err := br.ReadString('\n'); err == nil {
		t.Fatalf("other client answered (%q) while an undeclared blocking command holds the gnet loop", line)
	}
	release()
	_ = b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := ar.ReadString('\n'); line != "+DONE\r\n" {
		t.Fatalf("blocked client: got %q, %v", line, err)
	}
	if line, err := br.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("other client after the command: got %q, %v", line, err)
	}
}

// TestGnetBackpressure: a client that sends a long pipeline and does not read its replies
// stalls its connection: no command runs while gnet holds unsent replies, which stay within
// nextFlush plus one reply; every reply arrives once the client reads (the ticker resumes the
// connection when gnet has written the backlog). Fails when commands run on into gnet's
// unbounded outbound buffer, or when a stalled connection is never resumed.
func TestGnetBackpressure(t *testing.T) {
	const reply = 1000
	var bad atomic.Value
	var maxPending atomic.Int64
	var srvp atomic.Pointer[Server]
	h := HandlerFunc(func(c *Conn, args [][]byte) {
		g := gnetConnOf(srvp.Load(), c)
		if g == nil {
			bad.Store("command of an unknown connection")
		} else {
			if g.stalled.Load() {
				bad.Store("a command ran while replies waited for the socket")
			}
			if p := int64(g.gc.OutboundBuffered() + len(c.out)); p > maxPending.Load() {
				maxPending.Store(p)
			}
		}
		c.WriteBulkString(strings.Repeat("r", reply))
	})
	srv, addr := startGnetServer(t, Config{}, h)
	srvp.Store(srv)
	nc, r := dial(t, addr)
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
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
	gnetWaitFor(t, "every command counted", func() bool { return srv.Stats().TotalCommands == n })
}

// TestGnetWriteTimeout: a client that never reads its replies is closed after WriteTimeout
// (the ticker's sweep). Fails when a stalled gnet connection is never timed out.
func TestGnetWriteTimeout(t *testing.T) {
	big := HandlerFunc(func(c *Conn, args [][]byte) { c.WriteBulkString(strings.Repeat("r", 10000)) })
	srv, addr := startGnetServer(t, Config{WriteTimeout: 300 * time.Millisecond}, big)
	nc, _ := dial(t, addr)
	go func() { _, _ = io.WriteString(nc, strings.Repeat("GET\r\n", 5000)) }() // 50 MB of replies
	gnetWaitFor(t, "a client that does not read its replies is still connected (write timeout 300 ms)", func() bool {
		st := srv.Stats()
		return st.TotalConnections == 1 && st.ConnectedClients == 0
	})
}

// TestGnetResetWhileOffloaded: a client resets its connection while its command runs off the
// loop. gnet closes the socket at once (OnClose), but the connection is the command's until it
// is handed back: it is forgotten then, exactly once, and the loop serves others meanwhile.
// Fails when OnClose drops a busy connection (the hand-back would drop it again: -1 clients)
// or when the hand-back of a closed connection forgets to drop it.
func TestGnetResetWhileOffloaded(t *testing.T) {
	bh := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	srv, addr := startGnetServer(t, Config{}, blockerHandler{bh})
	release := releaseAtCleanup(t, bh)
	a, _ := dial(t, addr)
	fmt.Fprint(a, "BLOCK\r\n")
	<-bh.started
	if err := a.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	_ = a.Close() // RST
	b, br := dial(t, addr)
	fmt.Fprint(b, "PING\r\n")
	if line, err := br.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("other client after the reset: got %q, %v", line, err)
	}
	if n := srv.Stats().ConnectedClients; n != 2 {
		t.Errorf("connected clients while the reset one's command runs: %d, want 2", n)
	}
	release()
	gnetWaitFor(t, "the reset connection forgotten after its command", func() bool { return srv.Stats().ConnectedClients == 1 })
	time.Sleep(50 * time.Millisecond) // a second drop would show as 0 here
	if n := srv.Stats().ConnectedClients; n != 1 {
		t.Errorf("connected clients after the hand-back: %d, want 1", n)
	}
}

// TestGnetInputBoundWhileBusy: gnet cannot stop reading a socket, so while a command runs off
// the loop the bytes the client sends pile up in gnet's buffer; past MaxQueryBuffer the
// connection is closed. Fails when that bound is not checked (gnet's buffer grows without
// limit).
func TestGnetInputBoundWhileBusy(t *testing.T) {
	bh := &blockingHandler{started: make(chan struct{}), release: make(chan struct{})}
	cfg := Config{MaxQueryBuffer: 64 << 10, Limits: Limits{MaxBulk: 1024}}
	srv, addr := startGnetServer(t, cfg, blockerHandler{bh})
	release := releaseAtCleanup(t, bh)
	a, _ := dial(t, addr)
	fmt.Fprint(a, "BLOCK\r\n")
	<-bh.started
	go func() { _, _ = io.WriteString(a, strings.Repeat("PING\r\n", 100000)) }() // 600 KB
	gnetWaitFor(t, "a connection sending 600 KB while busy is still open (MaxQueryBuffer 64 KiB)", func() bool {
		return srv.Stats().QueryLimitClosed == 1
	})
	release()
	gnetWaitFor(t, "the closed connection forgotten after its command", func() bool { return srv.Stats().ConnectedClients == 0 })
}
