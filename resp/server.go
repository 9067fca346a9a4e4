// Package resp is leafd's Redis-protocol front end: it accepts connections, parses RESP2,
// RESP3 and inline commands with a bounded, resumable parser of its own, runs each command
// through a Handler on the connection's goroutine, and writes the replies of a pipeline with
// one write. It knows nothing about IDs.
//
// redcon's read path is not used: in v1.6.4 it has no bound on multibulk counts or bulk
// lengths (a single "*1\r\n$9223372036854775807\r\nab" panics the process). Every limit here
// answers with Redis's "-ERR Protocol error: ..." and closes the connection.
package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Handler runs commands. ServeRESP is called on the connection's goroutine with the
// command's arguments, which alias the read buffer and are valid only during the call; it
// writes exactly one reply to c.
type Handler interface {
	ServeRESP(c *Conn, args [][]byte)
}

// Blocker may be implemented by a Handler some of whose commands wait on purpose (a store
// call, a pacing delay). On the event-loop model the server asks it before each command and
// runs a command it answers true for on a goroutine of its own, so the other connections of
// the loop go on; a command that blocks without saying so is caught by the loop's watchdog
// after 10-20 ms (loop_linux.go). It is given the connection because whether a command waits
// may depend on the connection's state (EXEC waits when a command it queued may wait).
// MayBlock is called on the connection's goroutine, must be cheap and must not keep args.
type Blocker interface {
	MayBlock(c *Conn, args [][]byte) bool
}

// Server models (Config.Model).
const (
	// ModelGoroutine serves each connection on a goroutine of its own with blocking I/O (TLS
	// connections always, and every connection off Linux).
	ModelGoroutine = "goroutine"
	// ModelEventLoop serves plain-TCP connections on epoll event loops, one per GOMAXPROCS,
	// each one goroutine (Linux; elsewhere, and for TLS, the goroutine model is used). The
	// default: on a quiet machine it met redis-server's p99 where the goroutine model did not
	// (docs/BENCHMARKS.md, "The server models").
	ModelEventLoop = "eventloop"
)

// BatchObserver is implemented by a Handler that wants to know how long each batch of
// commands took: from the clock read that began it (one per read of pipelined commands) to
// its replies written, read once more when the batch ran at least one command. That is the
// latency its clients see; BatchDone runs on the connection's goroutine or loop, after the
// batch's last ServeRESP and before the next batch's first.
type BatchObserver interface {
	BatchDone(c *Conn, took time.Duration)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(c *Conn, args [][]byte)

// ServeRESP calls f.
func (f HandlerFunc) ServeRESP(c *Conn, args [][]byte) { f(c, args) }

// Config configures a Server. A zero field takes its default from DefaultConfig.
type Config struct {
	// MaxClients is the number of connections served at once; more are answered with
	// "ERR max number of clients reached" and closed (Redis's maxclients, 10000).
	MaxClients int
	// IdleTimeout closes a connection that sends nothing for this long (default 5 minutes;
	// negative disables).
	IdleTimeout time.Duration
	// WriteTimeout closes a connection that does not read its replies for this long
	// (default 30 seconds; negative disables).
	WriteTimeout time.Duration
	// MaxQueryBuffer bounds the bytes buffered for one connection's unparsed input
	// (default 4 MiB, and at least the largest bulk plus its header).
	MaxQueryBuffer int
	// MaxOutputBuffer closes a connection whose pending replies exceed this many bytes, as
	// Redis's client-output-buffer-limit does (default 1 MiB; negative disables). Replies of a
	// pipeline are written every 64 KiB (or every MaxOutputBuffer bytes when smaller), so in
	// practice one reply larger than the limit closes the client, unsent.
	MaxOutputBuffer int
	// Limits bounds each request (see Limits).
	Limits Limits
	// RequirePass, when set, makes clients AUTH (or HELLO ... AUTH) before other commands.
	RequirePass string
	// TLS, when set, serves TLS instead of plain TCP. TLS connections are always served on
	// the goroutine model.
	TLS *tls.Config
	// Model is the server model: ModelEventLoop (the default) or ModelGoroutine.
	Model string
	// Loops is the number of event loops (default GOMAXPROCS).
	Loops int
	// LoopSpin is how long an event loop goes on polling after a round that had work before
	// it parks (default 20µs; negative: park at once). A client's request to a parked loop
	// pays for waking its thread; see the loop's spin (loop_linux.go).
	LoopSpin time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// DefaultLoopSpin is Config.LoopSpin's default.
const DefaultLoopSpin = 20 * time.Microsecond

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		MaxClients:      10000,
		IdleTimeout:     5 * time.Minute,
		WriteTimeout:    30 * time.Second,
		MaxQueryBuffer:  4 << 20,
		MaxOutputBuffer: 1 << 20,
		Limits:          DefaultLimits(),
		Model:           ModelEventLoop,
		LoopSpin:        DefaultLoopSpin,
		Now:             time.Now,
	}
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.MaxQueryBuffer < c.Limits.MaxBulk+maxHeaderLen+2 {
		return fmt.Errorf("resp: max query buffer (%d bytes) must hold the largest bulk (%d bytes) and its header", c.MaxQueryBuffer, c.Limits.MaxBulk)
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxClients <= 0 {
		c.MaxClients = d.MaxClients
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.MaxQueryBuffer <= 0 {
		c.MaxQueryBuffer = d.MaxQueryBuffer
	}
	if c.MaxOutputBuffer == 0 {
		c.MaxOutputBuffer = d.MaxOutputBuffer
	}
	c.Limits = c.Limits.withDefaults()
	if c.Model == "" {
		c.Model = d.Model
	}
	if c.LoopSpin == 0 {
		c.LoopSpin = d.LoopSpin
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	return c
}

// Stats are the server's counters for INFO.
type Stats struct {
	ConnectedClients    int64
	TotalConnections    int64
	RejectedConnections int64
	TotalCommands       int64
	ProtocolErrors      int64
	// OutputLimitClosed counts connections closed by MaxOutputBuffer (Redis's INFO
	// client_output_buffer_limit_disconnections).
	OutputLimitClosed int64
	// QueryLimitClosed counts connections closed by MaxQueryBuffer
	// (client_query_buffer_limit_disconnections).
	QueryLimitClosed int64
	// LoopOffloads counts the commands an event loop ran on a goroutine of their own because
	// the Handler said they may wait (Blocker); LoopTakeovers those whose loop the watchdog
	// handed to a new goroutine because they waited without saying so (each stalled the
	// loop's other connections for 10-20 ms).
	LoopOffloads  int64
	LoopTakeovers int64
}

type counters struct {
	connected, total, rejected, commands, protoErrors atomic.Int64
	outputLimit, queryLimit                           atomic.Int64
	rejecting                                         atomic.Int64 // rejections being answered
}

// Server serves RESP on one listener.
type Server struct {
	cfg     Config
	handler Handler
	batches BatchObserver // the handler, when it observes batches
	log     *zap.Logger
	now     func() time.Time
	started time.Time

	stats     counters
	outputLog limitLog
	nextID    atomic.Int64
	closing   atomic.Bool
	killed    atomic.Bool // Shutdown's context ended: stop running buffered commands

	// How often the connections push their read and write deadlines forward (rearmEvery).
	readRearm, writeRearm time.Duration

	// loops are the event loops (ModelEventLoop without TLS, on Linux); loopWG counts their
	// goroutines, watchdogs and offloaded commands.
	loops  []*loop
	loopWG sync.WaitGroup

	mu    sync.Mutex
	ln    net.Listener
	conns map[*Conn]struct{}
	wg    sync.WaitGroup
	done  chan struct{}
	once  sync.Once
	// loopsClosed: the loops' descriptors are closed (under mu).
	loopsClosed bool
	// hooks are the loops' test seams (loop_linux.go); nil in production.
	hooks *loopHooks
}

// NewServer returns a server that runs commands with h.
func NewServer(cfg Config, h Handler, log *zap.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Model != ModelEventLoop && cfg.Model != ModelGoroutine {
		return nil, fmt.Errorf("resp: unknown server model %q (want %s or %s)", cfg.Model, ModelEventLoop, ModelGoroutine)
	}
	batches, _ := h.(BatchObserver)
	return &Server{
		cfg: cfg, handler: h, batches: batches, log: log, now: cfg.Now, started: cfg.Now(),
		conns: make(map[*Conn]struct{}), done: make(chan struct{}),
		readRearm: rearmEvery(cfg.IdleTimeout), writeRearm: rearmEvery(cfg.WriteTimeout),
	}, nil
}

// rearmEvery is how often a deadline of timeout d is pushed forward. Re-arming costs a
// runtime timer update, so it is done at most once a second; a short timeout is re-armed more
// often (every quarter of it), or a busy client would hit a deadline armed a second ago.
func rearmEvery(d time.Duration) time.Duration {
	if q := d / 4; q < time.Second {
		return q
	}
	return time.Second
}

// Listen binds addr; Serve must be called next.
func (s *Server) Listen(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return s.ListenOn(ln), nil
}

// ListenOn makes ln the listener Serve accepts on, in place of Listen: for a caller that
// needs the bound address before the server exists (a test's instance that advertises it).
func (s *Server) ListenOn(ln net.Listener) net.Addr {
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	return ln.Addr()
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("resp: server closed")

// Serve accepts connections until Shutdown. It returns ErrServerClosed after Shutdown.
func (s *Server) Serve() error {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return errors.New("resp: Serve called before Listen")
	}
	if s.cfg.Model == ModelEventLoop && s.cfg.TLS == nil && loopsSupported {
		n := s.cfg.Loops
		if n <= 0 {
			n = runtime.GOMAXPROCS(0)
		}
		if err := s.startLoops(n); err != nil {
			s.log.Warn("event loops not available; serving connections on goroutines", zap.Error(err))
		}
	}
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of file descriptors and the like: back off instead of spinning.
				if delay == 0 {
					delay = 5 * time.Millisecond
				} else if delay < time.Second {
					delay *= 2
				}
				s.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("backoff", delay))
				select {
				case <-time.After(delay):
				case <-s.done:
					return ErrServerClosed
				}
				continue
			}
			return err
		}
		delay = 0
		s.accept(nc)
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) accept(nc net.Conn) {
	s.stats.total.Add(1)
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if s.stats.connected.Load() >= int64(s.cfg.MaxClients) {
		s.stats.rejected.Add(1)
		s.reject(nc)
		return
	}
	now := s.now()
	c := &Conn{
		srv: s, nc: nc, fd: -1, id: s.nextID.Add(1), born: now,
		remote: nc.RemoteAddr().String(), local: nc.LocalAddr().String(),
		proto: 2, authed: s.cfg.RequirePass == "",
		buf: make([]byte, minReadBuf), out: make([]byte, 0, 4096),
		parser: NewParser(s.cfg.Limits),
	}
	c.lastCmd.Store(now.UnixMilli())
	c.nextFlush = flushAt
	if lim := s.cfg.MaxOutputBuffer; lim > 0 && lim < flushAt {
		c.nextFlush = lim
	}
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.stats.connected.Add(1)
	if len(s.loops) > 0 && s.adopt(c, nc) {
		return
	}
	go func() {
		defer s.dropConn(c)
		// A bug in a command must cost one connection, not the process (and every other
		// client with it). The deferred recover is set up once per connection, not per command.
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("command panicked; connection closed", zap.Any("panic", r),
					zap.String("client", c.remote), zap.Stack("stack"))
				_ = c.nc.Close()
			}
		}()
		c.serve()
	}()
}

// dropConn forgets a closed connection.
func (s *Server) dropConn(c *Conn) {
	s.stats.connected.Add(-1)
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// maxRejecting bounds the connections over MaxClients that are answered at once (see reject);
// the file-descriptor reserve of cmd/leafd counts them.
const maxRejecting = 16

// reject answers a client over the limit and closes it. It writes on a goroutine of its own
// with a deadline on both directions: over TLS the write first runs the handshake, which reads
// the client's hello, and a client that never sends one must not stall the accept loop.
func (s *Server) reject(nc net.Conn) {
	// Each rejection being answered holds a descriptor for up to a second; a flood of them
	// must not take the descriptors the store and the snowflake lease need, so past
	// maxRejecting they are closed at once without a reply.
	if s.stats.rejecting.Load() >= maxRejecting {
		_ = nc.Close()
		return
	}
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	s.stats.rejecting.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.stats.rejecting.Add(-1)
		_ = nc.SetDeadline(s.now().Add(time.Second))
		_, _ = nc.Write([]byte("-ERR max number of clients reached\r\n"))
		_ = nc.Close()
	}()
}

// Shutdown stops accepting, wakes every connection so it finishes the commands it has read,
// sends their replies and closes, and waits for them. When ctx ends first the remaining
// connections are closed at once. It is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() {
		s.closing.Store(true)
		close(s.done)
		s.mu.Lock()
		if s.ln != nil {
			_ = s.ln.Close()
		}
		now := s.now()
		for c := range s.conns {
			// A connection blocked in Read returns at once; one running a command finishes
			// it, flushes and then sees closing. (Event-loop connections have no net.Conn:
			// their loop is woken below.)
			if c.nc != nil {
				_ = c.nc.SetReadDeadline(now)
			}
		}
		s.mu.Unlock()
		s.wakeLoops()
	})
	waited := make(chan struct{})
	go func() {
		s.wg.Wait()
		// Every connection is closed, so every loop returns; then their descriptors go.
		s.wakeLoops()
		s.loopWG.Wait()
		s.closeLoops()
		close(waited)
	}()
	select {
	case <-waited:
		return nil
	case <-ctx.Done():
		// Connections stop before their next buffered command: a long pipeline of commands
		// that each wait (for a segment, say) would otherwise keep Shutdown waiting after
		// the connections are closed.
		s.killed.Store(true)
		s.mu.Lock()
		for c := range s.conns {
			if c.nc != nil {
				_ = c.nc.Close()
			}
		}
		s.mu.Unlock()
		s.wakeLoops()
		<-waited
		return ctx.Err()
	}
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{
		ConnectedClients:    s.stats.connected.Load(),
		TotalConnections:    s.stats.total.Load(),
		RejectedConnections: s.stats.rejected.Load(),
		TotalCommands:       s.stats.commands.Load(),
		ProtocolErrors:      s.stats.protoErrors.Load(),
		OutputLimitClosed:   s.stats.outputLimit.Load(),
		QueryLimitClosed:    s.stats.queryLimit.Load(),
		LoopOffloads:        s.loopOffloads(),
		LoopTakeovers:       s.loopTakeovers(),
	}
}

// Started is when the server was created (INFO uptime).
func (s *Server) Started() time.Time { return s.started }

// HasClient reports whether a connection with this CLIENT ID is open (CLIENT TRACKING
// REDIRECT checks its target exists, as Redis does).
func (s *Server) HasClient(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.id == id {
			return true
		}
	}
	return false
}

// Config returns the effective configuration.
func (s *Server) Config() Config { return s.cfg }
