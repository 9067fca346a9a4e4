package segment

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/leafd/leafd/internal/clock"
)

// hintMarks is fakeMarks with hints (RaiseHint and Hint).
type hintMarks struct {
	*fakeMarks
	hmu   sync.Mutex
	hints map[string]Hint
}

func newHintMarks() *hintMarks {
	return &hintMarks{fakeMarks: newFakeMarks(), hints: map[string]Hint{}}
}

func (h *hintMarks) RaiseHint(tag string, end int64, hint Hint) error {
	if err := h.Raise(tag, end); err != nil {
		return err
	}
	h.hmu.Lock()
	defer h.hmu.Unlock()
	h.hints[tag] = hint
	return nil
}

func (h *hintMarks) Hint(tag string) (Hint, error) {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	return h.hints[tag], nil
}

// farStore advances the fake clock by d inside every Allocate: a store that far away, in the
// generator's time.
type farStore struct {
	*fakeStore
	clk *clock.Fake
	d   time.Duration
}

func (s farStore) Allocate(ctx context.Context, tag string, step int64) (Alloc, error) {
	s.clk.Add(s.d)
	return s.fakeStore.Allocate(ctx, tag, step)
}

// TestRememberedStepAfterRestart: the step a tag grew to is recorded beside its mark at each
// load, and the first load of the next Generator on the same marks (a restart) leases it
// instead of the stored step. Fails when the hint is not written or not used.
func TestRememberedStepAfterRestart(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"t": 1000})
	mk := newHintMarks()
	cfg := testConfig(clk)
	cfg.NoWarmStart = true
	g1 := newTestGen(t, cfg, st, mk)
	mustNext(t, g1, "t") // first load: the stored step, 1000
	for range 3 {        // each segment lasts 1s < SegmentDuration: the step doubles
		clk.Add(time.Second)
		if err := forceLoad(t, g1, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.stepsSeen(); len(got) != 4 || got[3] != 8000 {
		t.Fatalf("steps of the first life: got %v, want [1000 2000 4000 8000]", got)
	}
	if h, _ := mk.Hint("t"); h.Step != 8000 {
		t.Fatalf("remembered step: got %+v, want 8000", h)
	}
	g1.Close()

	g2 := newTestGen(t, cfg, st, mk) // the restart
	mustNext(t, g2, "t")
	if got := st.stepsSeen(); got[4] != 8000 {
		t.Fatalf("first lease after the restart: got step %d, want the remembered 8000 (all: %v)", got[4], got)
	}
}

// TestRememberedStepCapped: a remembered step above MaxStep (the flag was lowered since) is
// leased at MaxStep.
func TestRememberedStepCapped(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"t": 1000})
	mk := newHintMarks()
	mk.hints["t"] = Hint{Step: 1 << 30}
	cfg := testConfig(clk)
	cfg.MaxStep = 50_000
	g := newTestGen(t, cfg, st, mk)
	mustNext(t, g, "t")
	if got := st.stepsSeen(); got[0] != 50_000 {
		t.Fatalf("first lease: got step %d, want MaxStep 50000", got[0])
	}
}

// TestDemandSizedLoad: a new tag (nothing remembered) under load through a slow store: the
// first load leases the stored step, and the second is sized from the demand measured on the
// first segment and the first load's duration, not by doubling. Fails when the demand is
// ignored.
func TestDemandSizedLoad(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeStore(map[string]int64{"t": 1000})
	st := farStore{fakeStore: fs, clk: clk, d: 300 * time.Millisecond}
	mk := newHintMarks()
	cfg := testConfig(clk)
	cfg.NoWarmStart = true
	g := newTestGen(t, cfg, st, mk)
	mustNext(t, g, "t") // the first load: 1000, took 300ms of fake time
	// 100 IDs in 1ms: 100k IDs/s. The 101st take passes the preload threshold (10%).
	for i := 0; i < 99; i++ {
		mustNext(t, g, "t")
		if i%10 == 0 {
			clk.Add(100 * time.Microsecond)
		}
	}
	mustNext(t, g, "t")
	waitFor(t, "the second load", func() bool { return len(fs.stepsSeen()) == 2 })
	waitIdle(t, g, "t")
	got := fs.stepsSeen()
	// 100k/s × 2 × 300ms / 0.9 ≈ 66 667 (doubling alone would ask 2000).
	if got[0] != 1000 || got[1] < 50_000 || got[1] > 100_000 {
		t.Fatalf("steps: got %v, want [1000, ≈66 667]", got)
	}
	if h, _ := mk.Hint("t"); h.Step != got[1] || h.Rate < 50_000 || h.Load != 300*time.Millisecond {
		t.Fatalf("recorded hint: got %+v, want step %d, rate ≈ 100k/s, load 300ms", h, got[1])
	}
}

// TestStepCappedCounted: the same demand through the same slow store with MaxStep below what
// would hide the next load: the step is capped, the load counted in StepCapped, and one
// warning logged. An uncapped demand counts nothing (TestDemandSizedLoad's numbers).
func TestStepCappedCounted(t *testing.T) {
	for _, tc := range []struct {
		maxStep int64
		capped  bool
	}{{20_000, true}, {1_000_000, false}} {
		clk := newFakeClock()
		fs := newFakeStore(map[string]int64{"t": 1000})
		st := farStore{fakeStore: fs, clk: clk, d: 300 * time.Millisecond}
		cfg := testConfig(clk)
		cfg.NoWarmStart = true
		cfg.MaxStep = tc.maxStep
		core, logs := observer.New(zap.WarnLevel)
		g, err := New(cfg, st, newHintMarks(), zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		mustNext(t, g, "t")
		for i := 0; i < 99; i++ {
			mustNext(t, g, "t")
			if i%10 == 0 {
				clk.Add(100 * time.Microsecond)
			}
		}
		mustNext(t, g, "t")
		waitFor(t, "the second load", func() bool { return len(fs.stepsSeen()) == 2 })
		waitIdle(t, g, "t")
		got, n := fs.stepsSeen(), g.Stats().StepCapped
		warned := logs.FilterMessageSnippet("--max-step is too small").Len()
		if tc.capped {
			if got[1] != tc.maxStep || n != 1 || warned != 1 {
				t.Fatalf("MaxStep %d: steps %v, StepCapped %d, warnings %d; want the second step %d, 1, 1", tc.maxStep, got, n, warned, tc.maxStep)
			}
		} else if n != 0 || warned != 0 {
			t.Fatalf("MaxStep %d: steps %v, StepCapped %d, warnings %d; want 0, 0", tc.maxStep, got, n, warned)
		}
	}
}

// TestDemandLeadStartsPreloadEarly: when the demand would use a segment up in less than two
// loads after its ratio threshold, the preload of the next segment starts at once.
func TestDemandLeadStartsPreloadEarly(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeStore(map[string]int64{"t": 1000})
	st := farStore{fakeStore: fs, clk: clk, d: 300 * time.Millisecond}
	mk := newHintMarks()
	mk.hints["t"] = Hint{Step: 10_000, Rate: 100_000, Load: 300 * time.Millisecond}
	cfg := testConfig(clk)
	cfg.NoWarmStart = true
	cfg.MaxStep = 10_000 // the demand asks 66 667; the cap holds the step at 10 000 (0.1s)
	g := newTestGen(t, cfg, st, mk)
	mustNext(t, g, "t")
	mustNext(t, g, "t") // the first take after the switch is past the (early) threshold
	waitFor(t, "the preload", func() bool { return len(fs.stepsSeen()) == 2 })
	if got := fs.stepsSeen(); got[0] != 10_000 || got[1] != 10_000 {
		t.Fatalf("steps: got %v, want [10000 10000]", got)
	}
}

// TestFirstLoadWaitBound: the waiters of a tag's first load wait for it beyond WaitTimeout
// (up to LoadTimeout more); those of a later load do not.
func TestFirstLoadWaitBound(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"t": 5})
	st.latency = 300 * time.Millisecond // real time
	cfg := testConfig(clk)
	cfg.NoWarmStart = true
	cfg.WaitTimeout = 20 * time.Millisecond
	cfg.LoadTimeout = 20 * time.Second
	g := newTestGen(t, cfg, st, newHintMarks())
	if _, err := g.Next("t"); err != nil {
		t.Fatalf("first request, waiting for the first load (300ms, WaitTimeout 20ms): %v", err)
	}
	// Use the segment up while the next load blocks: the wait is WaitTimeout again.
	block := make(chan struct{})
	st.set(func(s *fakeStore) { s.block = block; s.latency = 0 })
	defer close(block)
	var err error
	for range 10 {
		if _, err = g.Next("t"); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a later load that does not end: got %v, want ErrUnavailable after WaitTimeout", err)
	}
}

// TestWaitBoundFollowsLoadTime: a request waits for a running load at least WaitTimeout, at
// least twice the fastest of the tag's recent successful loads, at most WaitTimeout +
// LoadTimeout; for the tag's first load, the most.
func TestWaitBoundFollowsLoadTime(t *testing.T) {
	cfg := testConfig(newFakeClock())
	cfg.WaitTimeout, cfg.LoadTimeout = 500*time.Millisecond, 3*time.Second
	g := newTestGen(t, cfg, newFakeStore(nil), newFakeMarks())
	ms := time.Millisecond
	for _, tt := range []struct {
		initOK bool
		loads  []time.Duration // successful loads, oldest first; negative: a failed one
		want   time.Duration
	}{
		{false, nil, 3500 * ms},
		{true, nil, 500 * ms},
		{true, []time.Duration{100 * ms}, 500 * ms},
		{true, []time.Duration{1000 * ms}, 2000 * ms},
		{true, []time.Duration{1200 * ms, 1000 * ms, 1100 * ms}, 2000 * ms}, // the fastest
		{true, []time.Duration{5 * ms, 5 * ms, 900 * ms}, 500 * ms},         // one slow commit
		{true, []time.Duration{1000 * ms, -1, -1}, 2000 * ms},               // failures ignored
		{true, []time.Duration{10000 * ms}, 3500 * ms},                      // capped
		{true, []time.Duration{5 * ms, 1000 * ms, 1000 * ms, 1000 * ms, 1000 * ms, 1000 * ms, 1000 * ms, 1000 * ms, 1000 * ms}, 2000 * ms}, // the 5ms load aged out of the last 8
	} {
		b := &buffer{initOK: tt.initOK}
		for _, d := range tt.loads {
			if d < 0 {
				b.loads.add(LoadRecord{Duration: time.Millisecond, Error: "failed"})
			} else {
				b.loads.add(LoadRecord{Duration: d})
			}
		}
		if got := g.waitBoundLocked(b); got != tt.want {
			t.Errorf("initOK %v, loads %v: got wait %v, want %v", tt.initOK, tt.loads, got, tt.want)
		}
	}
}
