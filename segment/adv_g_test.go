package segment

// Adversarial review G (after #8). Skipped reproductions of open defects; run them with
// LEAFD_ADV_REPRO=1.

import (
	"errors"
	"os"
	"testing"
	"time"
)

func advRepro(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("LEAFD_ADV_REPRO") != "1" {
		t.Skip("repro: " + why + " (LEAFD_ADV_REPRO=1 runs it)")
	}
}

// TestAdvGRetryAfterWallClockStepBack: the retry back-off (buffer.retryAt) and the negative
// cache (negEntry.until) are wall-clock instants (Config.Now().UnixNano(), which drops the
// monotonic reading). A failed load followed by a step back of the wall clock (NTP, a VM
// resumed) keeps the tag refused for as long as the step, although the store answers again
// and far more than RetryBackoff has passed.
func TestAdvGRetryAfterWallClockStepBack(t *testing.T) {
	advRepro(t, "retry back-off and negative cache are wall-clock instants: a clock step back stalls a tag")
	for _, held := range []bool{true, false} {
		name := map[bool]string{true: "held tag (retryAt)", false: "first load (negative cache)"}[held]
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			st := newFakeStore(map[string]int64{"a": 10})
			cfg := testConfig(clk)
			cfg.WaitTimeout = 200 * time.Millisecond
			g := newTestGen(t, cfg, st, newFakeMarks())
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
			// times the back-off.
			clk.Advance(-time.Hour)
			st.set(func(s *fakeStore) { s.fail = nil })
			clk.Advance(2 * time.Second)
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
