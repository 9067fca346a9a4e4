package segment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/leafd/leafd/internal/clock"
)

func TestValidateTag(t *testing.T) {
	tests := []struct {
		name string
		tag  string
		ok   bool
	}{
		{"simple", "order", true},
		{"punctuation", "a.b-c_d:e/f{}", true},
		{"max length", strings.Repeat("x", MaxTagLen), true},
		{"empty", "", false},
		{"too long", strings.Repeat("x", MaxTagLen+1), false},
		{"space", "a b", false},
		{"control", "a\nb", false},
		{"del", "a\x7f", false},
		{"non-ascii", "订单", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateTag(tt.tag)
			if got := err == nil; got != tt.ok {
				t.Fatalf("ValidateTag(%q) = %v, want ok=%v", tt.tag, err, tt.ok)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidTag) {
				t.Fatalf("got %v, want ErrInvalidTag", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero is default", Config{}, true},
		{"defaults", DefaultConfig(), true},
		{"ratio one", Config{PreloadRatio: 1}, false},
		{"ratio negative", Config{PreloadRatio: -0.1}, false},
		{"negative wait", Config{WaitTimeout: -1}, false},
		{"negative loaders", Config{MaxLoaders: -1}, false},
		{"negative batch", Config{MaxBatch: -1}, false},
		{"huge max step", Config{MaxStep: 1 << 62}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if got := err == nil; got != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestNextStepRules(t *testing.T) {
	const target = 15 * time.Minute
	tests := []struct {
		name                string
		step, minStep, maxS int64
		since               time.Duration
		want                int64
	}{
		{"fast doubles", 1000, 1000, 1_000_000, time.Minute, 2000},
		{"double capped at max", 600_000, 1000, 1_000_000, time.Minute, 600_000},
		{"double reaching max exactly", 500_000, 1000, 1_000_000, time.Minute, 1_000_000},
		{"under twice target keeps", 4000, 1000, 1_000_000, 20 * time.Minute, 4000},
		{"exactly target keeps", 4000, 1000, 1_000_000, target, 4000},
		{"slow halves", 4000, 1000, 1_000_000, 40 * time.Minute, 2000},
		{"exactly twice target halves", 4000, 1000, 1_000_000, 2 * target, 2000},
		{"halve floored at stored step", 1500, 1000, 1_000_000, time.Hour, 1000},
		{"stored step raised", 1000, 5000, 1_000_000, 20 * time.Minute, 5000},
		{"clock went back doubles", 1000, 1000, 1_000_000, -time.Minute, 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextStep(tt.step, tt.minStep, tt.maxS, tt.since, target); got != tt.want {
				t.Fatalf("got %d, want %d", got, tt.want)
			}
		})
	}
}

// TestDynamicStepWithClock drives the step through the Generator's loads with a fake clock.
func TestDynamicStepWithClock(t *testing.T) {
	clk, st, g := startGen(t, map[string]int64{"t": 100}, func(cfg *Config) {
		cfg.MaxStep = 400
	})
	steps := []struct {
		advance time.Duration
		want    int64
	}{
		{0, 0},                  // first load: the stored step (0 passed to Allocate)
		{time.Minute, 200},      // fast: double
		{time.Minute, 400},      // fast: double up to MaxStep
		{time.Minute, 400},      // capped
		{20 * time.Minute, 400}, // keep
		{time.Hour, 200},        // halve
		{time.Hour, 100},        // halve
		{time.Hour, 100},        // floor at the stored step
	}
	for i, s := range steps {
		clk.Add(s.advance)
		if err := forceLoad(t, g, "t"); err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
		seen := st.stepsSeen()
		want := s.want
		if want == 0 {
			want = 100 // the fake records the stored step it used
		}
		if got := seen[len(seen)-1]; got != want {
			t.Fatalf("load %d: got step %d, want %d", i, got, want)
		}
		in, _ := g.Info("t")
		if in.Step != want || in.MinStep != 100 {
			t.Fatalf("load %d: Info step %d min %d, want %d, 100", i, in.Step, in.MinStep, want)
		}
		if !in.LastRefill.Equal(clk.Now()) {
			t.Fatalf("load %d: LastRefill %v, want %v", i, in.LastRefill, clk.Now())
		}
	}
}

func TestNextBasic(t *testing.T) {
	_, _, g := startGen(t, map[string]int64{"a": 10}, nil)
	for want := int64(1); want <= 35; want++ {
		if got := mustNext(t, g, "a"); got != want {
			t.Fatalf("got %d, want %d", got, want)
		}
	}
}

func TestNextAllocs(t *testing.T) {
	_, _, g := startGen(t, map[string]int64{"a": 1_000_000}, nil)
	mustNext(t, g, "a")
	tag := []byte("a")
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := g.Next(unsafe.String(&tag[0], len(tag))); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("got %v allocs per Next, want 0", allocs)
	}
}

// TestSwitchConcurrent: many goroutines across many switches with a tiny step.
func TestSwitchConcurrent(t *testing.T) {
	_, st, g := startGen(t, map[string]int64{"a": 7}, func(cfg *Config) {
		cfg.MaxStep = 7 // keep segments tiny: many switches
		cfg.WaitTimeout = 10 * time.Second
	})
	const workers, per = 8, 3000
	results := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]int64, 0, per)
			for range per {
				v, err := g.Next("a")
				if err != nil {
					t.Errorf("Next: %v", err)
					return
				}
				ids = append(ids, v)
			}
			results[w] = ids
		}()
	}
	wg.Wait()
	seen := make(map[int64]bool, workers*per)
	for w, ids := range results {
		for i, v := range ids {
			if seen[v] {
				t.Fatalf("duplicate ID %d", v)
			}
			seen[v] = true
			if i > 0 && v <= ids[i-1] {
				t.Fatalf("worker %d: got %d after %d, want strictly increasing", w, v, ids[i-1])
			}
			if !st.inLeased("a", v) {
				t.Fatalf("ID %d outside every leased range", v)
			}
		}
	}
	if len(seen) != workers*per {
		t.Fatalf("got %d unique IDs, want %d", len(seen), workers*per)
	}
}

// TestSwitchInterleaving replays the switch hazard of docs/HAZARDS.md step by step: a taker reads
// the current segment, is paused, the buffer switches (twice) while it is paused, then it
// takes its candidate. It must compare with its own segment's bound and fail, never return
// an ID of the new range.
func TestSwitchInterleaving(t *testing.T) {
	_, st, g := startGen(t, map[string]int64{"a": 10}, func(cfg *Config) {
		cfg.MaxStep = 10
	})
	for range 9 {
		mustNext(t, g, "a") // 1..9 of [1, 11)
	}
	b, _ := g.buffer("a")
	waitIdle(t, g, "a")
	old := b.cur.Load() // the taker holds [1, 11) with one value left

	// Others take the last value and switch to [11, 21), then to [21, 31).
	if got := mustNext(t, g, "a"); got != 10 {
		t.Fatalf("got %d, want 10", got)
	}
	for want := int64(11); want <= 21; want++ {
		if got := mustNext(t, g, "a"); got != want {
			t.Fatalf("got %d, want %d", got, want)
		}
		waitIdle(t, g, "a")
	}
	if cur := b.cur.Load(); cur == old || cur.start != 21 {
		t.Fatalf("buffer did not switch: current starts at %d", cur.start)
	}
	// The paused taker resumes on the old segment.
	if v, ok := old.take(); ok {
		t.Fatalf("paused taker got %d from [%d, %d) after the switch, want exhausted", v, old.start, old.end)
	}
	if got := mustNext(t, g, "a"); got != 22 {
		t.Fatalf("got %d, want 22", got)
	}

	// The same with takers racing a switch for real.
	for round := range 50 {
		var wg sync.WaitGroup
		ids := make(chan int64, 64)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 4 {
					v, err := g.Next("a")
					if err != nil {
						t.Errorf("round %d: %v", round, err)
						return
					}
					ids <- v
				}
			}()
		}
		wg.Wait()
		close(ids)
		for v := range ids {
			if !st.inLeased("a", v) {
				t.Fatalf("ID %d outside every leased range", v)
			}
		}
	}
}

func TestPreloadThreshold(t *testing.T) {
	tests := []struct {
		name  string
		step  int64
		ratio float64
		quiet int // Next calls that must not trigger a preload
	}{
		{"10% of 100", 100, 0.1, 10},
		{"10% of 1000", 1000, 0.1, 100},
		{"50% of 10", 10, 0.5, 5},
		{"10% of 5 (floor)", 5, 0.1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, st, g := startGen(t, map[string]int64{"a": tt.step}, func(cfg *Config) {
				cfg.PreloadRatio = tt.ratio
			})
			if err := forceLoad(t, g, "a"); err != nil {
				t.Fatal(err)
			}
			for i := range tt.quiet {
				mustNext(t, g, "a")
				if in, _ := g.Info("a"); in.Loading || in.NextReady || st.allocCount() != 1 {
					t.Fatalf("after %d IDs (%d%%): loading=%v ready=%v allocs=%d, want no preload",
						i+1, int64(i+1)*100/tt.step, in.Loading, in.NextReady, st.allocCount())
				}
			}
			mustNext(t, g, "a")
			waitFor(t, "preload", func() bool {
				in, _ := g.Info("a")
				return in.NextReady
			})
			if got := st.allocCount(); got != 2 {
				t.Fatalf("got %d allocations, want 2", got)
			}
			for range 3 { // further takes do not load again
				mustNext(t, g, "a")
			}
			if got := st.allocCount(); got != 2 {
				t.Fatalf("got %d allocations, want 2", got)
			}
		})
	}
}

func TestLoadFailureThenRetry(t *testing.T) {
	clk, st, g := startGen(t, map[string]int64{"a": 10}, nil)
	st.set(func(s *fakeStore) { s.fail = errors.New("db: connection refused") })
	_, err := g.Next("a")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("got %v, want ErrUnavailable with the store error", err)
	}
	// Within RetryBackoff the store is not asked again.
	n := st.allocCount()
	if _, err := g.Next("a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if got := st.allocCount(); got != n {
		t.Fatalf("got %d allocations, want %d (backing off)", got, n)
	}
	if _, err := g.Info("a"); !errors.Is(err, ErrUnknownTag) {
		t.Fatalf("Info after a failed first load: got %v, want the tag not held", err)
	}
	st.set(func(s *fakeStore) { s.fail = nil })
	clk.Add(time.Second)
	if got := mustNext(t, g, "a"); got != 1 {
		t.Fatalf("got %d, want 1", got)
	}
	if s := g.Stats(); s.LoadsFailed != 1 || s.LoadsOK != 1 {
		t.Fatalf("got failed=%d ok=%d, want 1, 1", s.LoadsFailed, s.LoadsOK)
	}
}

func TestLoadRejectedThenRetry(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10, "b": 10, "c": 10})
	block := make(chan struct{})
	started := make(chan string, 10)
	st.set(func(s *fakeStore) { s.block, s.started = block, started })
	cfg := testConfig(clk)
	cfg.MaxLoaders, cfg.MaxPending = 1, 1
	cfg.WaitTimeout = 10 * time.Second
	g := newTestGen(t, cfg, st, newFakeMarks())

	var wg sync.WaitGroup
	for _, tag := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.Next(tag); err != nil {
				t.Errorf("Next(%s): %v", tag, err)
			}
		}()
		if tag == "a" {
			<-started // the only loader runs a; b will queue
		}
	}
	waitFor(t, "b queued", func() bool { return len(g.firsts) == 1 })
	_, err := g.Next("c")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable (pool full)", err)
	}
	if in, _ := g.Info("c"); in.Loading {
		t.Fatalf("c still marked loading after its load was rejected")
	}
	if got := g.Stats().LoadsRejected; got != 1 {
		t.Fatalf("got %d rejected loads, want 1", got)
	}
	close(block)
	wg.Wait()
	clk.Add(time.Second)
	if got := mustNext(t, g, "c"); got != 1 {
		t.Fatalf("got %d, want 1", got)
	}
}

func TestWaiterTimeoutKeepsLoading(t *testing.T) {
	clk, st, g := startGen(t, map[string]int64{"a": 10}, func(cfg *Config) {
		cfg.WaitTimeout = 50 * time.Millisecond
		cfg.LoadTimeout = 10 * time.Second
	})
	// A later load, not the tag's first (whose waiters wait up to LoadTimeout more: see
	// TestFirstLoadWaitBound): the first segment [1, 11) is loaded, then the store hangs and
	// the preload started by the second take blocks.
	if got := mustNext(t, g, "a"); got != 1 {
		t.Fatalf("got %d, want 1", got)
	}
	block := make(chan struct{})
	st.set(func(s *fakeStore) { s.block = block })
	for want := int64(2); want <= 10; want++ {
		if got := mustNext(t, g, "a"); got != want {
			t.Fatalf("got %d, want %d", got, want)
		}
	}

	for i := range 3 {
		start := time.Now()
		_, err := g.Next("a")
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("try %d: got %v, want ErrUnavailable", i, err)
		}
		if el := time.Since(start); el < 40*time.Millisecond || el > 2*time.Second {
			t.Fatalf("try %d: failed after %v, want about WaitTimeout (50ms)", i, el)
		}
		if in, _ := g.Info("a"); !in.Loading {
			t.Fatalf("try %d: a timed-out waiter cleared the loading flag of a running load", i)
		}
		clk.Add(time.Second)
	}
	if got := st.allocCount(); got != 2 {
		t.Fatalf("got %d Allocate calls, want 2 (no second concurrent load)", got)
	}
	close(block)
	waitIdle(t, g, "a")
	if got := mustNext(t, g, "a"); got != 11 {
		t.Fatalf("got %d, want 11", got)
	}
	if got := st.allocCount(); got != 2 {
		t.Fatalf("got %d Allocate calls, want 2", got)
	}
}

func TestStoreDownAndBack(t *testing.T) {
	clk, st, g := startGen(t, map[string]int64{"a": 100}, func(cfg *Config) {
		cfg.WaitTimeout = 50 * time.Millisecond
	})
	mustNext(t, g, "a")
	st.set(func(s *fakeStore) { s.fail = errors.New("db down") })
	// IDs already leased are served while the store is down (preloads fail meanwhile).
	for want := int64(2); want <= 100; want++ {
		if got := mustNext(t, g, "a"); got != want {
			t.Fatalf("got %d, want %d", got, want)
		}
		if want%10 == 0 {
			clk.Add(time.Second) // let preloads retry (and fail)
			waitIdle(t, g, "a")
		}
	}
	if _, err := g.Next("a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	// A hanging store: the request gives up after WaitTimeout.
	block := make(chan struct{})
	st.set(func(s *fakeStore) { s.fail, s.block = nil, block })
	clk.Add(time.Second)
	start := time.Now()
	if _, err := g.Next("a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if el := time.Since(start); el < 40*time.Millisecond {
		t.Fatalf("gave up after %v, want about WaitTimeout", el)
	}
	// Store back: served again without any manual action.
	close(block)
	waitIdle(t, g, "a")
	clk.Add(time.Second)
	if got := mustNext(t, g, "a"); got <= 100 {
		t.Fatalf("got %d, want > 100", got)
	}
	if s := g.Stats(); s.Unavailable < 2 {
		t.Fatalf("got %d unavailable, want >= 2", s.Unavailable)
	}
}

func TestRegressionGuard(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 100})
	mk := newFakeMarks()
	cfg := testConfig(clk)
	cfg.MaxStep = 100
	g := newTestGen(t, cfg, st, mk)
	for range 11 { // more than 10%: preload
		mustNext(t, g, "a")
	}
	waitIdle(t, g, "a") // preloaded [101, 201)
	if got := mk.get("a"); got != 201 {
		t.Fatalf("got mark %d, want 201", got)
	}
	// Failover to a replica that lost the last allocations.
	st.set(func(s *fakeStore) { s.lower["a"] = 150 })
	var last int64
	for {
		v, err := g.Next("a")
		if errors.Is(err, ErrRegression) {
			break
		}
		if err != nil {
			t.Fatalf("got %v, want IDs then ErrRegression", err)
		}
		if v <= last || v >= 201 {
			t.Fatalf("got %d after %d, want increasing within the granted ranges", v, last)
		}
		last = v
	}
	if last != 200 {
		t.Fatalf("served up to %d, want 200", last)
	}
	if got := mk.get("a"); got != 201 {
		t.Fatalf("got mark %d after regression, want 201 unchanged", got)
	}
	if got := g.Stats().Regressions; got != 1 {
		t.Fatalf("got %d regressions, want 1", got)
	}
	in, _ := g.Info("a")
	if !strings.Contains(in.LastError, "below the mark 201") {
		t.Fatalf("got last error %q, want the regression", in.LastError)
	}
	// The store catches up: served again, above the mark.
	st.set(func(s *fakeStore) { s.rows["a"].maxID = 1000 })
	clk.Add(time.Second)
	if got := mustNext(t, g, "a"); got != 1000 {
		t.Fatalf("got %d, want 1000", got)
	}
}

func TestMarksPersistAcrossGenerators(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10})
	mk := newFakeMarks()
	g1, err := New(testConfig(clk), st, mk, nil)
	if err != nil {
		t.Fatal(err)
	}
	last := mustNext(t, g1, "a")
	waitIdle(t, g1, "a")
	g1.Close()
	mark := mk.get("a")

	g2 := newTestGen(t, testConfig(clk), st, mk)
	if got := mustNext(t, g2, "a"); got <= last || got < mark {
		t.Fatalf("got %d, want above %d and the mark %d", got, last, mark)
	}
	g2.Close()

	// Restart on a restored backup: max_id back to its initial value.
	st.set(func(s *fakeStore) { s.rows["a"].maxID = 1 })
	g3 := newTestGen(t, testConfig(clk), st, mk)
	if _, err := g3.Next("a"); !errors.Is(err, ErrRegression) {
		t.Fatalf("got %v, want ErrRegression", err)
	}
}

func TestUnknownTag(t *testing.T) {
	tests := []struct {
		name       string
		autoCreate bool
		wantErr    error
	}{
		{"auto-create on", true, nil},
		{"auto-create off", false, ErrUnknownTag},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, st, g := startGen(t, nil, func(cfg *Config) {
				cfg.AutoCreate = tt.autoCreate
				cfg.DefaultStep = 50
			})
			buf := []byte("fresh")
			v, err := g.Next(unsafe.String(&buf[0], len(buf)))
			copy(buf, "XXXXX") // the caller reuses its buffer
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil {
				if v != 1 {
					t.Fatalf("got %d, want 1", v)
				}
				if got := g.Tags(); !slices.Equal(got, []string{"fresh"}) {
					t.Fatalf("got tags %q, want [fresh]", got)
				}
				if r := st.rows["fresh"]; r == nil || r.step != 50 {
					t.Fatalf("got row %+v, want step 50", r)
				}
				return
			}
			var te *TagError
			if !errors.As(err, &te) || te.Tag != "fresh" {
				t.Fatalf("got %#v, want a TagError naming \"fresh\"", err)
			}
			if got := g.Tags(); len(got) != 0 {
				t.Fatalf("got tags %q, want none", got)
			}
		})
	}
}

func TestNegativeCache(t *testing.T) {
	clk, st, g := startGen(t, nil, func(cfg *Config) {
		cfg.NegativeTTL = time.Second
	})
	for range 5 {
		if _, err := g.Next("junk"); !errors.Is(err, ErrUnknownTag) {
			t.Fatalf("got %v, want ErrUnknownTag", err)
		}
	}
	if got := st.allocCount(); got != 1 {
		t.Fatalf("got %d Allocate calls, want 1 (negative cache)", got)
	}
	// A row inserted by hand is served once the entry expires.
	st.set(func(s *fakeStore) { s.rows["junk"] = &fakeRow{maxID: 1, step: 10} })
	clk.Add(1100 * time.Millisecond)
	if got := mustNext(t, g, "junk"); got != 1 {
		t.Fatalf("got %d, want 1", got)
	}
	// Invalid names never reach the store.
	if _, err := g.Next("bad tag"); !errors.Is(err, ErrInvalidTag) {
		t.Fatalf("got %v, want ErrInvalidTag", err)
	}
}

func TestNegativeCacheBounded(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.MaxNegative = 10
	g := newTestGen(t, cfg, newFakeStore(nil), newFakeMarks())
	for i := range 50 {
		g.remember(fmt.Sprintf("t%d", i), ErrUnknownTag, time.Second)
	}
	if got := len(g.neg); got > 10 {
		t.Fatalf("got %d negative entries, want <= 10", got)
	}
}

func TestMaxTags(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.MaxTags = 2
	cfg.AutoCreate = true
	g := newTestGen(t, cfg, newFakeStore(nil), newFakeMarks())
	mustNext(t, g, "a")
	mustNext(t, g, "b")
	if _, err := g.Next("c"); !errors.Is(err, ErrLimit) {
		t.Fatalf("got %v, want ErrLimit", err)
	}
}

func TestRefresh(t *testing.T) {
	_, st, g := startGen(t, map[string]int64{"a": 10, "b": 10}, nil)
	if got := g.Tags(); len(got) != 0 {
		t.Fatalf("got %q, want no tag held before use (the refresh creates no buffer)", got)
	}
	mustNext(t, g, "a")
	mustNext(t, g, "b")
	st.set(func(s *fakeStore) {
		delete(s.rows, "a")
		s.rows["c"] = &fakeRow{maxID: 1, step: 10}
		s.rows["bad name"] = &fakeRow{maxID: 1, step: 10}
	})
	if _, err := g.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := g.Tags(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("got %q, want [b]", got)
	}
	if _, err := g.Next("a"); !errors.Is(err, ErrUnknownTag) {
		t.Fatalf("got %v, want ErrUnknownTag for a deleted tag", err)
	}
	if got := mustNext(t, g, "c"); got != 1 {
		t.Fatalf("c: got %d, want 1", got)
	}
	// A failing refresh changes nothing.
	st.set(func(s *fakeStore) { s.tagsErr = errors.New("db down") })
	if _, err := g.refresh(context.Background()); err == nil {
		t.Fatal("got nil, want the store error")
	}
	if got := g.Tags(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("got %q, want [b c]", got)
	}
}

func TestRefreshPeriodic(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10, "z": 10})
	tick := make(chan time.Time)
	cfg := testConfig(clk)
	cfg.Clock = tickAt{clk, DefaultConfig().RefreshInterval, tick}
	g := newTestGen(t, cfg, st, newFakeMarks())
	mustNext(t, g, "a")
	mustNext(t, g, "z")
	st.set(func(s *fakeStore) { delete(s.rows, "z") })
	tick <- time.Time{}
	waitFor(t, "refresh", func() bool { return slices.Equal(g.Tags(), []string{"a"}) })
}

func TestStartWithStoreDown(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10})
	st.set(func(s *fakeStore) {
		s.tagsErr = errors.New("db down")
		s.fail = errors.New("db down")
	})
	g := newTestGen(t, testConfig(clk), st, newFakeMarks())
	if _, err := g.Next("a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	st.set(func(s *fakeStore) { s.tagsErr, s.fail = nil, nil })
	clk.Add(time.Second)
	if got := mustNext(t, g, "a"); got != 1 {
		t.Fatalf("got %d, want 1", got)
	}
}

func TestNextN(t *testing.T) {
	_, _, g := startGen(t, map[string]int64{"a": 100}, func(cfg *Config) {
		cfg.MaxStep = 100
	})
	steps := []struct {
		name    string
		n       int64
		want    int64
		wantErr error
	}{
		{"one", 1, 1, nil},
		{"ten contiguous", 10, 11, nil},
		{"zero", 0, 0, ErrLimit},
		{"negative", -5, 0, ErrLimit},
		{"more than a segment", 101, 0, ErrLimit},
		{"rest does not fit: abandoned", 95, 195, nil}, // [12, 101) abandoned, [101, 196) served
		{"whole segment", 100, 300, nil},               // [196, 201) abandoned
		{"next after", 1, 301, nil},
	}
	for _, s := range steps {
		got, err := g.NextN("a", s.n)
		if !errors.Is(err, s.wantErr) || got != s.want {
			t.Fatalf("%s: NextN(%d) = %d, %v; want %d, %v", s.name, s.n, got, err, s.want, s.wantErr)
		}
		if s.name == "more than a segment" && !strings.Contains(err.Error(), "max 100") {
			t.Fatalf("got %q, want the maximum in the message", err)
		}
	}
}

func TestAppendIDs(t *testing.T) {
	_, st, g := startGen(t, map[string]int64{"a": 10}, func(cfg *Config) {
		cfg.MaxStep = 10
		cfg.MaxBatch = 100
	})
	mustNext(t, g, "a")
	dst := []int64{-1}
	dst, err := g.AppendIDs(dst, "a", 35)
	if err != nil {
		t.Fatal(err)
	}
	if len(dst) != 36 || dst[0] != -1 {
		t.Fatalf("got %d values (first %d), want 36 with the prefix kept", len(dst), dst[0])
	}
	for i := 2; i < len(dst); i++ {
		if dst[i] <= dst[i-1] {
			t.Fatalf("got %d after %d, want strictly increasing", dst[i], dst[i-1])
		}
		if !st.inLeased("a", dst[i]) {
			t.Fatalf("ID %d outside every leased range", dst[i])
		}
	}
	if dst[1] != 2 || dst[35] != 36 {
		t.Fatalf("got %d..%d, want 2..36", dst[1], dst[35])
	}
	out, err := g.AppendIDs(dst[:1], "a", 101)
	if !errors.Is(err, ErrLimit) || len(out) != 1 {
		t.Fatalf("got %d values, %v; want dst unchanged and ErrLimit", len(out), err)
	}
	if out, err := g.AppendIDs(nil, "a", 0); err != nil || len(out) != 0 {
		t.Fatalf("got %v, %v; want nothing", out, err)
	}
}

func TestInfoAndStats(t *testing.T) {
	_, _, g := startGen(t, map[string]int64{"a": 100}, nil)
	for range 20 {
		mustNext(t, g, "a")
	}
	in := waitIdle(t, g, "a")
	want := SegmentInfo{Loaded: true, Start: 1, End: 101, Next: 21, Remaining: 80}
	if in.Current != want {
		t.Fatalf("got current %+v, want %+v", in.Current, want)
	}
	if !in.NextReady || in.Next.Start != 101 || in.Next.End != 301 || !in.InitOK || in.Step != 200 || in.MinStep != 100 || in.Mark != 301 {
		t.Fatalf("got %+v, want next [101, 301) ready, step 200, min 100, mark 301", in)
	}
	if _, err := g.Info("nope"); !errors.Is(err, ErrUnknownTag) {
		t.Fatalf("got %v, want ErrUnknownTag", err)
	}
	s := g.Stats()
	if s.IDs != 20 || s.LoadsOK != 2 || s.Tags != 1 {
		t.Fatalf("got %+v, want 20 IDs, 2 loads, 1 tag", s)
	}
}

func TestCreate(t *testing.T) {
	_, _, g := startGen(t, nil, nil)
	if _, err := g.Next("x"); !errors.Is(err, ErrUnknownTag) {
		t.Fatalf("got %v, want ErrUnknownTag", err)
	}
	if err := g.Create(context.Background(), Tag{Name: "x", MaxID: 500, Step: 20}); err != nil {
		t.Fatal(err)
	}
	if got := mustNext(t, g, "x"); got != 500 { // the negative entry was cleared
		t.Fatalf("got %d, want 500", got)
	}
	if err := g.Create(context.Background(), Tag{Name: "x"}); !errors.Is(err, ErrTagExists) {
		t.Fatalf("got %v, want ErrTagExists", err)
	}
	if err := g.Create(context.Background(), Tag{Name: "a b"}); !errors.Is(err, ErrInvalidTag) {
		t.Fatalf("got %v, want ErrInvalidTag", err)
	}
}

func TestCloseWaitsAndIsIdempotent(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10})
	started := make(chan string, 1)
	st.set(func(s *fakeStore) { s.block, s.started = make(chan struct{}), started })
	cfg := testConfig(clk)
	cfg.LoadTimeout = time.Minute
	cfg.WaitTimeout = time.Minute
	g, err := New(cfg, st, newFakeMarks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := g.Next("a")
		errc <- err
	}()
	<-started
	g.Close() // cancels the blocked load and waits for the loader
	if err := <-errc; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if got := st.allocCount(); got != 1 {
		t.Fatalf("got %d Allocate calls, want 1", got)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); g.Close() }()
	}
	wg.Wait()
	if _, err := g.Next("a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after Close: got %v, want ErrUnavailable", err)
	}
}

func TestTagNotRetained(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.AutoCreate = true
	g := newTestGen(t, cfg, newFakeStore(nil), newFakeMarks())
	buf := []byte("alias")
	name := unsafe.String(&buf[0], len(buf))
	mustNext(t, g, name)
	_, errN := g.NextN(name, 0)
	copy(buf, "ZZZZZ")
	if got := g.Tags(); !slices.Equal(got, []string{"alias"}) {
		t.Fatalf("got %q, want [alias]", got)
	}
	var te *TagError
	if !errors.As(errN, &te) || te.Tag != "alias" {
		t.Fatalf("got %v, want a TagError for \"alias\"", errN)
	}
}

// TestCloseDrainsQueue: a load still queued at Close is finished by Close (its waiters wake,
// its loading state is cleared), not left hanging.
func TestCloseDrainsQueue(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10, "b": 10})
	started := make(chan string, 2)
	st.set(func(s *fakeStore) { s.block, s.started = make(chan struct{}), started })
	cfg := testConfig(clk)
	cfg.MaxLoaders, cfg.MaxPending = 1, 1
	cfg.WaitTimeout, cfg.LoadTimeout = time.Minute, time.Minute
	g, err := New(cfg, st, newFakeMarks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 2)
	for _, tag := range []string{"a", "b"} {
		go func() {
			_, err := g.Next(tag)
			errc <- err
		}()
		if tag == "a" {
			<-started
		}
	}
	waitFor(t, "b queued", func() bool { return len(g.firsts) == 1 })
	g.Close()
	for range 2 {
		if err := <-errc; !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v, want ErrUnavailable", err)
		}
	}
	if in, _ := g.Info("b"); in.Loading {
		t.Fatal("queued load still marked loading after Close")
	}
}

// Failed NextN calls on an exhausted segment must not push its cursor without bound: with a
// large step, a few INCRBY calls while the store is down would wrap the int64 cursor and hand
// out negative IDs, then IDs of the range already served.
func TestNextNFailedTakesDoNotWrapCursor(t *testing.T) {
	clk := newFakeClock()
	const step = int64(1) << 61
	st := newFakeStore(map[string]int64{"a": step})
	cfg := testConfig(clk)
	g := newTestGen(t, cfg, st, newFakeMarks())
	if got, err := g.NextN("a", step); err != nil || got != step {
		t.Fatalf("NextN(2^61) = %d, %v; want %d", got, err, step)
	}
	waitIdle(t, g, "a")
	st.set(func(s *fakeStore) { s.fail = errors.New("store down") })
	for i := range 20 {
		clk.Add(time.Second) // past RetryBackoff: every call may try a load
		got, err := g.NextN("a", step)
		if err == nil {
			t.Fatalf("call %d with the store down: got ID %d, want an error", i, got)
		}
	}
	for i := range 20 {
		if got, err := g.AppendIDs(nil, "a", 1); err == nil {
			t.Fatalf("AppendIDs %d with the store down: got %v, want an error", i, got)
		}
	}
}

// Next, NextN and AppendIDs racing across many switches: every ID once, inside a leased range.
func TestMixedTakersConcurrent(t *testing.T) {
	_, st, g := startGen(t, map[string]int64{"a": 16}, func(cfg *Config) {
		cfg.MaxStep = 16
		cfg.WaitTimeout = 10 * time.Second
	})
	const workers, per = 6, 1500
	results := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ids []int64
			for i := range per {
				switch (w + i) % 3 {
				case 0:
					v, err := g.Next("a")
					if err != nil {
						t.Errorf("Next: %v", err)
						return
					}
					ids = append(ids, v)
				case 1:
					n := int64(1 + i%5)
					r, err := g.NextN("a", n)
					if err != nil {
						t.Errorf("NextN(%d): %v", n, err)
						return
					}
					for v := r - n + 1; v <= r; v++ {
						ids = append(ids, v)
					}
				default:
					var err error
					if ids, err = g.AppendIDs(ids, "a", 1+i%7); err != nil {
						t.Errorf("AppendIDs: %v", err)
						return
					}
				}
			}
			results[w] = ids
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, ids := range results {
		for _, v := range ids {
			if seen[v] {
				t.Fatalf("duplicate ID %d", v)
			}
			seen[v] = true
			if !st.inLeased("a", v) {
				t.Fatalf("ID %d outside every leased range", v)
			}
		}
	}
}

// ciStore compares tag names case-insensitively, like MySQL's default collations: Allocate of
// "Foo" leases from row "foo", and Tags lists "foo".
type ciStore struct{ *fakeStore }

func (s ciStore) Allocate(ctx context.Context, tag string, step int64) (Alloc, error) {
	return s.fakeStore.Allocate(ctx, strings.ToLower(tag), step)
}

// A tag served by the store under another letter case must not be dropped by every refresh:
// each drop abandoned the current segment, reset the dynamic step and made the next request
// wait for a synchronous load.
func TestRefreshKeepsTagOfOtherCase(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"foo": 100}) // 100: the second ID does not preload
	g := newTestGen(t, testConfig(clk), ciStore{st}, newFakeMarks())
	mustNext(t, g, "Foo")
	waitIdle(t, g, "Foo")
	allocs := st.allocCount()
	if _, err := g.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Info("Foo"); err != nil {
		t.Fatalf("after a refresh listing %q: %v; want %q still held", "foo", err, "Foo")
	}
	if got := mustNext(t, g, "Foo"); got != 2 {
		t.Fatalf("got %d, want 2 (the same segment)", got)
	}
	if got := st.allocCount(); got != allocs {
		t.Fatalf("got %d more Allocate calls, want 0", got-allocs)
	}
}

// tickAt is the fake clock whose waits of d are the channel tick.
type tickAt struct {
	*clock.Fake
	d    time.Duration
	tick chan time.Time
}

func (c tickAt) After(d time.Duration) <-chan time.Time {
	if d == c.d {
		return c.tick
	}
	return c.Fake.After(d)
}
