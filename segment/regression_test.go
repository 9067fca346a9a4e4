package segment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// readerStore is a fakeStore that can also read max_id without allocating, like MySQLStore.
type readerStore struct{ *fakeStore }

func (s readerStore) MaxID(ctx context.Context, tag string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.maxIDErr != nil {
		return 0, s.maxIDErr
	}
	r := s.rows[tag]
	if r == nil {
		return 0, fmt.Errorf("fake: %w", ErrUnknownTag)
	}
	return r.maxID, nil
}

// After a regression the generator must not keep allocating: each refused Allocate advances
// max_id by a step, so retries would bring the table back to this instance's mark by
// themselves and then lease ranges other instances were granted before the failover.
func TestRegressionRetriesDoNotAllocate(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeStore(map[string]int64{"a": 100})
	st := readerStore{fs}
	cfg := testConfig(clk)
	cfg.MaxStep = 100
	g := newTestGen(t, cfg, st, newFakeMarks())
	for range 11 {
		mustNext(t, g, "a")
	}
	waitIdle(t, g, "a") // mark 201
	fs.set(func(s *fakeStore) { s.rows["a"].maxID -= 150 })
	for {
		_, err := g.Next("a")
		if errors.Is(err, ErrRegression) {
			break
		}
		if err != nil {
			t.Fatalf("got %v, want IDs then ErrRegression", err)
		}
	}
	allocs := fs.allocCount()
	for i := range 30 { // without the check, two retries would walk max_id past the mark
		clk.Add(time.Second)
		if v, err := g.Next("a"); !errors.Is(err, ErrRegression) {
			t.Fatalf("retry %d: got %d, %v; want ErrRegression while max_id is below the mark", i, v, err)
		}
	}
	if got := fs.allocCount(); got != allocs {
		t.Fatalf("got %d Allocate calls during the retries, want 0", got-allocs)
	}
	fs.set(func(s *fakeStore) { s.rows["a"].maxID = 1000 })
	clk.Add(time.Second)
	if got := mustNext(t, g, "a"); got != 1000 {
		t.Fatalf("got %d after max_id was raised to 1000, want 1000", got)
	}
}

// A buffer dropped by a tag refresh can still be asked to load by requests that hold it,
// while its replacement serves the tag. It must never lease (nor publish) again: its range
// would lie above the replacement's and break the per-tag order, and after a store regression
// it could accept the range its replacement already serves.
func TestDroppedBufferNeverLoads(t *testing.T) {
	_, st, g := startGen(t, map[string]int64{"a": 100}, func(cfg *Config) {
		cfg.MaxStep = 100
	})
	old, err := g.buffer("a")
	if err != nil {
		t.Fatal(err)
	}
	mustNext(t, g, "a") // old serves [1, 101)
	waitIdle(t, g, "a")
	g.drop(old) // as a refresh that did not list the tag
	if got := mustNext(t, g, "a"); got != 101 {
		t.Fatalf("replacement buffer: got %d, want 101", got)
	}
	st.set(func(s *fakeStore) { s.lower["a"] = 100 }) // the store forgets [101, 201)
	allocs := st.allocCount()

	// A request still holding old loads its next segment.
	old.mu.Lock()
	g.startLoadLocked(old)
	done := old.done
	old.mu.Unlock()
	g.submit(old)
	<-done
	old.mu.Lock()
	next := old.next
	old.mu.Unlock()
	if next != nil {
		t.Fatalf("dropped buffer accepted [%d, %d)", next.start, next.end)
	}
	if got := st.allocCount(); got != allocs {
		t.Fatalf("dropped buffer leased %d ranges, want 0", got-allocs)
	}
	// A request that holds old and finds nothing in it looks the tag up again.
	var w waiter
	if _, err := g.advance(old, old.cur.Load(), &w, true); err != errStale {
		t.Fatalf("advance on a dropped buffer: got %v, want errStale", err)
	}
}

// TestTagExhaustedIsLimit: a tag whose store row reaches the largest ID leafd serves
// (maxRangeEnd, 2^62-1) is refused with LIMIT, saying so, not UNAVAILABLE "store unreachable
// or slow" (the store answered; retrying cannot help). Nothing beyond the bound is served.
func TestTagExhaustedIsLimit(t *testing.T) {
	st := newFakeStore(map[string]int64{"full": 10})
	st.rows["full"].maxID = maxRangeEnd - 15
	g := newTestGen(t, testConfig(newFakeClock()), st, newFakeMarks())
	for range 10 {
		if v := mustNext(t, g, "full"); v >= maxRangeEnd {
			t.Fatalf("served %d, at or above the bound %d", v, maxRangeEnd)
		}
	}
	_, err := g.Next("full")
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "largest ID") {
		t.Fatalf("Next past the largest ID: %v, want ErrLimit saying the tag is exhausted", err)
	}
}
