package resp

import "sync/atomic"

// Suspended commands (event-loop model). A command that waits for another server (a request
// forwarded to an ordered tag's leader) need not hold a goroutine while it waits: run on the
// loop, it starts its call, Suspends the connection and returns. The loop then leaves the
// connection alone (no read, no other command of it runs; its socket leaves the epoll set
// only if the client sends more meanwhile) and serves the others. When the answer is in,
// whoever has it calls Resume (or ResumeOnLoop, on the loop goroutine: a LoopTask that
// read the answer, looptask.go): the loop takes the connection back, runs the Resumer
// (which writes the command's replies) on the loop goroutine and goes on with the commands
// that follow in the connection's buffer. Replies stay in order: nothing of the connection runs
// between Suspend and the Resumer.

// Resumer finishes a suspended command: Resumed writes its replies, on the loop goroutine.
type Resumer interface {
	Resumed(c *Conn)
}

// The suspension word (Conn.susp): Suspend sets suspPending; Resume turns it into suspEarly
// when the command is still running on the loop (the loop then runs the Resumer at once),
// or, once the loop let go of the connection (suspParked), hands the connection back.
const (
	suspNone uint32 = iota
	suspPending
	suspParked
	suspEarly
)

// suspension is a Conn's share of the protocol above.
type suspension struct {
	onLoop  bool // the running command runs on the loop goroutine (CanSuspend)
	resumer Resumer
	susp    atomic.Uint32
}

// CanSuspend reports whether the running command may Suspend: it runs on its connection's
// event loop (not on the goroutine model, not offloaded off the loop). MayBlock may ask it
// too: there it reports whether the command, if run on the loop, could suspend.
func (c *Conn) CanSuspend() bool { return c.onLoop }

// Suspend, called by a command that CanSuspend before it starts its call, ends the command
// without its reply: the connection waits until Resume, then r.Resumed writes the replies.
// The command's args are not valid after it returns (copy what the call needs).
func (c *Conn) Suspend(r Resumer) {
	if !c.onLoop {
		panic("resp: Suspend of a command not on the event loop")
	}
	c.resumer = r
	c.susp.Store(suspPending)
}

// Resume ends a suspension; it is called once per Suspend, from any goroutine, possibly
// before the suspended command has returned.
func (c *Conn) Resume() {
	if c.susp.CompareAndSwap(suspPending, suspEarly) {
		return // still on the loop, which sees suspEarly when the command returns
	}
	c.lp.handBack(c)
}
