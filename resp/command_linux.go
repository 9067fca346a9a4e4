//go:build linux

package resp

// Commands on the event loop (loop_linux.go): one readiness event read, the bounded parse, the
// commands run, their replies written with backpressure.

import (
	"errors"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// handle serves one readiness event of c.
func (lp *loop) handle(c *Conn, ev uint32) (st status) {
	defer lp.recoverCommand(c, &st)
	if c.stalled() {
		// Waiting to send: only a writable socket (or an error) moves it on.
		if !c.writeOut() {
			return stClose
		}
		if c.stalled() {
			return stOK
		}
		if c.drainClose {
			return stClose
		}
		return lp.process(c)
	}
	if ev&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
		return stOK
	}
	for {
		n, err := rawRead(c.fd, c.buf[c.w:])
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				return stOK
			}
			return stClose
		}
		if n == 0 {
			return stClose
		}
		c.w += n
		break
	}
	c.lastRead = c.now
	return lp.process(c)
}

// resume carries on with a connection handed back: the suspended command's replies (its
// Resumer), then the commands left in its buffer.
func (lp *loop) resume(c *Conn) (st status) {
	defer lp.recoverCommand(c, &st)
	if r := c.resumer; r != nil {
		c.resumer = nil
		c.susp.Store(suspNone)
		r.Resumed(c)
		if st := lp.afterCommand(c, c.replyStart); st != stOK {
			return st
		}
	}
	if c.stalled() {
		if !c.writeOut() {
			return stClose
		}
		if c.stalled() {
			return stOK
		}
	}
	if c.drainClose {
		return stClose
	}
	return lp.process(c)
}

// recoverCommand turns a panic in a command into the close of its connection only.
func (lp *loop) recoverCommand(c *Conn, st *status) {
	r := recover()
	if r == nil {
		return
	}
	lp.srv.log.Error("command panicked; connection closed", zap.Any("panic", r),
		zap.String("client", c.remote), zap.Stack("stack"))
	tok := c.cmdTok
	c.cmdTok = 0
	if tok == 0 || !lp.endCmd(tok) {
		*st = stClose
		return
	}
	// The watchdog gave the loop away while the command ran: this goroutine owns only c.
	c.closeNow = true
	lp.handBack(c)
	*st = stDeposed
}

func (lp *loop) handBack(c *Conn) {
	lp.mu.Lock()
	lp.returned = append(lp.returned, c)
	lp.mu.Unlock()
	lp.wake()
}

// process runs the complete commands in c's buffer, as Conn.serve does, and writes their
// replies. It stops early while replies are waiting to be sent (backpressure).
func (lp *loop) process(c *Conn) status {
	srv := lp.srv
	for c.r < c.w {
		if srv.killed.Load() {
			return stClose
		}
		if c.stalled() {
			return stOK // resumes once the socket takes the pending replies
		}
		args, n, err := c.parser.Next(c.buf[c.r:c.w], c.authed)
		if err != nil {
			var pe *ProtocolError
			if errors.As(err, &pe) {
				srv.stats.protoErrors.Add(1)
				c.WriteError(pe.Reply())
			}
			return c.finish()
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
		c.onLoop = true
		if lp.blocker != nil && lp.blocker.MayBlock(c, args) {
			c.onLoop = false
			// The replies of the commands before it go out now, not after the wait.
			if len(c.out) > c.outOff && !c.writeOut() {
				return stClose
			}
			before = len(c.out) // the write may have emptied out
			c.replyStart = before
			c.busy = true
			lp.offloads.Add(1)
			lp.startOffload(offJob{c: c, args: args, before: before})
			return stBusy
		}
		tok := lp.beginCmd(c)
		c.cmdTok = tok
		srv.handler.ServeRESP(c, args)
		c.onLoop = false
		deposed := lp.endCmd(tok)
		if !deposed {
			// A deposed goroutine keeps the word: a panic after this point (afterCommand)
			// must still hand the connection back, not close it from a goroutine that is
			// no longer the loop.
			c.cmdTok = 0
		}
		if c.resumer != nil {
			if st, done := lp.suspended(c, deposed); done {
				return st
			}
			before = c.replyStart
		}
		st := lp.afterCommand(c, before)
		if deposed {
			if st == stClose {
				c.closeNow = true
			}
			lp.handBack(c)
			return stDeposed
		}
		if st != stOK {
			return st
		}
	}
	return lp.endBatch(c)
}

// suspended follows a command that Suspended its connection (suspend.go), just returned on
// the goroutine that ran it (deposed: no longer the loop). done reports that process returns
// st; otherwise the command was resumed already and its replies are written: process goes on.
func (lp *loop) suspended(c *Conn, deposed bool) (st status, done bool) {
	if !deposed && len(c.out) > c.outOff {
		// The replies of the commands before it go out now, not after the wait.
		if !c.writeOut() {
			c.closeNow = true // closed when handed back (housekeep)
		}
		c.replyStart = len(c.out)
	}
	if c.susp.CompareAndSwap(suspPending, suspParked) {
		// Resume hands c back; until then it is not this goroutine's to touch.
		if deposed {
			// busy already: the goroutine that took the loop set it. Woken, that goroutine
			// runs the loop task's Tick, which sees what the command handed the task.
			lp.wake()
			return stDeposed, true
		}
		c.busy = true
		return stBusy, true
	}
	// suspEarly: resumed before it returned.
	if deposed {
		lp.handBack(c) // resume, on the goroutine that took the loop over, runs the Resumer
		return stDeposed, true
	}
	r := c.resumer
	c.resumer = nil
	c.susp.Store(suspNone)
	r.Resumed(c)
	return stOK, false
}

// beginCmd publishes, for the watchdog, that c's next command starts on the loop goroutine
// and returns its command word. inCmd is written before the word turns cmdOnLoop (and only
// while no command runs), so a watchdog whose compare-and-swap of that word succeeds read
// the right connection.
func (lp *loop) beginCmd(c *Conn) uint64 {
	if lp.inCmd.Load() != c {
		lp.inCmd.Store(c)
	}
	tok := (lp.cmd.Load()>>2+1)<<2 | cmdOnLoop
	lp.cmd.Store(tok)
	return tok
}

// endCmd ends the command of word tok and reports whether the watchdog deposed it meanwhile
// (the calling goroutine then owns only the command's connection and must hand it back).
func (lp *loop) endCmd(tok uint64) (deposed bool) {
	return !lp.cmd.CompareAndSwap(tok, tok&^cmdMask|cmdIdle)
}

// afterCommand is serve's per-command bookkeeping: the output limit, QUIT, and a write every
// nextFlush bytes.
func (lp *loop) afterCommand(c *Conn, before int) status {
	srv := lp.srv
	c.parser.Release()
	if lim := srv.cfg.MaxOutputBuffer; lim > 0 && len(c.out)-before > lim {
		srv.stats.outputLimit.Add(1)
		srv.outputLog.log(srv.log, srv.now(), "client closed for overcoming of output buffer limits",
			zap.String("client", c.remote), zap.Int("pending_bytes", len(c.out)),
			zap.Int("limit", lim))
		c.out = c.out[:before]
		return c.finish()
	}
	if c.closing {
		return c.finish()
	}
	if len(c.out)-c.outOff >= c.nextFlush {
		if !c.writeOut() {
			return stClose
		}
	}
	return stOK
}

// endBatch writes the replies of the commands run, folds the counters and makes room for the
// next read.
func (lp *loop) endBatch(c *Conn) status {
	srv := lp.srv
	if len(c.out) > c.outOff && !c.writeOut() {
		return stClose
	}
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
		return c.finish()
	}
	return stOK
}

// finish sends what is pending, then closes: at once when the socket takes it all, else
// once it does (or the write timeout passes).
func (c *Conn) finish() status {
	if !c.writeOut() || !c.stalled() {
		return stClose
	}
	c.drainClose = true
	return stOK
}

// stalled reports whether a write was cut short and replies wait for the socket: the
// connection then neither reads nor runs commands (backpressure).
func (c *Conn) stalled() bool { return !c.blockedAt.IsZero() }

// writeOut writes the pending replies without blocking. It reports false when the client is
// gone; bytes the socket does not take stay pending (c.outOff < len(c.out)).
func (c *Conn) writeOut() bool {
	for c.outOff < len(c.out) {
		n, err := rawWrite(c.fd, c.out[c.outOff:])
		if n > 0 {
			c.outOff += n
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EAGAIN) {
				if c.blockedAt.IsZero() {
					// A fresh clock: the commands may have taken long (c.now is the
					// batch's).
					c.blockedAt = c.srv.now()
				}
				return true
			}
			return false
		}
		// Progress: the write timeout counts from the last write that moved.
		c.blockedAt = time.Time{}
	}
	c.outOff = 0
	c.blockedAt = time.Time{}
	if cap(c.out) > shrinkOutCap {
		c.out = make([]byte, 0, flushAt)
	} else {
		c.out = c.out[:0]
	}
	return true
}
