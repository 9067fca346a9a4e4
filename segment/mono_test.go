package segment

import (
	"errors"
	"testing"
	"time"
)

// TestRetryAfterWallClockStepBack: the retry back-off (buffer.retryAt) and the negative cache
// (negEntry.until) are durations on the generator's monoClock, not wall-clock instants: a
// failed load followed by a step back of the wall clock (NTP, a VM resumed) does not keep the
// tag refused for the size of the step once the store answers again and RetryBackoff has
// passed.
func TestRetryAfterWallClockStepBack(t *testing.T) {
	for _, held := range []bool{true, false} {
		name := map[bool]string{true: "held tag (retryAt)", false: "first load (negative cache)"}[held]
		t.Run(name, func(t *testing.T) {
			clk, st, g := startGen(t, map[string]int64{"a": 10}, func(cfg *Config) {
				cfg.WaitTimeout = 200 * time.Millisecond
			})
			down := errors.New("store down")
			if held {
				mustNext(t, g, "a") // [1, 11) held
				st.set(func(s *fakeStore) { s.fail = down })
				for range 9 { // past the threshold: the preload fails
					mustNext(t, g, "a")
				}
				waitIdle(t, g, "a")
				if _, err := g.Next("a"); err == nil {
					t.Fatal("Next succeeded with the store down and the segment used up")
				}
			} else {
				st.set(func(s *fakeStore) { s.fail = down })
				if _, err := g.Next("a"); err == nil {
					t.Fatal("Next succeeded with the store down")
				}
			}
			// The wall clock steps back an hour; then the store returns and 2 s pass — 20
			// times the back-off. The fake clock has no monotonic reading, so the generator
			// must see it once between the step and the forward move (a request, still
			// refused) to tell them apart; with the real clock time.Time.Sub uses the
			// monotonic reading and the step never shows at all.
			clk.Add(-time.Hour)
			if _, err := g.Next("a"); err == nil {
				t.Fatal("Next succeeded with the store still down")
			}
			st.set(func(s *fakeStore) { s.fail = nil })
			clk.Add(2 * time.Second)
			var err error
			for range 50 {
				if _, err = g.Next("a"); err == nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Errorf("store back, 2 s (20 back-offs) later on the monotonic clock, Next still fails: %v", err)
		})
	}
}
