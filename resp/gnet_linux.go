//go:build linux && gnet

package resp

// The gnet variant (ModelGnet, issue 21 item 4): the same parser, Handler, per-connection
// state, limits and off-loop execution as the event-loop model, on github.com/panjf2000/gnet/v2
// event loops instead of ours, so that the two can be tested and measured side by side
// (docs/BENCHMARKS.md, "The server models"). It is built only with -tags gnet; leafd's default
// binary does not link gnet.
//
// Our accept loop (Serve, accept: MaxClients, back-off, Shutdown) stays; each accepted TCP
// connection is enrolled into one of gnet's loops (gnet.Client.EnrollContext duplicates its
// descriptor and closes the net.Conn, as adopt does). On a loop, OnTraffic copies the bytes
// gnet read into the connection's own buffer (so makeRoom and MaxQueryBuffer apply as they
// are), runs every complete command through the parser and Handler, and hands the replies to
// gnet's Write, which writes at once and buffers what the socket does not take.
//
// What gnet does not offer, and how this file makes up for it:
//   - no way to stop reading a socket: while a command runs off the loop or replies wait for
//     the socket, gnet keeps reading the client's bytes into its own buffer; past
//     MaxQueryBuffer the connection is closed with the query-buffer error (our loop pushes
//     back through TCP instead: it stops reading);
//   - no event when a backlog of replies has been written: a stalled connection is woken by
//     the ticker (every gnetTick) until gnet's outbound buffer is empty;
//   - no timers per connection: the ticker also runs the idle and write-timeout sweep;
//   - no way to take a loop from a command that blocks without saying so (our watchdog): on
//     gnet such a command stalls its loop's other connections until it returns. Commands
//     flagged mayWait (Blocker) run on a goroutine of their own, as on our loop, and come
//     back through the loop's task queue (EventLoop.Execute).

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"
)

// ModelGnet serves plain-TCP connections on gnet/v2 event loops (Linux, built with -tags gnet).
const ModelGnet = "gnet"

// gnetSupported reports whether this binary has the gnet variant.
const gnetSupported = true

// GnetAvailable reports whether this binary has the gnet variant (ModelGnet).
func GnetAvailable() bool { return gnetSupported }

// gnetTick is the ticker's period: how late a stalled connection resumes after its backlog
// is written, and the resolution of Shutdown's hand-over.
const gnetTick = time.Millisecond

type gnetEngine struct {
	srv     *Server
	cli     *gnet.Client
	blocker Blocker

	mu    sync.Mutex
	conns map[*gnetConn]struct{} // open on a loop (the ticker's sweep and Shutdown)

	offloads  atomic.Int64
	lastSweep time.Time // ticker goroutine only
}

// gnetConn is one connection on a gnet loop. The fields without atomics are the loop's: read
// and written only by the loop goroutine, or by the offloaded command's goroutine while busy
// (which the loop then does not touch: hand-back runs on the loop through its task queue).
type gnetConn struct {
	c  *Conn
	gc gnet.Conn

	busy        bool // a command of c runs off the loop
	closed      bool // OnClose ran
	closeQueued bool // gc.Close was called (the close runs later on the loop)
	drainClose  bool // close once gnet's outbound buffer is empty
	lastOut     int  // gnet's outbound bytes at the last check (progress resets the write timeout)

	// For the ticker goroutine.
	stalled   atomic.Bool  // replies wait in gnet's outbound buffer
	blockedAt atomic.Int64 // unix ns since when they did not move
	lastRead  atomic.Int64 // unix ns of the last read
	busyA     atomic.Bool  // busy, for the sweep
}

func (s *Server) startGnet() error {
	b, _ := s.handler.(Blocker)
	e := &gnetEngine{srv: s, blocker: b, conns: make(map[*gnetConn]struct{}), lastSweep: s.now()}
	n := s.cfg.Loops
	if n <= 0 {
		n = runtime.GOMAXPROCS(0) // as many loops as ours
	}
	opts := []gnet.Option{
		gnet.WithMulticore(true),
		gnet.WithNumEventLoop(n),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithLogger(s.log.Named("gnet").Sugar()),
		gnet.WithLockOSThread(lockLoopThread == "on"),
	}
	cli, err := gnet.NewClient(e, opts...)
	if err != nil {
		return err
	}
	if err := cli.Start(); err != nil {
		return err
	}
	e.cli = cli
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		_ = cli.Stop()
		return nil
	}
	s.gn = e
	s.loopWG.Add(1)
	s.mu.Unlock()
	go e.tick()
	return nil
}

// enrollGnet hands an accepted connection to a gnet loop. It reports false only when the
// connection is not a TCP one (the caller serves it on a goroutine).
func (s *Server) enrollGnet(c *Conn, nc net.Conn) bool {
	if _, ok := nc.(*net.TCPConn); !ok {
		return false
	}
	s.mu.Lock()
	c.nc = nil // Enroll closes it; Shutdown must not touch it
	s.mu.Unlock()
	g := &gnetConn{c: c}
	g.lastRead.Store(c.born.UnixNano())
	if _, err := s.gn.cli.EnrollContext(nc, g); err != nil {
		_ = nc.Close()
		if !s.closing.Load() {
			s.log.Warn("gnet enroll failed; connection closed", zap.Error(err))
		}
		s.dropConn(c)
	}
	return true
}

func (s *Server) gnetOffloads() int64 {
	s.mu.Lock()
	e := s.gn
	s.mu.Unlock()
	if e == nil {
		return 0
	}
	return e.offloads.Load()
}

// OnBoot, OnShutdown and OnTick are not used (the ticker is ours: gnet's runs on one loop's
// goroutine schedule and cannot stop the engine it belongs to).
func (e *gnetEngine) OnBoot(gnet.Engine) gnet.Action       { return gnet.None }
func (e *gnetEngine) OnShutdown(gnet.Engine)               {}
func (e *gnetEngine) OnTick() (time.Duration, gnet.Action) { return time.Hour, gnet.None }

func (e *gnetEngine) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	g := gc.Context().(*gnetConn)
	g.gc = gc
	e.mu.Lock()
	e.conns[g] = struct{}{}
	e.mu.Unlock()
	return nil, gnet.None
}

func (e *gnetEngine) OnClose(gc gnet.Conn, _ error) gnet.Action {
	g, _ := gc.Context().(*gnetConn)
	if g == nil || g.closed {
		return gnet.None
	}
	g.closed = true
	e.mu.Lock()
	delete(e.conns, g)
	e.mu.Unlock()
	if !g.busy {
		e.srv.dropConn(g.c)
	} // else the command's hand-back drops it
	return gnet.None
}

func (e *gnetEngine) OnTraffic(gc gnet.Conn) gnet.Action {
	g := gc.Context().(*gnetConn)
	e.serve(g)
	return gnet.None
}

// serve runs on the loop: after a read, a wake-up from the ticker, or a hand-back.
func (e *gnetEngine) serve(g *gnetConn) {
	if g.closed || g.closeQueued {
		return
	}
	defer e.recoverCommand(g)
	c, srv := g.c, e.srv
	c.now = srv.now()
	if g.busy {
		// Not reading now; gnet still does: bound what it holds for us. The command owns c,
		// so no reply: the connection is closed (the hand-back then drops it).
		if g.gc.InboundBuffered() > srv.cfg.MaxQueryBuffer {
			srv.stats.queryLimit.Add(1)
			srv.stats.protoErrors.Add(1)
			e.close(g)
		}
		return
	}
	if g.stalled.Load() {
		if !e.unstall(g) {
			if g.gc.InboundBuffered() > srv.cfg.MaxQueryBuffer {
				e.queryLimit(g)
			}
			return
		}
		if g.drainClose {
			e.close(g)
			return
		}
	}
	for {
		st := e.process(g)
		switch st {
		case stBusy:
			return
		case stClose:
			e.close(g)
			return
		}
		if g.stalled.Load() {
			return // the ticker brings it back once gnet has written the backlog
		}
		if srv.closing.Load() && (srv.killed.Load() || g.gc.InboundBuffered() == 0) {
			// Shutdown: its commands read so far have run and their replies are handed
			// to the socket (gnet's close writes what is left).
			e.close(g)
			return
		}
		in := g.gc.InboundBuffered()
		if in == 0 {
			return
		}
		if !c.makeRoom() {
			e.queryLimit(g)
			return
		}
		n := min(in, len(c.buf)-c.w)
		b, err := g.gc.Next(n)
		if err != nil {
			e.close(g)
			return
		}
		c.w += copy(c.buf[c.w:], b)
		g.lastRead.Store(c.now.UnixNano())
	}
}

// unstall reports whether a stalled connection's backlog has been written (and clears the
// stall); progress restarts its write timeout.
func (e *gnetEngine) unstall(g *gnetConn) bool {
	out := g.gc.OutboundBuffered()
	if out == 0 {
		g.stalled.Store(false)
		g.lastOut = 0
		return true
	}
	if out < g.lastOut {
		g.blockedAt.Store(e.srv.now().UnixNano())
	}
	g.lastOut = out
	return false
}

func (e *gnetEngine) queryLimit(g *gnetConn) {
	srv := e.srv
	srv.stats.queryLimit.Add(1)
	srv.stats.protoErrors.Add(1)
	g.c.WriteError("ERR Protocol error: query buffer limit exceeded")
	e.write(g)
	e.close(g)
}

// close closes the connection once gnet has run what is queued (its close writes what the
// socket takes of the pending replies first).
func (e *gnetEngine) close(g *gnetConn) {
	if g.closeQueued || g.closed {
		return
	}
	g.closeQueued = true
	_ = g.gc.Close()
}

// write hands the pending replies to gnet (on the loop only). gnet writes at once and keeps
// what the socket does not take; the connection then stalls until that is written.
func (e *gnetEngine) write(g *gnetConn) {
	c := g.c
	if len(c.out) == 0 {
		return
	}
	_, _ = g.gc.Write(c.out)
	if cap(c.out) > shrinkOutCap {
		c.out = make([]byte, 0, flushAt)
	} else {
		c.out = c.out[:0]
	}
	if !g.stalled.Load() {
		if out := g.gc.OutboundBuffered(); out > 0 {
			g.lastOut = out
			g.blockedAt.Store(e.srv.now().UnixNano())
			g.stalled.Store(true)
		}
	}
}

// process runs the complete commands in c's buffer, as loop.process does.
func (e *gnetEngine) process(g *gnetConn) status {
	c, srv := g.c, e.srv
	for c.r < c.w {
		if srv.killed.Load() {
			return stClose
		}
		if g.stalled.Load() {
			return stOK
		}
		args, n, err := c.parser.Next(c.buf[c.r:c.w], c.authed)
		if err != nil {
			var pe *ProtocolError
			if errors.As(err, &pe) {
				srv.stats.protoErrors.Add(1)
				c.WriteError(pe.Reply())
			}
			return e.finish(g)
		}
		if n == 0 {
			break
		}
		c.r += n
		if len(args) == 0 {
			continue
		}
		c.cmds++
		c.replyStart = len(c.out)
		if e.blocker != nil && e.blocker.MayBlock(c, args) {
			e.write(g) // the replies of the commands before it go out now
			c.replyStart = 0
			g.busy = true
			g.busyA.Store(true)
			e.offloads.Add(1)
			srv.loopWG.Add(1)
			go e.offload(g, args)
			return stBusy
		}
		srv.handler.ServeRESP(c, args)
		if st := e.afterCommand(g, c.replyStart, true); st != stOK {
			return st
		}
	}
	return e.endBatch(g)
}

// afterCommand is loop.afterCommand: the output limit, QUIT, a write every nextFlush bytes
// (on the loop only; an offloaded command's replies are written after the hand-back).
func (e *gnetEngine) afterCommand(g *gnetConn, before int, onLoop bool) status {
	c, srv := g.c, e.srv
	c.parser.Release()
	if lim := srv.cfg.MaxOutputBuffer; lim > 0 && len(c.out)-before > lim {
		srv.stats.outputLimit.Add(1)
		srv.outputLog.log(srv.log, srv.now(), "client closed for overcoming of output buffer limits",
			zap.String("client", c.remote), zap.Int("pending_bytes", len(c.out)),
			zap.Int("limit", lim))
		c.out = c.out[:before]
		if !onLoop {
			return stClose // the hand-back writes what is left, then closes
		}
		return e.finish(g)
	}
	if c.closing {
		if !onLoop {
			return stClose
		}
		return e.finish(g)
	}
	if onLoop && len(c.out) >= c.nextFlush {
		e.write(g)
	}
	return stOK
}

func (e *gnetEngine) endBatch(g *gnetConn) status {
	c, srv := g.c, e.srv
	e.write(g)
	if c.cmds > 0 {
		srv.stats.commands.Add(c.cmds)
		c.lastCmd.Store(c.now.UnixMilli())
		c.cmds = 0
		if srv.batches != nil {
			srv.batches.BatchDone(c, srv.now().Sub(c.now))
		}
	}
	if !c.makeRoom() {
		srv.stats.queryLimit.Add(1)
		srv.stats.protoErrors.Add(1)
		c.WriteError("ERR Protocol error: query buffer limit exceeded")
		return e.finish(g)
	}
	return stOK
}

// finish writes what is pending and closes: at once when the socket took it all, else once
// gnet has written it (or the write timeout passes).
func (e *gnetEngine) finish(g *gnetConn) status {
	e.write(g)
	if !g.stalled.Load() {
		return stClose
	}
	g.drainClose = true
	return stOK
}

// offload runs a command that may wait on a goroutine of its own, then hands the connection
// back through the loop's task queue.
func (e *gnetEngine) offload(g *gnetConn, args [][]byte) {
	defer e.srv.loopWG.Done()
	c := g.c
	st := stOK
	func() {
		defer func() {
			if r := recover(); r != nil {
				e.srv.log.Error("command panicked; connection closed", zap.Any("panic", r),
					zap.String("client", c.remote), zap.Stack("stack"))
				st = stClose
			}
		}()
		e.srv.handler.ServeRESP(c, args)
		st = e.afterCommand(g, c.replyStart, false)
	}()
	err := g.gc.EventLoop().Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		e.handBack(g, st)
		return nil
	}))
	if err != nil {
		// The engine is shutting down: it has closed the connection (OnClose saw it busy).
		e.srv.dropConn(c)
	}
}

// handBack runs on the loop: the connection is the loop's again.
func (e *gnetEngine) handBack(g *gnetConn, st status) {
	g.busy = false
	g.busyA.Store(false)
	if g.closed {
		e.srv.dropConn(g.c) // closed while its command ran (OnClose left it to us)
		return
	}
	if st == stClose || e.srv.killed.Load() {
		e.write(g)
		e.close(g)
		return
	}
	e.serve(g)
}

// recoverCommand turns a panic in a command on the loop into the close of its connection.
func (e *gnetEngine) recoverCommand(g *gnetConn) {
	if r := recover(); r != nil {
		e.srv.log.Error("command panicked; connection closed", zap.Any("panic", r),
			zap.String("client", g.c.remote), zap.Stack("stack"))
		if !g.busy {
			e.close(g)
		}
	}
}

// tick is the ticker goroutine: it wakes stalled connections, sweeps timeouts, follows
// Shutdown and finally stops gnet.
func (e *gnetEngine) tick() {
	srv := e.srv
	defer srv.loopWG.Done()
	t := time.NewTicker(gnetTick)
	defer t.Stop()
	sweepEvery := time.Duration(e.waitMillis()) * time.Millisecond
	for range t.C {
		closing := srv.closing.Load()
		if closing && srv.stats.connected.Load() == 0 {
			_ = e.cli.Stop()
			return
		}
		now := srv.now()
		sweep := now.Sub(e.lastSweep) >= sweepEvery
		if sweep {
			e.lastSweep = now
		}
		killed := srv.killed.Load()
		e.mu.Lock()
		for g := range e.conns {
			switch {
			case killed && !g.busyA.Load():
				_ = g.gc.Close()
			case closing && !g.busyA.Load():
				_ = g.gc.Wake(nil)
			case g.stalled.Load():
				if wt := srv.cfg.WriteTimeout; sweep && wt > 0 && now.UnixNano()-g.blockedAt.Load() > int64(wt) {
					_ = g.gc.Close()
				} else {
					_ = g.gc.Wake(nil)
				}
			case sweep && srv.cfg.IdleTimeout > 0 && !g.busyA.Load() &&
				now.UnixNano()-g.lastRead.Load() > int64(srv.cfg.IdleTimeout):
				srv.log.Debug("closing idle client")
				_ = g.gc.Close()
			}
		}
		e.mu.Unlock()
	}
}

// waitMillis is the sweep interval, as loop.waitMillis.
func (e *gnetEngine) waitMillis() int {
	d := time.Second
	cfg := &e.srv.cfg
	if cfg.IdleTimeout > 0 && e.srv.readRearm < d {
		d = e.srv.readRearm
	}
	if cfg.WriteTimeout > 0 && e.srv.writeRearm < d {
		d = e.srv.writeRearm
	}
	if ms := int(d / time.Millisecond); ms > 0 {
		return ms
	}
	return 1
}
