package snowflake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/testkit"
)

// scriptSource is a WorkerSource whose Acquire and Extend outcomes the test scripts: Acquire
// returns the queued errors first; Extend fails with extendErr, or blocks on gate (announcing
// itself on entered) when gate is set.
type scriptSource struct {
	mu          sync.Mutex
	w           Worker
	acquireErrs []error
	acquires    int
	extendErr   error
	gate        chan struct{}
	entered     chan struct{}
	until       time.Time
	extends     int
}

func (s *scriptSource) Acquire(ctx context.Context) (Worker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acquires++
	if len(s.acquireErrs) > 0 {
		err := s.acquireErrs[0]
		s.acquireErrs = s.acquireErrs[1:]
		return Worker{}, err
	}
	return s.w, nil
}

func (s *scriptSource) Extend(ctx context.Context, until time.Time) error {
	s.mu.Lock()
	err, gate, entered := s.extendErr, s.gate, s.entered
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if gate != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.until = until
	s.extends++
	return nil
}

func (s *scriptSource) Close() error { return nil }

func (s *scriptSource) set(f func(s *scriptSource)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *scriptSource) state() (until time.Time, extends int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.until, s.extends
}

// TestAwaitLeaseWaitsForRetryAfterFailure: an extension failed once (a transient error: a
// dropped ZooKeeper connection) and its retry is in flight when a request reaches the bound.
// The request waits for that retry (within MaxWait) and gets an ID below the new persisted
// bound, instead of failing at once with the stale error.
func TestAwaitLeaseWaitsForRetryAfterFailure(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	src := &scriptSource{w: Worker{ID: 4}}
	var (
		g       *Generator
		armed   atomic.Bool
		release = make(chan struct{})
	)
	cfg := testConfig(c)
	cfg.LeaseWindow = 300 * time.Millisecond
	cfg.MaxWait = 50 * time.Millisecond
	// The first wait of the request at the bound lets the retry in flight complete.
	cfg.Clock = sleepHook{c, func(time.Duration) {
		if armed.CompareAndSwap(true, false) {
			close(release)
			testkit.Eventually(t, 5*time.Second, "retry published", func() bool {
				return g.Info().ReservedUntil.UnixMilli() > ms2024+300
			})
		}
	}}
	g = newGen(t, cfg, src)
	t.Cleanup(func() { src.set(func(s *scriptSource) { s.gate = nil }) })

	// The extension fails.
	src.set(func(s *scriptSource) { s.extendErr = errors.New("zk: connection closed") })
	c.Set(ms2024 + 250)
	mustNext(t, g) // below the lease; kicks the extension
	testkit.Eventually(t, 5*time.Second, "extension failure", func() bool { return g.Info().ExtendFailures > 0 })

	// The source recovers, but slowly: the next attempt is in flight until released.
	entered := make(chan struct{}, 1)
	src.set(func(s *scriptSource) { s.extendErr, s.gate, s.entered = nil, release, entered })
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the background goroutine did not retry the extension")
	}
	if in := g.Info(); in.Status == "" || in.ReservedUntil.UnixMilli() != ms2024+300 {
		t.Fatalf("before the request: status %q, reserved_until %v; want the failure and the first lease", in.Status, in.ReservedUntil)
	}

	// A request at the bound waits for the attempt in flight.
	c.Set(ms2024 + 300)
	armed.Store(true)
	id, err := g.Next()
	if err != nil {
		t.Fatalf("at the bound with an extension in flight: %v, want an ID once it succeeds", err)
	}
	until, _ := src.state()
	if ms := g.Decode(id).TimestampMs; ms < ms2024+300 || ms >= until.UnixMilli() {
		t.Errorf("id in ms %d, want in [%d, %d) (past the old bound, below the persisted one)", ms, ms2024+300, until.UnixMilli())
	}
	if in := g.Info(); in.Status != "" {
		t.Errorf("status %q after the recovery, want none", in.Status)
	}
}

// TestAwaitLeaseFailsWithoutExtension: after a failure and with no successful attempt
// (the source keeps failing), a request at the bound gets the failure, and no ID is issued at
// or past the persisted bound.
func TestAwaitLeaseFailsWithoutExtension(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	src := &scriptSource{w: Worker{ID: 4}}
	cfg := testConfig(c)
	cfg.LeaseWindow = 300 * time.Millisecond
	cfg.MaxWait = 50 * time.Millisecond
	g := newGen(t, cfg, src)
	src.set(func(s *scriptSource) { s.extendErr = errors.New("disk on fire") })
	c.Set(ms2024 + 250)
	mustNext(t, g)
	testkit.Eventually(t, 5*time.Second, "extension failure", func() bool { return g.Info().ExtendFailures > 0 })
	c.Set(ms2024 + 300)
	_, err := g.Next()
	if !errors.Is(err, ErrNoWorker) {
		t.Fatalf("at the bound, source failing: got %v, want ErrNoWorker", err)
	}
	if until, _ := src.state(); until.UnixMilli() != ms2024+300 {
		t.Errorf("persisted bound %v, want the first lease", until)
	}
}

// TestExtendsAtTwoThirdsOfWindow: the background extension starts once two thirds of the window
// or less are left (not half), so a slow write has more time before requests reach the bound.
func TestExtendsAtTwoThirdsOfWindow(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	src := &scriptSource{w: Worker{ID: 4}}
	cfg := testConfig(c)
	cfg.LeaseWindow = 300 * time.Millisecond
	g := newGen(t, cfg, src)

	c.Set(ms2024 + 90) // 210 ms left: not yet
	mustNext(t, g)
	// Two checks of the background goroutine after the clock moved, instead of a fixed sleep.
	n0 := g.evals.Load()
	testkit.Eventually(t, 5*time.Second, "two lease checks", func() bool { return g.evals.Load() >= n0+2 })
	if _, n := src.state(); n != 1 {
		t.Fatalf("%d extensions with 210 of 300 ms left, want only the first", n)
	}
	c.Set(ms2024 + 110) // 190 ms left
	mustNext(t, g)
	testkit.Eventually(t, 2*time.Second, "extension with 190 of 300 ms left", func() bool {
		until, n := src.state()
		return n == 2 && until.UnixMilli() == ms2024+110+300
	})
}

// TestNewRetriesTransientAcquireFailure: a source that is unavailable for a moment during New
// (a ZooKeeper connection dropped on a loaded machine) is retried: New returns a generator
// that serves at once, not one in the no-worker state.
func TestNewRetriesTransientAcquireFailure(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	src := &scriptSource{w: Worker{ID: 6}, acquireErrs: []error{fmt.Errorf("zk: connection closed: %w", ErrSourceUnavailable)}}
	cfg := testConfig(c)
	cfg.RetryInterval = 200 * time.Millisecond // the background acquisition would come too late
	g := newGen(t, cfg, src)
	if in := g.Info(); !in.HasWorker || in.WorkerID != 6 {
		t.Fatalf("after New: %+v, want worker 6", in)
	}
	if p := g.Decode(mustNext(t, g)); p.WorkerID != 6 {
		t.Errorf("worker %d, want 6", p.WorkerID)
	}
}

// TestNewGivesUpOnLastingUnavailability: a source that stays unavailable makes New return in
// the no-worker state after about ExtendTimeout.
func TestNewGivesUpOnLastingUnavailability(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	errs := make([]error, 1000)
	for i := range errs {
		errs[i] = fmt.Errorf("zk down: %w", ErrSourceUnavailable)
	}
	src := &scriptSource{w: Worker{ID: 6}, acquireErrs: errs}
	cfg := testConfig(c)
	cfg.ExtendTimeout = 300 * time.Millisecond
	cfg.RetryInterval = 20 * time.Millisecond
	start := time.Now()
	g := newGen(t, cfg, src)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("New took %v with ExtendTimeout 300ms", d)
	}
	if _, err := g.Next(); !errors.Is(err, ErrNoWorker) {
		t.Errorf("got %v, want ErrNoWorker", err)
	}
	src.mu.Lock()
	n := src.acquires
	src.mu.Unlock()
	if n < 2 {
		t.Errorf("%d Acquire calls in New, want retries", n)
	}
}

// sleepHook is the fake clock with before run on every Sleep.
type sleepHook struct {
	*clock.Fake
	before func(time.Duration)
}

func (h sleepHook) Sleep(d time.Duration) {
	h.before(d)
	h.Fake.Sleep(d)
}

// TestReacquireAfterLoss: an extension that says the id was lost (ErrWorkerLost) stops issuing
// at once, and the generator acquires again as a new start: meanwhile NOWORKER says what it
// waits for; then it serves with the new worker id, above every ID it issued before, even with
// a clock that went back and a new id without a bound.
func TestReacquireAfterLoss(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	src := &scriptSource{w: Worker{ID: 4}}
	cfg := testConfig(c)
	cfg.LeaseWindow = 300 * time.Millisecond
	cfg.MaxWait = 20 * time.Millisecond
	g := newGen(t, cfg, src)
	c.Set(ms2024 + 50)
	before := mustNext(t, g)

	// The id is lost; acquiring again first finds it held by the new holder.
	held := fmt.Errorf("worker id 4 is held by 10.0.0.2:6380: %w", ErrWorkerHeld)
	src.set(func(s *scriptSource) {
		s.extendErr = fmt.Errorf("worker id 4 was taken over: %w", ErrWorkerLost)
		s.acquireErrs = slices.Repeat([]error{held}, 100000) // until the test clears them
		s.w = Worker{ID: 9}                                  // then another id, with no bound
	})
	c.Set(ms2024 + 250) // two thirds of the window left: the extension runs, and fails
	testkit.Eventually(t, 5*time.Second, "the loss", func() bool { return !g.Info().HasWorker })
	if _, err := g.Next(); !errors.Is(err, ErrNoWorker) {
		t.Fatalf("after the loss, below the old lease: got %v, want ErrNoWorker at once", err)
	}
	testkit.Eventually(t, 5*time.Second, "acquiring again", func() bool {
		_, err := g.Next()
		return err != nil && strings.Contains(Waiting(err), "held by another live process")
	})
	src.set(func(s *scriptSource) { s.extendErr, s.acquireErrs = nil, nil })
	c.Set(ms2024 + 20) // the clock steps back before the new id is acquired
	testkit.Eventually(t, 5*time.Second, "the new worker id", func() bool { return g.Info().HasWorker })
	if w := g.Info().WorkerID; w != 9 {
		t.Fatalf("worker id %d after acquiring again, want 9", w)
	}
	if id, err := g.Next(); err == nil && id <= before {
		t.Fatalf("after acquiring again: ID %d (ms %d) not above %d (ms %d) issued before", id, g.Decode(id).TimestampMs, before, g.Decode(before).TimestampMs)
	}
	c.Set(ms2024 + 60)
	if id := mustNext(t, g); id <= before || g.Decode(id).WorkerID != 9 {
		t.Fatalf("ID %d (worker %d), want above %d with worker 9", id, g.Decode(id).WorkerID, before)
	}
}

// TestWaiting: NOWORKER's reason names what the generator waits for.
func TestWaiting(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cause error
		want  string
	}{
		{"held", fmt.Errorf("x: %w", ErrWorkerHeld), "held by another live process"},
		{"lost", fmt.Errorf("x: %w", ErrWorkerLost), "taken over by another process"},
		{"lapsed", fmt.Errorf("x: %w", ErrLeaseLapsed), "nobody took it over"},
		{"retake wait", fmt.Errorf("x: %w", ErrRetakeWait), "nobody else holds it"},
		{"bound", &BoundAheadError{}, "start bound"},
		{"wait", fmt.Errorf("%w: x", errWaitBound), "waiting for the clock"},
		{"unavailable", fmt.Errorf("x: %w", ErrSourceUnavailable), "unreachable"},
		{"closed", errClosed, "closed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := error(newStatus(tt.cause))
			if !errors.Is(err, ErrNoWorker) || errors.Is(err, ErrClockBack) || !strings.Contains(Waiting(err), tt.want) {
				t.Fatalf("status of %v: %v, waiting %q; want ErrNoWorker waiting for %q", tt.cause, err, Waiting(err), tt.want)
			}
		})
	}
}
