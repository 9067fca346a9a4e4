//go:build !linux

package ordered

import "time"

// Without event loops (they need epoll) there is no LoopForwarder: forwarded calls go
// through the Forwarder's own connections.

// LoopPoller is what a LoopForwarder needs of its event loop.
type LoopPoller interface {
	Watch(fd int, write bool) error
	Unwatch(fd int)
	Wake()
}

// LoopForwarder is the Forwarder of one event loop (Linux only).
type LoopForwarder struct{}

// NewLoopForwarder returns nil: there are no event loops here.
func (f *Forwarder) NewLoopForwarder(LoopPoller) *LoopForwarder { return nil }

// Start fails c: there are no event loops here.
func (lf *LoopForwarder) Start(addr string, c *Call) {
	c.Err = ErrUnreachable
	c.Notify()
}

// Ready, Tick and Close do nothing here.
func (lf *LoopForwarder) Ready(int, bool, bool, time.Time) {}
func (lf *LoopForwarder) Tick(time.Time) time.Time         { return time.Time{} }
func (lf *LoopForwarder) Close()                           {}
func (lf *LoopForwarder) close()                           {}
