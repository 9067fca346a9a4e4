// Package clock is leafd's one seam for time: every wait in the ID generators (sleeping for the
// next millisecond, waiting out a clock step back, pacing a background loop) goes through a
// Clock, so that tests can drive time with the shared Fake instead of sleeping.
//
// Real is the production clock; Fake is a settable clock for tests. The package has no
// dependency beyond the standard library, so any leafd package can take a Clock (snowflake
// and segment do).
package clock

import (
	"runtime"
	"time"
)

// Clock is the source of time and of waits.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep pauses the calling goroutine for d.
	Sleep(d time.Duration)
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
	// After returns a channel that delivers the time once, d from now (a timer nobody stops:
	// for a wait that ends anyway, such as a deadline in a select).
	After(d time.Duration) <-chan time.Time
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; false when it already fired or was stopped.
	Stop() bool
}

// Real is the system clock. Its Sleep is precise to a few microseconds (see PreciseSleep).
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Sleep sleeps d with PreciseSleep.
func (Real) Sleep(d time.Duration) { PreciseSleep(d) }

// NewTimer returns a time.Timer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// After returns time.After(d).
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// Since returns the time elapsed since t on c. On Real it is time.Since, which reads only the
// monotonic clock when t carries a monotonic reading (time.Now reads the wall clock too).
func Since(c Clock, t time.Time) time.Duration {
	if _, ok := c.(Real); ok {
		return time.Since(t)
	}
	return c.Now().Sub(t)
}

// Until returns how long until t on c.
func Until(c Clock, t time.Time) time.Duration { return t.Sub(c.Now()) }

// PreciseSleep sleeps d. time.Sleep rounds short sleeps up to about a millisecond on Linux, which
// would lose most of the next millisecond when a snowflake sequence is exhausted. So: time.Sleep
// for the coarse part, a sub-millisecond OS sleep (nanosleep, ~60µs slack) for most of the rest,
// and the last stretch yielding the processor while watching the monotonic clock. Sleeping rather
// than spinning also matters on a busy machine: the scheduler favours a thread that slept.
func PreciseSleep(d time.Duration) {
	const (
		coarse = 1500 * time.Microsecond
		slack  = 100 * time.Microsecond
	)
	deadline := time.Now().Add(d)
	if d > coarse {
		time.Sleep(d - coarse)
	}
	if r := time.Until(deadline); r > slack {
		osSleep(r - slack)
	}
	for time.Now().Before(deadline) {
		runtime.Gosched()
	}
}
