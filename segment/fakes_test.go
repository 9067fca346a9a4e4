package segment

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/testkit"
)

// fakeStore is an in-memory Store with controllable failure, latency and blocking.
type fakeStore struct {
	baseStore
	mu       sync.Mutex
	rows     map[string]*fakeRow
	fail     error         // returned by Allocate when set
	tagsErr  error         // returned by Tags when set
	latency  time.Duration // Allocate sleeps this long (real time) first
	block    chan struct{} // when set, Allocate waits for it to be closed (or ctx)
	started  chan string   // when set, Allocate sends the tag on entry
	lower    map[string]int64
	allocs   int // Allocate calls, any outcome
	steps    []int64
	leased   map[string][][2]int64
	creates  int
	inFlight int
	maxIn    int // max concurrent Allocate calls seen
	inTag    map[string]int
	maxInTag int             // max concurrent Allocate calls of one tag seen
	hidden   map[string]bool // not listed by Tags (Allocate still serves them)
	maxIDErr error           // returned by MaxID when set
	panics   int             // the next panics Allocate calls panic
	// blockIf, when set, limits block to the tags it reports true for; blockedIn counts
	// those calls in flight, maxBlockedIn the most seen at once.
	blockIf      func(tag string) bool
	blockedIn    int
	maxBlockedIn int
}

type fakeRow struct{ maxID, step int64 }

func newFakeStore(rows map[string]int64) *fakeStore {
	s := &fakeStore{rows: map[string]*fakeRow{}, lower: map[string]int64{}, leased: map[string][][2]int64{},
		inTag: map[string]int{}, hidden: map[string]bool{}}
	for tag, step := range rows {
		s.rows[tag] = &fakeRow{maxID: 1, step: step}
	}
	return s
}

func (s *fakeStore) Allocate(ctx context.Context, tag string, step int64) (Alloc, error) {
	s.mu.Lock()
	s.allocs++
	s.inFlight++
	if s.inFlight > s.maxIn {
		s.maxIn = s.inFlight
	}
	s.inTag[tag]++
	s.maxInTag = max(s.maxInTag, s.inTag[tag])
	block, started, latency := s.block, s.started, s.latency
	if block != nil && s.blockIf != nil && !s.blockIf(tag) {
		block = nil
	}
	if block != nil && s.blockIf != nil {
		s.blockedIn++
		s.maxBlockedIn = max(s.maxBlockedIn, s.blockedIn)
		defer func() { s.mu.Lock(); s.blockedIn--; s.mu.Unlock() }()
	}
	doPanic := s.panics > 0
	if doPanic {
		s.panics--
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.inTag[tag]--
		s.mu.Unlock()
	}()
	if doPanic {
		panic("fake store: injected panic")
	}
	if started != nil {
		started <- tag
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return Alloc{}, ctx.Err()
		}
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return Alloc{}, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return Alloc{}, s.fail
	}
	r := s.rows[tag]
	if r == nil {
		return Alloc{}, fmt.Errorf("fake: %w", ErrUnknownTag)
	}
	if step <= 0 {
		step = r.step
	}
	s.steps = append(s.steps, step)
	if d := s.lower[tag]; d != 0 {
		r.maxID -= d
		delete(s.lower, tag)
	}
	r.maxID += step
	s.leased[tag] = append(s.leased[tag], [2]int64{r.maxID - step, r.maxID})
	return Alloc{MaxID: r.maxID, Step: r.step}, nil
}

func (s *fakeStore) Tags(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tagsErr != nil {
		return nil, s.tagsErr
	}
	var out []string
	for k := range s.rows {
		if !s.hidden[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (s *fakeStore) Create(ctx context.Context, t Tag) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creates++
	if s.rows[t.Name] != nil {
		return fmt.Errorf("fake: %w", ErrTagExists)
	}
	s.rows[t.Name] = &fakeRow{maxID: t.MaxID, step: t.Step}
	return nil
}

func (s *fakeStore) set(f func(s *fakeStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *fakeStore) allocCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.allocs
}

func (s *fakeStore) stepsSeen() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.steps...)
}

// inLeased reports whether id lies in a range leased for tag.
func (s *fakeStore) inLeased(tag string, id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.leased[tag] {
		if id >= r[0] && id < r[1] {
			return true
		}
	}
	return false
}

// fakeMarks is an in-memory Marks.
type fakeMarks struct {
	baseMarks
	mu       sync.Mutex
	m        map[string]int64
	raiseErr error
}

// baseStore gives a test's Store the methods it does not care about, as a Store that cannot
// do them: ErrNotSupported, so the generator goes without (see Store).
type baseStore struct{}

func (baseStore) MaxID(context.Context, string) (int64, error)      { return 0, ErrNotSupported }
func (baseStore) CheckTag(context.Context, string) error            { return ErrNotSupported }
func (baseStore) CreateShape(context.Context, string, []byte) error { return ErrNotSupported }
func (baseStore) LoadShape(context.Context, string) ([]byte, error) { return nil, ErrNotSupported }
func (baseStore) ShapeTags(context.Context) ([]string, error)       { return nil, ErrNotSupported }

// baseMarks gives a test's Marks the methods it does not care about, as Marks that cannot
// do them: ErrNotSupported, so the generator raises through Raise, starts from the stored
// step, does not list and warms nothing.
type baseMarks struct{}

func (baseMarks) RaiseHint(string, int64, Hint) error    { return ErrNotSupported }
func (baseMarks) Hint(string) (Hint, error)              { return Hint{}, ErrNotSupported }
func (baseMarks) AllMarks() ([]Mark, error)              { return nil, ErrNotSupported }
func (baseMarks) MarksAfter(string, int) ([]Mark, error) { return nil, ErrNotSupported }
func (baseMarks) RecentTags(int) ([]string, error)       { return nil, ErrNotSupported }

func newFakeMarks() *fakeMarks { return &fakeMarks{m: map[string]int64{}} }

func (f *fakeMarks) Mark(tag string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[tag], nil
}

func (f *fakeMarks) Raise(tag string, end int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.raiseErr != nil {
		return f.raiseErr
	}
	if end > f.m[tag] {
		f.m[tag] = end
	}
	return nil
}

func (f *fakeMarks) set(fn func(f *fakeMarks)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeMarks) get(tag string) int64 {
	v, _ := f.Mark(tag)
	return v
}

// newFakeClock is the shared fake clock (internal/clock) at 2025-01-01.
func newFakeClock() *clock.Fake {
	return clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
}

// testConfig is a config with a fake clock and short waits.
func testConfig(clk *clock.Fake) Config {
	return Config{
		WaitTimeout: 2 * time.Second,
		LoadTimeout: 2 * time.Second,
		Clock:       clk,
	}
}

// newTestGen builds a Generator and closes it at the end of the test.
func newTestGen(t *testing.T, cfg Config, st Store, mk Marks) *Generator {
	t.Helper()
	g, err := New(cfg, st, mk, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// startGen is the set-up of most generator tests: a fake clock, a fake store with rows (tag
// to step), and a generator on them with testConfig adjusted by adjust (when not nil) and
// fake marks.
func startGen(t *testing.T, rows map[string]int64, adjust func(*Config)) (*clock.Fake, *fakeStore, *Generator) {
	t.Helper()
	clk := newFakeClock()
	st := newFakeStore(rows)
	cfg := testConfig(clk)
	if adjust != nil {
		adjust(&cfg)
	}
	return clk, st, newTestGen(t, cfg, st, newFakeMarks())
}

// mustNext calls Next and fails the test on error.
func mustNext(t *testing.T, g *Generator, tag string) int64 {
	t.Helper()
	v, err := g.Next(tag)
	if err != nil {
		t.Fatalf("Next(%q): %v", tag, err)
	}
	return v
}

// waitFor polls cond (real time, testkit's poll loop) for up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, "waiting for "+what, cond)
}

// waitIdle waits until no load of tag runs.
func waitIdle(t *testing.T, g *Generator, tag string) Info {
	t.Helper()
	var in Info
	waitFor(t, "load of "+tag+" to end", func() bool {
		var err error
		in, err = g.Info(tag)
		return err == nil && !in.Loading
	})
	return in
}

// forceLoad runs one load of tag's buffer and waits for it; it returns the load's error.
func forceLoad(t *testing.T, g *Generator, tag string) error {
	t.Helper()
	b, err := g.buffer(tag)
	if err != nil {
		return err
	}
	b.mu.Lock()
	if b.loading {
		b.mu.Unlock()
		t.Fatalf("forceLoad(%q): a load is already running", tag)
	}
	b.next = nil
	g.startLoadLocked(b)
	done := b.done
	b.mu.Unlock()
	g.submit(b)
	<-done
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastErr
}
