//go:build linux

package resp

import (
	"time"

	"go.uber.org/zap"
)

// Commands run off the event loop (loop_linux.go): a command the Handler says may block runs
// on an offload goroutine, which then hands its connection back to the loop.

// offJob is a command to run off the loop.
type offJob struct {
	c      *Conn
	args   [][]byte
	before int
}

// offloadIdle is how long an offload goroutine waits for the next command before it exits.
const offloadIdle = time.Second

// startOffload gives the command to an idle offload goroutine, or starts one. A goroutine
// that stays keeps its grown stack: a stream of commands run off the loop (forwarded
// requests of an ordered tag) does not pay a goroutine start and the growth of its stack
// each.
func (lp *loop) startOffload(j offJob) {
	select {
	case lp.jobs <- j:
	default:
		lp.srv.loopWG.Add(1)
		go lp.offloader(j)
	}
}

// offloader runs j, then the commands given to it while it is idle, until it has been idle
// for offloadIdle or the loop stopped.
func (lp *loop) offloader(j offJob) {
	defer lp.srv.loopWG.Done()
	idle := time.NewTimer(offloadIdle)
	defer idle.Stop()
	for {
		lp.offload(j.c, j.args, j.before)
		idle.Reset(offloadIdle)
		select {
		case j = <-lp.jobs:
		case <-idle.C:
			return
		case <-lp.stop:
			return
		}
	}
}

// offload runs a command that may block off the loop, then hands the connection back to the
// loop (which runs the rest of its buffer).
func (lp *loop) offload(c *Conn, args [][]byte, before int) {
	st := stOK
	func() {
		defer func() {
			if r := recover(); r != nil {
				lp.srv.log.Error("command panicked; connection closed", zap.Any("panic", r),
					zap.String("client", c.remote), zap.Stack("stack"))
				st = stClose
			}
		}()
		lp.srv.handler.ServeRESP(c, args)
		st = lp.afterCommand(c, before)
	}()
	if st == stClose {
		c.closeNow = true
	}
	lp.handBack(c)
}
