package resp

import "time"

// Loop tasks (event-loop model). A handler whose commands talk to another server (a request
// forwarded to an ordered tag's leader) can keep that server's connections on the loop
// itself: the loop watches their descriptors in its own epoll set beside its clients', so
// a request and its answer cost no goroutine, no wake-up and no hand-off between threads.
// The handler implements LoopTasker; each loop asks it once, at start, for its LoopTask.
// The loop then runs the task's Ready when one of the task's descriptors is ready and its
// Tick after every round of ready sockets (a round's commands queue their requests, Tick
// writes them, in one write per connection). A command suspended for such a request
// (Suspend) is resumed from Ready or Tick with ResumeOnLoop: the loop runs its Resumer and
// writes its replies right after the callback, on the same goroutine.

// LoopTasker may be implemented by a Handler that wants a LoopTask on each event loop.
// LoopTask is called once per loop, before the loop serves any connection; nil: none.
type LoopTasker interface {
	LoopTask(l *Loop) LoopTask
}

// LoopTask is a handler's work on one event loop. Its methods run on the goroutine running
// the loop, one at a time, never during a command of the loop's connections; a task's state
// that only they touch needs no lock. A command may reach the task (Conn.LoopTask) on the
// loop goroutine, but a command the watchdog deposed goes on beside the goroutine that took
// the loop over: what commands hand to the task must be guarded (the loop is woken once such
// a command returns, so Tick sees what it queued).
type LoopTask interface {
	// Ready: fd, watched with Loop.Watch, is readable (or hung up, or failed) or writable.
	Ready(fd int, readable, writable bool, now time.Time)
	// Tick runs after each round of the loop's ready sockets and after Loop.Wake, with the
	// round's clock. It returns the latest time it must run again (zero: none); the loop's
	// wait for its sockets ends by then.
	Tick(now time.Time) time.Time
	// Close: the loop stops (Shutdown); the task closes its descriptors.
	Close()
}

// Loop is an event loop as its LoopTask sees it.
type Loop struct {
	lp *loop
}

// LoopTask is the task of c's event loop (LoopTasker), nil on the goroutine model or when
// the handler gave none. Use it only while c.CanSuspend().
func (c *Conn) LoopTask() LoopTask {
	if c.lp == nil {
		return nil
	}
	return c.lp.task
}

// ResumeOnLoop is Resume for a caller on the connection's loop goroutine: a LoopTask's Ready
// or Tick, or the suspended command itself (an answer known at once). The loop runs the
// Resumer when the callback returns, without the eventfd wake and the hand-back queue that
// Resume from another goroutine takes.
func (c *Conn) ResumeOnLoop() {
	if c.susp.CompareAndSwap(suspPending, suspEarly) {
		return // still on the loop, which sees suspEarly when the command returns
	}
	c.lp.resumeHere(c)
}
