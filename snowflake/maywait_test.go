package snowflake

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
)

// TestMayWaitForecastsTheWait: MayWait(n) is true exactly when AppendIDs(n) called now
// sleeps for the next millisecond (the fake clock records every sleep): a batch the current
// millisecond's sequence holds is served at once, one it does not waits. Fails when MayWait
// ignores the sequence already used (a pipeline of IDS.SNOWFLAKE 1000 would then hold its
// event loop, each batch waiting up to 1 ms for the next millisecond without the command
// table knowing).
func TestMayWaitForecastsTheWait(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	g := newGen(t, testConfig(c), &fakeSource{w: Worker{ID: 3}})
	if g.MayWait(4096) || !g.MayWait(4097) {
		t.Fatalf("a new millisecond holds 4096 values: MayWait(4096) %v, MayWait(4097) %v", g.MayWait(4096), g.MayWait(4097))
	}
	if _, err := g.AppendIDs(nil, 1000); err != nil {
		t.Fatal(err)
	}
	if g.MayWait(3096) || !g.MayWait(3097) {
		t.Fatalf("3096 values left in this millisecond: MayWait(3096) %v, MayWait(3097) %v", g.MayWait(3096), g.MayWait(3097))
	}
	rnd := rand.New(rand.NewPCG(21, 3))
	waits := 0
	for i := 0; i < 400; i++ {
		if rnd.IntN(8) == 0 {
			c.Add(time.Millisecond)
		}
		n := 1 + rnd.IntN(1500)
		want := g.MayWait(int64(n))
		c.ResetSleeps()
		if _, err := g.AppendIDs(nil, min(n, 1000)); err != nil {
			t.Fatal(err)
		}
		if n > 1000 { // asked beyond MaxBatch: compare with two calls
			if _, err := g.AppendIDs(nil, n-1000); err != nil {
				t.Fatal(err)
			}
		}
		slept := len(c.Sleeps()) > 0
		if slept != want {
			t.Fatalf("call %d: MayWait(%d) = %v, but the call slept: %v", i, n, want, slept)
		}
		if slept {
			waits++
		}
	}
	if waits < 50 {
		t.Fatalf("only %d of 400 calls waited: the test does not exercise the wait", waits)
	}
	if g.MayWait(0) {
		t.Error("MayWait(0) true")
	}
	// A step back of the clock is waited out (or refused).
	c.Add(-2 * time.Millisecond)
	if !g.MayWait(1) {
		t.Error("clock behind the last millisecond issued: MayWait(1) false")
	}
	c.Add(2 * time.Millisecond)
	// Closed: refused at once.
	g.Close()
	if g.MayWait(1) {
		t.Error("closed: MayWait(1) true, want false (refused at once)")
	}
}

// TestMayWaitRandomStart: with the random sequence start a new millisecond is only sure to
// hold 4096-99 values.
func TestMayWaitRandomStart(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	cfg := testConfig(c)
	cfg.SequenceStartZero = false
	g := newGen(t, cfg, &fakeSource{w: Worker{ID: 3}})
	if g.MayWait(3997) || !g.MayWait(3998) {
		t.Fatalf("MayWait(3997) %v, MayWait(3998) %v; want false, true", g.MayWait(3997), g.MayWait(3998))
	}
}

// heldExtendSource holds its second Extend (the background extension's) until the
// generator closes; the first (New's) and the later ones (Close's) return at once.
type heldExtendSource struct {
	fakeSource
	calls int
}

func (s *heldExtendSource) Extend(ctx context.Context, until time.Time) error {
	s.mu.Lock()
	s.calls++
	held := s.calls == 2
	s.mu.Unlock()
	if held {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.fakeSource.Extend(ctx, until)
}

// TestMayWaitAtTheLeaseBound: at the reserved bound a call waits for the lease extension.
func TestMayWaitAtTheLeaseBound(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	g := newGen(t, testConfig(c), &heldExtendSource{fakeSource: fakeSource{w: Worker{ID: 3}}})
	if g.MayWait(1) {
		t.Fatal("fresh generator: MayWait(1) true")
	}
	c.Set(g.lease.Load())
	if !g.MayWait(1) {
		t.Fatal("clock at the lease bound: MayWait(1) false, want true (it waits for an extension)")
	}
}
