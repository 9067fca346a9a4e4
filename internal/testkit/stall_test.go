package testkit

import (
	"testing"
	"time"
)

// TestStallsIn: the stall over a window is the run_delay accrued between the samples around
// it, or the watcher's lateness summed when that is larger, and never more than the window.
func TestStallsIn(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	s := &Stalls{seen: []stallSample{
		{at: at(0)},
		{at: at(20), delay: ms(5), late: ms(1)},
		{at: at(40), delay: ms(15), late: ms(1)},
		{at: at(60), delay: ms(15), late: ms(30)},
		{at: at(80), delay: ms(20), late: ms(1)},
	}}
	for _, c := range []struct {
		from, to int
		want     time.Duration
	}{
		{20, 40, ms(10)}, // run_delay between the samples at 20 and 40
		{25, 35, ms(10)}, // the same samples around a shorter window
		{25, 31, ms(6)},  // capped at the window
		{40, 80, ms(31)}, // the watcher's lateness is larger
		{40, 60, ms(20)}, // ... and capped at the window
		{0, 40, ms(15)},  // run_delay 15, lateness 2
		{70, 200, ms(5)}, // past the last sample: up to it
	} {
		if got := s.In(at(c.from), at(c.to)); got != c.want {
			t.Errorf("In(%d ms, %d ms): got %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

// TestWatchStalls samples this process until the test ends.
func TestWatchStalls(t *testing.T) {
	s := WatchStalls(t)
	began := time.Now()
	Eventually(t, 5*time.Second, "three samples", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.seen) >= 3
	})
	if d := s.In(began, time.Now()); d < 0 || d > time.Since(began) {
		t.Errorf("stall %v over %v, want within the window", d, time.Since(began))
	}
}
