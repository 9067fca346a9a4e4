package resp

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Conn is one client connection. Its methods are called from the connection's own goroutine
// (the handler runs there), except Info and the server's shutdown wake-up.
type Conn struct {
	srv    *Server
	nc     net.Conn
	id     int64
	remote string
	local  string
	born   time.Time

	proto      int
	authed     bool
	authFails  int  // failed Authenticate calls
	replyStart int  // len(out) when the running command started (OutputExceeded)
	closing    bool // QUIT: close after this reply
	name       string
	libName    string
	libVer     string
	state      any          // the handler's per-connection state (SetState)
	lastCmd    atomic.Int64 // unix ms of the last command, for CLIENT INFO idle
	nextFlush  int          // flush when out grows past this mid-batch

	now                   time.Time // read once per batch
	readArmed, writeArmed time.Time // when the deadlines were last pushed forward

	buf    []byte // read buffer; buf[r:w] holds unparsed bytes
	r, w   int
	out    []byte
	parser *Parser
	peeker *Parser // PeekNext's own (made on first use): the running command's args stay intact
	cmds   int64   // commands in the current batch, folded into server stats per batch
	// cmdAt, cmdLen: where the running command's bytes are in buf (RawCommand).
	cmdAt, cmdLen int

	// Event-loop model only (loop_linux.go); fd is -1 on the goroutine model.
	fd         int
	lp         *loop
	outOff     int       // bytes of out already written (a write cut short)
	blockedAt  time.Time // when the pending replies stopped moving (write timeout)
	lastRead   time.Time // idle timeout
	events     uint32    // epoll interest registered
	busy       bool      // a goroutine other than the loop owns the connection
	detached   bool      // out of the loop's epoll set while busy (loop.detach)
	closeNow   bool      // set by that goroutine: close when handed back
	drainClose bool      // close once the pending replies are sent
	cmdTok     uint64    // the loop's command word while a command of c runs on the loop
	suspension           // a command waiting for another server (suspend.go)
}

// ID is the connection's unique id (CLIENT ID).
func (c *Conn) ID() int64 { return c.id }

// Proto is the protocol version in use: 2 or 3.
func (c *Conn) Proto() int { return c.proto }

// SetProto switches the protocol version (HELLO).
func (c *Conn) SetProto(v int) { c.proto = v }

// Authed reports whether the client may run commands: it authenticated, or no password is
// required.
func (c *Conn) Authed() bool { return c.authed }

// PasswordRequired reports whether the server was started with a password.
func (c *Conn) PasswordRequired() bool { return c.srv.cfg.RequirePass != "" }

// Authenticate checks pass against the server's password in constant time and marks the
// connection authenticated when it matches.
func (c *Conn) Authenticate(pass []byte) bool {
	want := c.srv.cfg.RequirePass
	ok := subtle.ConstantTimeCompare(pass, []byte(want)) == 1
	if ok {
		c.authed = true
	} else {
		c.authFails++
	}
	return ok
}

// ResetState returns the connection to its state after accept (RESET): RESP2, no name,
// not authenticated when a password is required.
func (c *Conn) ResetState() {
	c.proto = 2
	c.name = ""
	c.authed = c.srv.cfg.RequirePass == ""
}

// CloseAfterReply makes the server close the connection once the pending replies are sent.
func (c *Conn) CloseAfterReply() { c.closing = true }

// Name is the name set with CLIENT SETNAME.
func (c *Conn) Name() string { return c.name }

// SetName sets the connection name.
func (c *Conn) SetName(s string) { c.name = s }

// SetLib records CLIENT SETINFO LIB-NAME / LIB-VER; an empty value leaves the field as is.
func (c *Conn) SetLib(name, ver string) {
	if name != "" {
		c.libName = name
	}
	if ver != "" {
		c.libVer = ver
	}
}

// State returns what the handler attached to the connection with SetState (nil at first).
func (c *Conn) State() any { return c.state }

// SetState attaches the handler's per-connection state (transactions, tracking flags).
func (c *Conn) SetState(v any) { c.state = v }

// Server is the server the connection belongs to.
func (c *Conn) Server() *Server { return c.srv }

// ClientInfo describes a connection for CLIENT INFO / CLIENT LIST.
type ClientInfo struct {
	ID        int64
	Addr      string
	LocalAddr string
	Name      string
	Age       time.Duration
	Idle      time.Duration
	Proto     int
	LibName   string
	LibVer    string
}

// Info describes the connection. now is passed in so the caller controls the clock.
func (c *Conn) Info(now time.Time) ClientInfo {
	last := time.UnixMilli(c.lastCmd.Load())
	return ClientInfo{
		ID: c.id, Addr: c.remote, LocalAddr: c.local, Name: c.name,
		Age: now.Sub(c.born), Idle: now.Sub(last), Proto: c.proto,
		LibName: c.libName, LibVer: c.libVer,
	}
}

// PeekNext parses the command that follows the running one in the pipeline (the read
// buffer), without taking it: a handler may answer the commands that follow its own in one
// go (a pipeline forwarded in one round trip) and take each with TakeNext. It reports false
// when no complete command follows, the next is inline, or it is malformed (the connection
// then parses it as usual). args alias the read buffer, which stays put until the running
// ServeRESP returns; the slice itself is reused by the next PeekNext. Called only from
// ServeRESP, on the connection's goroutine.
func (c *Conn) PeekNext() (args [][]byte, n int, ok bool) {
	if c.r >= c.w || c.buf[c.r] != '*' {
		return nil, 0, false
	}
	if c.peeker == nil {
		c.peeker = NewParser(c.srv.cfg.Limits)
	}
	args, n, err := c.peeker.Next(c.buf[c.r:c.w], c.authed)
	if err != nil || n == 0 || len(args) == 0 {
		c.peeker.Reset()
		return nil, 0, false
	}
	return args, n, true
}

// RawCommand returns the running command as the client sent it, RESP bytes that a handler
// may send on unchanged (to the leader of an ordered tag): when args are the arguments the
// connection parsed for it (ServeRESP's own, not a copy such as EXEC's queue) and it came as
// a multibulk array. Nil otherwise (an inline command, or args of the handler's making). The
// bytes alias the read buffer: valid until the running ServeRESP returns.
func (c *Conn) RawCommand(args [][]byte) []byte {
	p := c.parser.args
	if len(args) == 0 || len(p) != len(args) || &p[0] != &args[0] || c.cmdLen == 0 || c.buf[c.cmdAt] != '*' {
		return nil
	}
	return c.buf[c.cmdAt : c.cmdAt+c.cmdLen]
}

// NextRaw returns the n bytes of the command PeekNext returned, as the client sent them
// (always a multibulk array), before TakeNext takes them; they alias the read buffer, as
// the peeked args do.
func (c *Conn) NextRaw(n int) []byte { return c.buf[c.r : c.r+n] }

// NextIs reports whether the command that follows the running one (and those taken) is raw
// byte for byte, raw being a whole command as NextRaw gave it: the same command again, which
// TakeNext(len(raw)) takes without parsing it.
func (c *Conn) NextIs(raw []byte) bool { return bytes.HasPrefix(c.buf[c.r:c.w], raw) }

// TakeNext takes the n bytes of the command PeekNext returned: the running ServeRESP
// answers it (one reply more, after its own).
func (c *Conn) TakeNext(n int) {
	c.r += n
	c.cmds++
	if c.peeker != nil {
		c.peeker.Release()
	}
}

// readYield is a build-time switch for benchmarks, not a setting: building with
// -ldflags '-X github.com/leafd/leafd/resp.readYield=off' drops the runtime.Gosched before
// each read, so that both variants can be measured side by side (docs/BENCHMARKS.md).
var readYield = "on"

var yieldBeforeRead = readYield != "off"

const (
	minReadBuf   = 16 * 1024
	flushAt      = 64 * 1024
	shrinkOutCap = 256 * 1024
)

// serve runs the connection until the client leaves, misbehaves, idles out or the server
// shuts down. Replies of pipelined commands are gathered and written once per read.
func (c *Conn) serve() {
	cfg := &c.srv.cfg
	defer c.nc.Close()
	for {
		// One clock read per batch serves the deadlines and the idle bookkeeping.
		c.now = c.srv.now()
		batchStart := c.now
		// Run every complete command in the buffer.
		for c.r < c.w {
			if c.srv.killed.Load() {
				return
			}
			args, n, err := c.parser.Next(c.buf[c.r:c.w], c.authed)
			if err != nil {
				var pe *ProtocolError
				if errors.As(err, &pe) {
					c.srv.stats.protoErrors.Add(1)
					c.WriteError(pe.Reply())
				}
				c.flush()
				return
			}
			if n == 0 {
				break
			}
			c.cmdAt, c.cmdLen = c.r, n
			c.r += n
			if len(args) == 0 {
				continue
			}
			c.cmds++
			before := len(c.out)
			c.replyStart = before
			c.srv.handler.ServeRESP(c, args)
			c.parser.Release()
			// Smaller replies are written whenever nextFlush bytes are pending, so only a
			// reply larger than the limit can take the pending bytes past it: the client is
			// closed with it unsent (the replies of the commands before it are sent), as
			// Redis closes a client over its output limit.
			if lim := cfg.MaxOutputBuffer; lim > 0 && len(c.out)-before > lim {
				c.srv.stats.outputLimit.Add(1)
				c.srv.outputLog.log(c.srv.log, c.srv.now(), "client closed for overcoming of output buffer limits",
					zap.String("client", c.remote), zap.Int("pending_bytes", len(c.out)),
					zap.Int("limit", lim))
				c.out = c.out[:before]
				c.flush()
				return
			}
			if c.closing {
				c.flush()
				return
			}
			if len(c.out) >= c.nextFlush {
				if !c.flush() {
					return
				}
			}
		}
		if len(c.out) > 0 && !c.flush() {
			return
		}
		if c.cmds > 0 {
			c.srv.stats.commands.Add(c.cmds)
			c.lastCmd.Store(c.now.UnixMilli())
			c.cmds = 0
			if c.srv.batches != nil {
				// flush read the clock again just before writing the replies: no extra read.
				c.srv.batches.BatchDone(c, c.now.Sub(batchStart))
			}
		}
		if !c.makeRoom() {
			c.srv.stats.queryLimit.Add(1)
			c.srv.stats.protoErrors.Add(1)
			c.WriteError("ERR Protocol error: query buffer limit exceeded")
			c.flush()
			return
		}
		if cfg.IdleTimeout > 0 {
			// Re-arming a deadline costs a runtime timer update, so do it at most once a
			// second (rearmEvery); the idle limit is then honoured to within a second.
			if c.now.Sub(c.readArmed) > c.srv.readRearm {
				c.readArmed = c.now
				_ = c.nc.SetReadDeadline(c.now.Add(cfg.IdleTimeout))
			}
		}
		// Checked after arming: Shutdown sets closing before it sets a past deadline, so
		// either we see closing here or its deadline overrides ours.
		if c.srv.closing.Load() {
			return
		}
		// Let the other connections run before reading: by the time this one is scheduled
		// again its client has usually sent the next request, so the read finds data instead
		// of costing an extra read that fails with EAGAIN before the goroutine parks (a third
		// of all reads in a profile under redis-benchmark). Measured: p99 0.51-0.68 ms instead
		// of 0.73-0.97 ms unpipelined (docs/BENCHMARKS.md).
		if yieldBeforeRead {
			runtime.Gosched()
		}
		n, err := c.nc.Read(c.buf[c.w:])
		c.w += n
		if err != nil && n == 0 {
			if errors.Is(err, os.ErrDeadlineExceeded) && !c.srv.closing.Load() {
				c.srv.log.Debug("closing idle client")
			}
			return
		}
	}
}

// makeRoom compacts and grows the read buffer so a read can add bytes and the command being
// parsed fits. It reports false when the command would exceed the per-connection limit.
func (c *Conn) makeRoom() bool {
	if c.r == c.w {
		c.r, c.w = 0, 0
		if len(c.buf) > 4*minReadBuf {
			c.buf = make([]byte, minReadBuf) // give back what a large request took
		}
		return true
	}
	// need counts from the start of the unparsed command, which is c.r.
	need := c.parser.Need
	if m := c.w - c.r + 1; need < m {
		need = m
	}
	if c.r+need <= len(c.buf) {
		return true
	}
	if c.r > 0 {
		c.w = copy(c.buf, c.buf[c.r:c.w])
		c.r = 0
		if need <= len(c.buf) {
			return true
		}
	}
	limit := c.srv.cfg.MaxQueryBuffer
	if need > limit {
		return false
	}
	size := 2 * len(c.buf)
	if size < need {
		size = need
	}
	if size > limit {
		size = limit
	}
	nb := make([]byte, size)
	copy(nb, c.buf[:c.w])
	c.buf = nb
	return true
}

// flush writes the pending replies. It reports false when the client is gone or does not
// read its replies within the write timeout.
func (c *Conn) flush() bool {
	if len(c.out) == 0 {
		return true
	}
	// The commands may have taken a while (a pipeline of commands that each wait for a
	// segment): the write deadline, and the idle deadline armed after the batch, count from
	// now, not from the start of the batch (a deadline already past would drop the replies).
	c.now = c.srv.now()
	if wt := c.srv.cfg.WriteTimeout; wt > 0 {
		if c.now.Sub(c.writeArmed) > c.srv.writeRearm {
			c.writeArmed = c.now
			_ = c.nc.SetWriteDeadline(c.now.Add(wt))
		}
	}
	_, err := c.nc.Write(c.out)
	if cap(c.out) > shrinkOutCap {
		c.out = make([]byte, 0, flushAt)
	} else {
		c.out = c.out[:0]
	}
	return err == nil
}
