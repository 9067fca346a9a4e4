package snowflake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeSource is an in-memory WorkerSource.
type fakeSource struct {
	mu         sync.Mutex
	w          Worker
	acquireErr error
	extendErr  error
	until      time.Time // last persisted reserved_until
	extends    int
	closed     int
}

func (s *fakeSource) Acquire(ctx context.Context) (Worker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acquireErr != nil {
		return Worker{}, s.acquireErr
	}
	w := s.w
	if w.Source == "" {
		w.Source = "fake"
	}
	return w, nil
}

func (s *fakeSource) Extend(ctx context.Context, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.extendErr != nil {
		return s.extendErr
	}
	s.until = until
	s.extends++
	return nil
}

func (s *fakeSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
	return nil
}

func (s *fakeSource) set(f func(s *fakeSource)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *fakeSource) persisted() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.until
}

const ms2024 = 1704067200000 // 2024-01-01T00:00:00Z

func testConfig(c *clock.Fake) Config {
	return Config{
		SequenceStartZero: true,
		Clock:             c,
		RetryInterval:     time.Millisecond,
	}
}

func newGen(t *testing.T, cfg Config, src WorkerSource) *Generator {
	t.Helper()
	g, err := New(cfg, src, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// waitReady waits until g issues: New leaves the wait for the start bound to the background.
func waitReady(t *testing.T, g *Generator) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !g.Info().HasWorker {
		if time.Now().After(deadline) {
			t.Fatalf("generator not ready after 10s: %s", g.Info().Status)
		}
		time.Sleep(time.Millisecond)
	}
}

func mustNext(t *testing.T, g *Generator) int64 {
	t.Helper()
	id, err := g.Next()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return id
}

func TestGoldenIDs(t *testing.T) {
	tests := []struct {
		name   string
		layout Layout
		nowMs  int64
		worker int64
		want   []int64
	}{
		{"leaf layout 2024", Layout{}, ms2024, 5, []int64{1741610183685066752, 1741610183685066753, 1741610183685066754}},
		{"epoch+1e6ms", Layout{}, DefaultEpochMs + 1_000_000, 5, []int64{4194304020480, 4194304020481, 4194304020482}},
		{"worker max", Layout{}, DefaultEpochMs + 1, 1023, []int64{1<<22 | 1023<<12, 1<<22 | 1023<<12 | 1, 1<<22 | 1023<<12 | 2}},
		{"custom 39/8/16 epoch 2020", Layout{Epoch: time.UnixMilli(1577836800000), TimeBits: 39, WorkerBits: 8, SeqBits: 16},
			1577836800000 + 7, 3, []int64{7<<24 | 3<<16, 7<<24 | 3<<16 | 1, 7<<24 | 3<<16 | 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clock.NewFakeMs(tt.nowMs)
			cfg := testConfig(c)
			cfg.Layout = tt.layout
			g := newGen(t, cfg, &fakeSource{w: Worker{ID: tt.worker}})
			for i, want := range tt.want {
				if got := mustNext(t, g); got != want {
					t.Errorf("id %d: got %d, want %d", i, got, want)
				}
			}
			c.Add(time.Millisecond)
			got := mustNext(t, g)
			p := g.Decode(got)
			if p.TimestampMs != tt.nowMs+1 || p.Sequence != 0 || p.WorkerID != tt.worker {
				t.Errorf("next ms: got %+v, want ts %d seq 0 worker %d", p, tt.nowMs+1, tt.worker)
			}
		})
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	layouts := []Layout{{}, {TimeBits: 41, WorkerBits: 2, SeqBits: 20}, {TimeBits: 50, WorkerBits: 1, SeqBits: 12}}
	for _, l := range layouts {
		t.Run(fmt.Sprintf("%d/%d/%d", l.withDefaults().TimeBits, l.withDefaults().WorkerBits, l.withDefaults().SeqBits), func(t *testing.T) {
			c := clock.NewFakeMs(ms2024 + 123)
			cfg := testConfig(c)
			cfg.Layout = l
			w := l.MaxWorkerID()
			g := newGen(t, cfg, &fakeSource{w: Worker{ID: w}})
			for i := 0; i < 5; i++ {
				id := mustNext(t, g)
				p := g.Decode(id)
				want := Parts{TimestampMs: ms2024 + 123, Time: time.UnixMilli(ms2024 + 123).UTC(), WorkerID: w, Sequence: int64(i)}
				if p != want {
					t.Errorf("Decode(%d): got %+v, want %+v", id, p, want)
				}
				if got := p.Time.Format("2006-01-02T15:04:05.000Z07:00"); got != "2024-01-01T00:00:00.123Z" {
					t.Errorf("time: got %s, want 2024-01-01T00:00:00.123Z", got)
				}
			}
		})
	}
}

func TestRandomSequenceStart(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	cfg := testConfig(c)
	cfg.SequenceStartZero = false
	g := newGen(t, cfg, &fakeSource{})
	odd := 0
	for i := 0; i < 200; i++ {
		c.Add(time.Millisecond)
		p := g.Decode(mustNext(t, g))
		if p.Sequence < 0 || p.Sequence >= 100 {
			t.Fatalf("sequence start %d not in [0, 100)", p.Sequence)
		}
		odd += int(p.Sequence & 1)
	}
	if odd < 40 || odd > 160 {
		t.Errorf("got %d odd starts of 200, want roughly half", odd)
	}
}

// TestSequenceStartAfterFullMillisecond: with the random start on, a millisecond that follows
// one whose sequence was used up starts at 0 (the saturated worker loses no values), whether
// the request waited for it or arrived after it began; one that follows a partial
// millisecond starts at random.
func TestSequenceStartAfterFullMillisecond(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	cfg := testConfig(c)
	cfg.SequenceStartZero = false
	cfg.Layout = Layout{TimeBits: 41, WorkerBits: 15, SeqBits: 7} // 128 per ms, random start in [0, 100)
	g := newGen(t, cfg, &fakeSource{w: Worker{ID: 1}})
	nonZero := 0
	for round := 0; round < 50; round++ {
		// A partial millisecond: one ID, then the clock moves on.
		c.Add(time.Millisecond)
		first := g.Decode(mustNext(t, g))
		if first.Sequence != 0 {
			nonZero++
		}
		// Use the rest of this millisecond's sequence ...
		for i := first.Sequence; i < 127; i++ {
			mustNext(t, g)
		}
		// ... so the next ID waits for the next millisecond and starts at 0.
		p := g.Decode(mustNext(t, g))
		if p.TimestampMs != first.TimestampMs+1 || p.Sequence != 0 {
			t.Fatalf("round %d: after a full millisecond got %+v, want the next ms at sequence 0", round, p)
		}
		// Fill that one too, and let the clock pass its end before the next request.
		for i := int64(1); i < 128; i++ {
			mustNext(t, g)
		}
		c.Add(2 * time.Millisecond)
		if p := g.Decode(mustNext(t, g)); p.Sequence != 0 {
			t.Fatalf("round %d: a request after a full millisecond ended got sequence %d, want 0", round, p.Sequence)
		}
	}
	if nonZero < 25 {
		t.Errorf("after partial milliseconds %d of 50 starts were non-zero, want most (random start)", nonZero)
	}
}

func TestClockBack(t *testing.T) {
	tests := []struct {
		name      string
		back      time.Duration
		frozen    bool
		wantErr   bool
		wantSleep time.Duration
	}{
		{"1ms waited out", time.Millisecond, false, false, 2 * time.Millisecond},
		{"5ms waited out", 5 * time.Millisecond, false, false, 10 * time.Millisecond},
		{"5ms but clock stuck", 5 * time.Millisecond, true, true, 10 * time.Millisecond},
		{"6ms refused", 6 * time.Millisecond, false, true, 0},
		{"1h refused", time.Hour, false, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clock.NewFakeMs(ms2024)
			g := newGen(t, testConfig(c), &fakeSource{})
			first := mustNext(t, g)
			c.Add(-tt.back)
			c.SetFrozen(tt.frozen)
			c.ResetSleeps()
			id, err := g.Next()
			var sleptTotal time.Duration
			for _, d := range c.Sleeps() {
				if d >= time.Millisecond { // ignore the background's pacing, if any
					sleptTotal += d
				}
			}
			if sleptTotal != tt.wantSleep {
				t.Errorf("slept %v, want %v", sleptTotal, tt.wantSleep)
			}
			if tt.wantErr {
				var cb *ClockBackError
				if !errors.Is(err, ErrClockBack) || !errors.As(err, &cb) {
					t.Fatalf("got id %d err %v, want ErrClockBack", id, err)
				}
				if cb.Offset != tt.back {
					t.Errorf("offset: got %v, want %v", cb.Offset, tt.back)
				}
				in := g.Info()
				if in.ClockBackErrors != 1 || in.LastClockBackOffset != tt.back {
					t.Errorf("info: got errors %d offset %v, want 1 and %v", in.ClockBackErrors, in.LastClockBackOffset, tt.back)
				}
				return
			}
			if err != nil {
				t.Fatalf("Next: %v", err)
			}
			if id <= first {
				t.Errorf("got %d after %d, want increasing", id, first)
			}
			if ev := g.Info().ClockBackEvents; ev != 1 {
				t.Errorf("clock-back events: got %d, want 1", ev)
			}
		})
	}
}

func TestSequenceExhaustion(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	cfg := testConfig(c)
	cfg.Layout = Layout{TimeBits: 41, WorkerBits: 19, SeqBits: 3} // 8 per ms
	g := newGen(t, cfg, &fakeSource{w: Worker{ID: 1}})
	var ids []int64
	for i := 0; i < 8; i++ {
		ids = append(ids, mustNext(t, g))
	}
	if p := g.Decode(ids[7]); p.TimestampMs != ms2024 || p.Sequence != 7 {
		t.Fatalf("8th id: got %+v, want ms %d seq 7", p, ms2024)
	}
	c.Add(300 * time.Microsecond)
	id := mustNext(t, g)
	if p := g.Decode(id); p.TimestampMs != ms2024+1 || p.Sequence != 0 {
		t.Errorf("9th id: got %+v, want next ms, seq 0", p)
	}
	if s := c.Sleeps(); len(s) == 0 || s[0] != 700*time.Microsecond {
		t.Errorf("sleeps: got %v, want the first to be 700µs (to the ms boundary)", s)
	}
	if w := g.Info().SequenceWaits; w != 1 {
		t.Errorf("sequence waits: got %d, want 1", w)
	}

	// A clock that stops while waiting: bounded by MaxWait, then an error, never a spin forever.
	for i := 0; i < 7; i++ {
		mustNext(t, g)
	}
	c.SetFrozen(true)
	start := time.Now()
	if _, err := g.Next(); !errors.Is(err, ErrClockBack) {
		t.Errorf("frozen clock: got %v, want ErrClockBack", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("frozen clock: took %v", el)
	}
}

func TestOverflow(t *testing.T) {
	tests := []struct {
		name   string
		layout Layout
	}{
		{"leaf 41 bits", Layout{}},
		{"20 time bits", Layout{Epoch: time.UnixMilli(ms2024), TimeBits: 20, WorkerBits: 21, SeqBits: 22}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.layout.withDefaults()
			last := l.MaxTime().UnixMilli()
			c := clock.NewFakeMs(last - 1)
			cfg := testConfig(c)
			cfg.Layout = tt.layout
			g := newGen(t, cfg, &fakeSource{w: Worker{ID: l.MaxWorkerID()}})
			a := mustNext(t, g)
			c.Add(time.Millisecond)
			b := mustNext(t, g)
			if a <= 0 || b <= a {
				t.Fatalf("got %d then %d, want positive and increasing", a, b)
			}
			if p := g.Decode(b); p.TimestampMs != last {
				t.Errorf("last ms: got %d, want %d", p.TimestampMs, last)
			}
			c.Add(time.Millisecond)
			if id, err := g.Next(); !errors.Is(err, ErrOverflow) {
				t.Errorf("after the last ms: got %d, %v, want ErrOverflow", id, err)
			}
			c.Add(time.Hour)
			if id, err := g.Next(); !errors.Is(err, ErrOverflow) {
				t.Errorf("long after: got %d, %v, want ErrOverflow", id, err)
			}
			if _, err := New(cfg, &fakeSource{}, nil); !errors.Is(err, ErrOverflow) {
				t.Errorf("New past the end: got %v, want ErrOverflow", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	tests := []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"zero is default", func(*Config) {}, true},
		{"default config", func(cf *Config) { d := DefaultConfig(); d.Clock = c; *cf = d }, true},
		{"bits sum 62", func(cf *Config) { cf.Layout = Layout{TimeBits: 40, WorkerBits: 10, SeqBits: 12} }, false},
		{"zero worker bits", func(cf *Config) { cf.Layout = Layout{TimeBits: 51, WorkerBits: 0, SeqBits: 12} }, false},
		{"epoch in the future", func(cf *Config) { cf.Layout = Layout{Epoch: time.UnixMilli(ms2024 + 1000)} }, false},
		{"negative MaxWait", func(cf *Config) { cf.MaxWait = -1 }, false},
		{"tiny lease", func(cf *Config) { cf.LeaseWindow = time.Millisecond }, false},
		{"negative batch", func(cf *Config) { cf.MaxBatch = -1 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(c)
			tt.mutate(&cfg)
			if err := cfg.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate: got %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestWorkerIDOutOfRange(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	cfg := testConfig(c)
	cfg.Layout = Layout{TimeBits: 41, WorkerBits: 2, SeqBits: 20}
	for _, tt := range []struct {
		id int64
		ok bool
	}{{0, true}, {3, true}, {4, false}, {1024, false}, {-1, false}} {
		src := &fakeSource{w: Worker{ID: tt.id}}
		g, err := New(cfg, src, nil)
		if (err == nil) != tt.ok {
			t.Errorf("worker %d: got %v, want ok=%v", tt.id, err, tt.ok)
		}
		if err == nil {
			if p := g.Decode(mustNext(t, g)); p.WorkerID != tt.id {
				t.Errorf("worker %d: decoded %d", tt.id, p.WorkerID)
			}
			g.Close()
		}
		if src.closed != 1 {
			t.Errorf("worker %d: source closed %d times, want 1", tt.id, src.closed)
		}
	}
}

func TestStartWaitsPastPersistedBound(t *testing.T) {
	tests := []struct {
		name    string
		ahead   time.Duration // bound minus clock
		wantErr bool
	}{
		{"no bound", -time.Hour, false},
		{"bound 2s ahead (clock rolled back)", 2 * time.Second, false},
		{"bound equals clock", 0, false},
		{"bound 11s ahead", 11 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := clock.NewFakeMs(ms2024)
			bound := time.UnixMilli(ms2024).Add(tt.ahead)
			src := &fakeSource{w: Worker{ID: 1, Bound: bound, BoundCause: "the bound of the test"}}
			g, err := New(testConfig(c), src, nil)
			if tt.wantErr {
				// The clock did not move back: the refusal names the bound persisted ahead.
				if !errors.Is(err, ErrBoundAhead) || errors.Is(err, ErrClockBack) || strings.Contains(err.Error(), "clock moved back") ||
					!strings.Contains(err.Error(), "the bound of the test") {
					t.Fatalf("got %v, want ErrBoundAhead naming the bound's cause, not ErrClockBack (refuse to start)", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer g.Close()
			waitReady(t, g)
			p := g.Decode(mustNext(t, g))
			if p.TimestampMs <= bound.UnixMilli() {
				t.Errorf("first id at ms %d, want > bound %d", p.TimestampMs, bound.UnixMilli())
			}
			if p.TimestampMs > max(bound.UnixMilli(), ms2024)+120 {
				t.Errorf("first id at ms %d: waited too long past the bound %d", p.TimestampMs, bound.UnixMilli())
			}
		})
	}
}

// TestClockBackBelowStartBound: the start bound is also the floor of the generator's last
// millisecond, so a clock that steps back below it after the start is refused, never used to
// issue in the previous run's milliseconds.
func TestClockBackBelowStartBound(t *testing.T) {
	c := clock.NewFakeMs(ms2024 + 1)
	src := &fakeSource{w: Worker{ID: 1, Bound: time.UnixMilli(ms2024)}}
	g := newGen(t, testConfig(c), src)
	waitReady(t, g)
	c.Set(ms2024 - 50)
	if id, err := g.Next(); !errors.Is(err, ErrClockBack) {
		t.Fatalf("clock 50ms below the start bound: got %d (ms %d), %v; want ErrClockBack", id, g.Decode(id).TimestampMs, err)
	}
}

func TestLease(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	cfg := testConfig(c)
	cfg.LeaseWindow = 100 * time.Millisecond
	cfg.MaxWait = 20 * time.Millisecond
	src := &fakeSource{w: Worker{ID: 2}}
	g := newGen(t, cfg, src)
	if got, want := src.persisted().UnixMilli(), int64(ms2024+100); got != want {
		t.Fatalf("first lease: got %d, want %d", got, want)
	}

	// Healthy: the background extension keeps the lease ahead; every ID below the lease.
	for i := 0; i < 300; i++ {
		c.Add(time.Millisecond)
		id, err := g.Next()
		if err != nil {
			t.Fatalf("ms %d: %v", i, err)
		}
		if ms := g.Decode(id).TimestampMs; ms >= src.persisted().UnixMilli() {
			t.Fatalf("id at ms %d, persisted lease %d", ms, src.persisted().UnixMilli())
		}
	}
	if n := g.Info().Extensions; n < 3 {
		t.Errorf("extensions: got %d, want ≥ 3", n)
	}

	// The source fails: IDs keep coming up to the persisted bound, never at or past it.
	src.set(func(s *fakeSource) { s.extendErr = errors.New("disk on fire") })
	bound := src.persisted().UnixMilli()
	var lastErr error
	for now := g.Decode(mustNext(t, g)).TimestampMs; now < bound+10; now++ {
		c.Set(now)
		id, err := g.Next()
		if err != nil {
			lastErr = err
			if now < bound-cfg.MaxWait.Milliseconds()-1 {
				t.Fatalf("ms %d (bound %d): %v", now, bound, err)
			}
			continue
		}
		if ms := g.Decode(id).TimestampMs; ms >= bound {
			t.Fatalf("issued id %d in ms %d ≥ reserved_until %d", id, ms, bound)
		}
	}
	if !errors.Is(lastErr, ErrNoWorker) {
		t.Fatalf("past the bound: got %v, want ErrNoWorker", lastErr)
	}
	if in := g.Info(); in.Status == "" || in.ExtendFailures == 0 {
		t.Errorf("info: got status %q failures %d, want the failure reported", in.Status, in.ExtendFailures)
	}

	// The source recovers: IDs again.
	src.set(func(s *fakeSource) { s.extendErr = nil })
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := g.Next(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("after recovery: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNoWorkerStateThenAcquire(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	src := &fakeSource{w: Worker{ID: 9}, acquireErr: fmt.Errorf("zk down, no cache: %w", ErrSourceUnavailable)}
	cfg := testConfig(c)
	cfg.ExtendTimeout = 100 * time.Millisecond // New retries the unavailable source this long
	g := newGen(t, cfg, src)
	if _, err := g.Next(); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("got %v, want ErrNoWorker", err)
	}
	if ids, err := g.AppendIDs(nil, 3); !errors.Is(err, ErrNoWorker) || len(ids) != 0 {
		t.Fatalf("AppendIDs: got %v, %v, want ErrNoWorker and nothing", ids, err)
	}
	if in := g.Info(); in.HasWorker || in.WorkerID != -1 || in.Status == "" {
		t.Errorf("info: got %+v, want no worker with a status", in)
	}
	src.set(func(s *fakeSource) { s.acquireErr = nil })
	deadline := time.Now().Add(5 * time.Second)
	for {
		id, err := g.Next()
		if err == nil {
			if p := g.Decode(id); p.WorkerID != 9 {
				t.Fatalf("worker: got %d, want 9", p.WorkerID)
			}
			break
		}
		if !errors.Is(err, ErrNoWorker) || time.Now().After(deadline) {
			t.Fatalf("got %v, want ErrNoWorker until acquired", err)
		}
		time.Sleep(time.Millisecond)
	}
	if in := g.Info(); !in.HasWorker || in.WorkerID != 9 || in.Status != "" {
		t.Errorf("info: got %+v", in)
	}
}

func TestNewFailsOnPermanentAcquireError(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	src := &fakeSource{acquireErr: ErrLocked}
	if _, err := New(testConfig(c), src, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("got %v, want ErrLocked", err)
	}
	if src.closed != 1 {
		t.Errorf("source closed %d times, want 1", src.closed)
	}
}

func TestAppendIDs(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	cfg := testConfig(c)
	cfg.MaxBatch = 10000
	g := newGen(t, cfg, &fakeSource{w: Worker{ID: 1}})
	dst := []int64{42}
	dst, err := g.AppendIDs(dst, 10000) // crosses into later milliseconds
	if err != nil {
		t.Fatal(err)
	}
	if len(dst) != 10001 || dst[0] != 42 {
		t.Fatalf("got len %d first %d, want 10001 and 42 kept", len(dst), dst[0])
	}
	for i := 2; i < len(dst); i++ {
		if dst[i] <= dst[i-1] {
			t.Fatalf("not increasing at %d: %d after %d", i, dst[i], dst[i-1])
		}
	}
	if got, err := g.AppendIDs(nil, 10001); !errors.Is(err, ErrLimit) || len(got) != 0 {
		t.Errorf("too many: got %v, %v, want ErrLimit", got, err)
	}
	if _, err := g.AppendIDs(nil, -1); !errors.Is(err, ErrLimit) {
		t.Errorf("negative: got %v, want ErrLimit", err)
	}
	if got, err := g.AppendIDs(nil, 0); err != nil || len(got) != 0 {
		t.Errorf("zero: got %v, %v", got, err)
	}
}

func TestConcurrentUnique(t *testing.T) {
	src, err := NewFileSource(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	const goroutines, perG = 8, 20000
	res := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ids []int64
			for len(ids) < perG {
				if i%2 == 0 {
					id, err := g.Next()
					if err != nil {
						t.Error(err)
						return
					}
					ids = append(ids, id)
				} else {
					var err error
					if ids, err = g.AppendIDs(ids, 100); err != nil {
						t.Error(err)
						return
					}
				}
			}
			res[i] = ids
		}()
	}
	wg.Wait()
	var all []int64
	for i, ids := range res {
		for j := 1; j < len(ids); j++ {
			if ids[j] <= ids[j-1] {
				t.Fatalf("goroutine %d: %d after %d", i, ids[j], ids[j-1])
			}
		}
		all = append(all, ids...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			t.Fatalf("duplicate %d", all[i])
		}
	}
	if len(all) != goroutines*perG {
		t.Fatalf("got %d ids, want %d", len(all), goroutines*perG)
	}
	if in := g.Info(); in.Issued != uint64(len(all)) || in.WorkerID != 3 || in.Source != "file" {
		t.Errorf("info: got %+v", in)
	}
}

func TestCloseIdempotentAndLowersBound(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	src := &fakeSource{w: Worker{ID: 1}}
	g, err := New(testConfig(c), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := mustNext(t, g)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if src.closed != 1 {
		t.Errorf("source closed %d times, want 1", src.closed)
	}
	if got, want := src.persisted().UnixMilli(), g.Decode(id).TimestampMs+1; got != want {
		t.Errorf("bound after close: got %d, want %d (just past the last ms used)", got, want)
	}
	if _, err := g.Next(); !errors.Is(err, ErrNoWorker) {
		t.Errorf("Next after Close: got %v, want ErrNoWorker", err)
	}
}

// TestRestartWithRolledBackClock is Leaf #216: the process restarts with a clock behind the
// time it last issued at; the persisted lease keeps the new IDs above the old ones.
func TestRestartWithRolledBackClock(t *testing.T) {
	dir := t.TempDir()
	c := clock.NewFakeMs(ms2024)
	run := func(n int) []int64 {
		src, err := NewFileSource(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		g, err := New(testConfig(c), src, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		waitReady(t, g)
		var ids []int64
		for range n {
			ids = append(ids, mustNext(t, g))
			c.Add(time.Millisecond)
		}
		return ids
	}
	first := run(50)
	c.Set(ms2024) // rolled back by 50ms
	second := run(50)
	if second[0] <= first[len(first)-1] {
		t.Fatalf("after restart: first id %d ≤ last of the previous run %d", second[0], first[len(first)-1])
	}

	// A crash (no Close) leaves the full window: the next run waits past it.
	src, err := NewFileSource(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.localSource.f.Write(statefile.State{WorkerID: 0, ReservedUntilMs: ms2024 + 3000, Source: "file"}); err != nil {
		t.Fatal(err)
	}
	src.Close()
	c.Set(ms2024)
	third := run(1)
	if ms := (Layout{}).Decode(third[0]).TimestampMs; ms <= ms2024+3000 {
		t.Fatalf("after crash: first id at ms %d, want > %d", ms, ms2024+3000)
	}
}

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := NewFileSource(dir, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewFileSource(dir, 7); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: got %v, want ErrLocked", err)
	}
	if _, err := NewStaticSource(dir, 1); !errors.Is(err, ErrLocked) {
		t.Fatalf("static on the same dir: got %v, want ErrLocked", err)
	}
	w, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w.ID != 7 || !w.Bound.IsZero() || w.Source != "file" {
		t.Fatalf("first start: got %+v, want id 7, no bound", w)
	}
	until := time.UnixMilli(ms2024 + 3000)
	if err := s.Extend(ctx, until); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = NewFileSource(dir, 99) // the first id only matters on first start
	if err != nil {
		t.Fatal(err)
	}
	w, err = s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w.ID != 7 || !w.Bound.Equal(until) {
		t.Fatalf("reopen: got %+v, want id 7 bound %v", w, until)
	}
	s.Close()

	st, err := NewStaticSource(dir, 12)
	if err != nil {
		t.Fatal(err)
	}
	w, err = st.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w.ID != 12 || !w.Bound.Equal(until) || w.Source != "static" {
		t.Fatalf("static: got %+v, want id 12 with the bound kept", w)
	}
	if err := st.Extend(ctx, until.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = NewStaticSource(dir, 12)
	if err != nil {
		t.Fatal(err)
	}
	if w, _ = st.Acquire(ctx); !w.Bound.Equal(until.Add(time.Second)) {
		t.Fatalf("static reopen: got bound %v, want %v", w.Bound, until.Add(time.Second))
	}
	st.Close()

	// A corrupt file is an error, never "first start".
	if err := os.WriteFile(filepath.Join(dir, LocalStateFile), []byte("{garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err = NewFileSource(dir, 0); err == nil || !strings.Contains(err.Error(), "corrupt") {
		if s != nil {
			s.Close()
		}
		t.Fatalf("corrupt file: got %v, want an error saying so", err)
	}
}
