//go:build linux

package resp

// The loop's housekeeping (loop_linux.go): new and handed-back connections, Shutdown, the
// timeout sweep, and the watchdog that takes the loop from a command that blocks.

import (
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// housekeep registers new connections, takes back handed-back ones, follows Shutdown and runs
// the timeout sweep. It reports true when the goroutine must return (deposed, or the server
// is closed and the loop has no connection left).
//
// Handed-back connections are taken from returned one at a time (as many as were queued at
// the start), not all at once: the resumed commands run on the loop, and when one is deposed
// the ones behind it must stay where the goroutine taking the loop over finds them (its entry
// housekeep), not in a slice of a goroutine stuck in a command (TestTakeoverAdoptsAcknowledgedWork).
func (lp *loop) housekeep(now time.Time) bool {
	lp.mu.Lock()
	inc := lp.incoming
	lp.incoming = nil
	nret := len(lp.returned)
	lp.mu.Unlock()
	for _, c := range inc {
		c.events = unix.EPOLLIN
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.fd)}
		lp.conns[c.fd] = c
		if err := unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
			lp.srv.log.Warn("epoll_ctl add failed; connection closed", zap.Error(err))
			lp.closeConn(c)
		}
	}
	for ; nret > 0; nret-- {
		lp.mu.Lock()
		c := lp.returned[0]
		lp.returned[0] = nil
		lp.returned = lp.returned[1:]
		lp.mu.Unlock()
		c.busy = false
		c.cmdTok = 0
		if c.closeNow || lp.srv.killed.Load() {
			lp.closeConn(c)
			continue
		}
		// c.now stays the start of the batch the command that went off the loop was read in:
		// the batch's time (BatchObserver) covers its time off the loop
		// (TestBatchTimeCoversOffLoop).
		if lp.settle(c, lp.resume(c)) {
			// Deposed: the ones not yet looked at are still in returned, for the goroutine
			// that took the loop over.
			return true
		}
	}
	if lp.srv.closing.Load() {
		// Shutdown: a connection whose commands read so far have run and whose replies are
		// sent is closed (killed: every connection not running a command is).
		killed := lp.srv.killed.Load()
		for _, c := range lp.conns {
			if c.busy {
				continue
			}
			if killed || !c.stalled() {
				lp.closeConn(c)
			}
		}
		if len(lp.conns) == 0 {
			lp.mu.Lock()
			empty := len(lp.incoming) == 0 && len(lp.returned) == 0
			if empty {
				lp.stopped = true
			}
			lp.mu.Unlock()
			if empty {
				if lp.task != nil {
					lp.task.Close()
				}
				lp.stopOnce()
				return true
			}
		}
	}
	if now.Sub(lp.lastSweep) >= time.Duration(lp.waitMillis())*time.Millisecond {
		lp.lastSweep = now
		lp.sweep(now)
	}
	return false
}

func (lp *loop) stopOnce() {
	select {
	case <-lp.stop:
	default:
		close(lp.stop)
	}
}

// sweep closes idle connections and those that do not read their replies.
func (lp *loop) sweep(now time.Time) {
	cfg := &lp.srv.cfg
	for _, c := range lp.conns {
		if c.busy {
			continue
		}
		if c.stalled() {
			if cfg.WriteTimeout > 0 && now.Sub(c.blockedAt) > cfg.WriteTimeout {
				lp.closeConn(c)
			}
			continue
		}
		if cfg.IdleTimeout > 0 && now.Sub(c.lastRead) > cfg.IdleTimeout {
			lp.srv.log.Debug("closing idle client")
			lp.closeConn(c)
		}
	}
}

func (lp *loop) closeConn(c *Conn) {
	if _, ok := lp.conns[c.fd]; !ok {
		return
	}
	delete(lp.conns, c.fd)
	_ = unix.Close(c.fd)
	lp.srv.dropConn(c)
}

// watch is the loop's watchdog: a command that has run for a whole period on the loop
// goroutine gets the loop taken from under it (see the top of this file).
func (lp *loop) watch() {
	defer lp.srv.loopWG.Done()
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	var last uint64
	for {
		select {
		case <-lp.stop:
			return
		case <-t.C:
		}
		last = lp.watchCheck(last)
	}
}

// watchCheck is one tick of the watchdog: last is the command word read at the previous
// tick, the result the one to pass at the next. The command running then and now (the same
// word: the same sequence number, still cmdOnLoop) has run for at least a period and is
// deposed: the compare-and-swap is on that exact word, so a command that started since the
// read (a new sequence number) is never deposed
// (TestWatchdogSparesNewCommand).
func (lp *loop) watchCheck(last uint64) uint64 {
	v := lp.cmd.Load()
	if v != last || v&cmdMask != cmdOnLoop {
		return v
	}
	c := lp.inCmd.Load()
	if lp.hooks != nil && lp.hooks.watch != nil {
		lp.hooks.watch(lp)
	}
	if !lp.cmd.CompareAndSwap(v, v&^cmdMask|cmdDeposed) {
		return lp.cmd.Load()
	}
	lp.deposed.Add(1)
	if lp.hooks != nil && lp.hooks.takeover != nil {
		lp.hooks.takeover(c)
		return 0
	}
	lp.srv.loopWG.Add(1)
	go lp.run(c)
	return 0
}

// loopOffloads and loopTakeovers sum the loops' counters (Stats). s.loops is written once,
// by Serve before it accepts, under s.mu.
func (s *Server) loopOffloads() (n int64) {
	s.mu.Lock()
	loops := s.loops
	s.mu.Unlock()
	for _, lp := range loops {
		n += lp.offloads.Load()
	}
	return n
}

func (s *Server) loopTakeovers() (n int64) {
	s.mu.Lock()
	loops := s.loops
	s.mu.Unlock()
	for _, lp := range loops {
		n += lp.deposed.Load()
	}
	return n
}
