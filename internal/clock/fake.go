package clock

import (
	"sync"
	"time"
)

// Fake is a settable clock for tests, safe for concurrent use. Its Sleep advances it by the
// requested duration (unless frozen) after a tiny real pause, so that background goroutines get
// to run; every Sleep is recorded.
//
// A Fake timer fires when the fake time reaches its deadline (through Set, Add or Sleep), or
// after d of real time at the latest: the code under test uses timers only to pace loops whose
// decisions read Now, so a test that never moves the clock still sees those loops run.
type Fake struct {
	mu     sync.Mutex
	t      time.Time
	frozen bool
	slept  []time.Duration
	timers map[*fakeTimer]struct{}
	// due is at or before the earliest deadline of the pending timers (stale after a Stop or
	// a real-time fire, never late), so that fireLocked looks at every timer only when one
	// may be due: a test that holds many pending timers and never moves the clock (one per
	// waiting request) pays O(1), not O(timers), per new timer.
	due time.Time
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake at t.
func NewFake(t time.Time) *Fake { return &Fake{t: t, timers: map[*fakeTimer]struct{}{}} }

// NewFakeMs returns a Fake at the Unix millisecond ms.
func NewFakeMs(ms int64) *Fake { return NewFake(time.UnixMilli(ms)) }

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Sleep records d and advances the clock by d unless it is frozen.
func (c *Fake) Sleep(d time.Duration) {
	c.mu.Lock()
	c.slept = append(c.slept, d)
	if !c.frozen {
		c.t = c.t.Add(d)
		c.fireLocked()
	}
	c.mu.Unlock()
	time.Sleep(20 * time.Microsecond)
}

// SetFrozen makes Sleep leave the time alone (true) or advance it (false, the default).
func (c *Fake) SetFrozen(frozen bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = frozen
}

// Set sets the time to the Unix millisecond ms (backwards too).
func (c *Fake) Set(ms int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = time.UnixMilli(ms)
	c.fireLocked()
}

// Add moves the time by d (negative: backwards).
func (c *Fake) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.fireLocked()
}

// Sleeps returns the durations passed to Sleep so far.
func (c *Fake) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

// ResetSleeps forgets the recorded sleeps.
func (c *Fake) ResetSleeps() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = nil
}

// NewTimer returns a timer firing when the fake time reaches now+d, or after d of real time.
func (c *Fake) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1), at: c.t.Add(d)}
	if len(c.timers) == 0 || t.at.Before(c.due) {
		c.due = t.at
	}
	c.timers[t] = struct{}{}
	t.real = time.AfterFunc(max(d, 0), func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.fireOneLocked(t)
	})
	c.fireLocked()
	return t
}

// After returns the channel of a new timer (see NewTimer).
func (c *Fake) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// fireLocked fires the timers whose deadline the fake time has reached.
func (c *Fake) fireLocked() {
	if len(c.timers) == 0 || c.t.Before(c.due) {
		return
	}
	var due time.Time
	for t := range c.timers {
		if !c.t.Before(t.at) {
			c.fireOneLocked(t)
		} else if due.IsZero() || t.at.Before(due) {
			due = t.at
		}
	}
	c.due = due
}

func (c *Fake) fireOneLocked(t *fakeTimer) {
	if _, ok := c.timers[t]; !ok {
		return
	}
	delete(c.timers, t)
	t.real.Stop()
	t.ch <- c.t // buffered, written once
}

type fakeTimer struct {
	c    *Fake
	ch   chan time.Time
	at   time.Time
	real *time.Timer
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if _, ok := t.c.timers[t]; !ok {
		return false
	}
	delete(t.c.timers, t)
	t.real.Stop()
	return true
}
