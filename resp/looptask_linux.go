//go:build linux

package resp

// The loop's side of loop tasks (looptask.go): the task's descriptors in the loop's epoll
// set, its Ready and Tick calls, and the connections its callbacks resume.

import (
	"time"

	"golang.org/x/sys/unix"
)

// Watch adds fd to the loop's epoll set, or changes its interest: readable always, writable
// too when write is set. Call it on the loop goroutine (a LoopTask's callback).
func (l *Loop) Watch(fd int, write bool) error {
	lp := l.lp
	ev := uint32(unix.EPOLLIN)
	if write {
		ev |= unix.EPOLLOUT
	}
	old, ok := lp.watched[fd]
	if ok && old == ev {
		return nil
	}
	op := unix.EPOLL_CTL_MOD
	if !ok {
		op = unix.EPOLL_CTL_ADD
	}
	e := unix.EpollEvent{Events: ev, Fd: int32(fd)}
	if err := unix.EpollCtl(lp.epfd, op, fd, &e); err != nil {
		return err
	}
	lp.watched[fd] = ev
	return nil
}

// Unwatch takes fd out of the loop's epoll set (before the task closes it). On the loop
// goroutine.
func (l *Loop) Unwatch(fd int) {
	lp := l.lp
	if _, ok := lp.watched[fd]; !ok {
		return
	}
	delete(lp.watched, fd)
	_ = unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_DEL, fd, nil)
}

// Wake makes the loop run its task's Tick soon, from any goroutine (a dial that finished).
func (l *Loop) Wake() { l.lp.wake() }

// taskReady runs the task's Ready for a watched descriptor, then the connections it resumed.
// It reports true when the calling goroutine is no longer the loop (deposed).
func (lp *loop) taskReady(fd int, ev uint32, now time.Time) bool {
	readable := ev&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0
	writable := ev&(unix.EPOLLOUT|unix.EPOLLERR) != 0
	lp.task.Ready(fd, readable, writable, now)
	return lp.runLocal()
}

// tick runs the task's Tick and the connections it resumed, until Tick resumes none (a
// resumed connection's next commands may queue requests that the next Tick writes: none may
// wait for a socket to turn ready). It reports true when deposed.
func (lp *loop) tick(now time.Time) bool {
	if lp.task == nil {
		return false
	}
	for {
		lp.taskDue = lp.task.Tick(now)
		if len(lp.local) == 0 {
			return false
		}
		if lp.runLocal() {
			return true
		}
	}
}

// resumeHere queues a connection resumed on the loop goroutine (ResumeOnLoop) for runLocal.
func (lp *loop) resumeHere(c *Conn) {
	lp.local = append(lp.local, c)
}

// runLocal carries on with the connections resumed on the loop goroutine, as housekeep does
// with handed-back ones. The list is taken first: when a resumed command is deposed, the
// goroutine taking the loop over owns lp.local, and the connections not yet looked at go
// to lp.returned, where its housekeep finds them.
func (lp *loop) runLocal() bool {
	if len(lp.local) == 0 {
		return false
	}
	batch := lp.local
	lp.local, lp.localSpare = lp.localSpare[:0], nil
	for i, c := range batch {
		batch[i] = nil
		c.busy = false
		c.cmdTok = 0
		if c.closeNow || lp.srv.killed.Load() {
			lp.closeConn(c)
			continue
		}
		if lp.settle(c, lp.resume(c)) {
			if rest := batch[i+1:]; len(rest) > 0 {
				lp.mu.Lock()
				lp.returned = append(lp.returned, rest...)
				lp.mu.Unlock()
				lp.wake()
			}
			return true
		}
	}
	lp.localSpare = batch[:0]
	return false
}

// parkMillis is how long the loop may wait for its sockets: the sweep interval, or less when
// the task must run before (Tick's deadline).
func (lp *loop) parkMillis() int {
	ms := lp.waitMillis()
	if lp.taskDue.IsZero() {
		return ms
	}
	d := time.Until(lp.taskDue)
	if d <= 0 {
		return 1
	}
	if m := int((d + time.Millisecond - 1) / time.Millisecond); m < ms {
		return m
	}
	return ms
}
