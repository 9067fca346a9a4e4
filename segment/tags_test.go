package segment

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Refused commands have no side effect: a tag over MaxTags is neither held nor created in
// the store; an INCRBY that the first segment of a new tag cannot hold does not create it.
func TestRefusedTagHasNoSideEffect(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeStore(nil)
	st := readerStore{fs}
	cfg := testConfig(clk)
	cfg.AutoCreate = true
	cfg.MaxTags = 2
	g := newTestGen(t, cfg, st, newFakeMarks())
	if _, err := g.NextN("newtag", 99999999); !errors.Is(err, ErrLimit) {
		t.Fatalf("INCRBY newtag 99999999: got %v, want ErrLimit", err)
	}
	if fs.rows["newtag"] != nil || len(g.Tags()) != 0 {
		t.Fatalf("the refused INCRBY created the tag (rows %v, held %q)", fs.rows, g.Tags())
	}
	mustNext(t, g, "a")
	mustNext(t, g, "b")
	_, err := g.Next("c")
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "max 2") {
		t.Fatalf("third tag: got %v, want ErrLimit naming the maximum", err)
	}
	if err := g.Create(t.Context(), Tag{Name: "d"}); !errors.Is(err, ErrLimit) {
		t.Fatalf("Create over the limit: got %v, want ErrLimit", err)
	}
	fs.mu.Lock()
	c, d := fs.rows["c"] != nil, fs.rows["d"] != nil
	fs.mu.Unlock()
	if c || d {
		t.Fatalf("refused tags were created in the store (c %v, d %v)", c, d)
	}
	// Retiring a tag frees its place; a re-creation of it never reissues its IDs.
	last := mustNext(t, g, "a")
	if !g.Retire("a") {
		t.Fatal("Retire(a): not held")
	}
	mustNext(t, g, "c")
	g.Retire("c")
	fs.set(func(s *fakeStore) { delete(s.rows, "a") })
	if err := g.Create(t.Context(), Tag{Name: "a", MaxID: 1}); !errors.Is(err, ErrLimit) {
		t.Fatalf("re-create a with START 1 below its mark: got %v, want ErrLimit", err)
	}
	if err := g.Create(t.Context(), Tag{Name: "a"}); err != nil {
		t.Fatalf("re-create a: %v", err)
	}
	if v := mustNext(t, g, "a"); v <= last {
		t.Fatalf("re-created a: got %d, want above %d (issued before it was retired)", v, last)
	}
}

// A tag whose first load fails is not held: an outage does not fill MaxTags with names that
// never loaded, and a real tag is served once the store is back.
func TestFailedLoadsNotHeld(t *testing.T) {
	clk, st, g := startGen(t, map[string]int64{"real": 10}, func(cfg *Config) {
		cfg.MaxTags = 3
	})
	st.set(func(s *fakeStore) { s.fail = errors.New("db down") })
	for _, tag := range []string{"x1", "x2", "x3", "x4", "x5"} {
		if _, err := g.Next(tag); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: got %v, want ErrUnavailable", tag, err)
		}
	}
	if got := g.Tags(); len(got) != 0 {
		t.Fatalf("held after failed loads: %q, want none", got)
	}
	st.set(func(s *fakeStore) { s.fail = nil })
	clk.Add(time.Second)
	if got := mustNext(t, g, "real"); got != 1 {
		t.Fatalf("got %d, want 1", got)
	}
}

// INCRBY never abandons the rest of a segment and then refuses: with the rest too small and
// the next segment smaller than n, it answers ErrLimit and the rest stays usable.
func TestNextNChecksNextSegmentBeforeAbandoning(t *testing.T) {
	clk, st, g := startGen(t, map[string]int64{"a": 100}, func(cfg *Config) {
		cfg.MaxStep = 200
		cfg.PreloadRatio = 0.9
	})
	mustNext(t, g, "a") // [1, 101)
	forceLoad(t, g, "a")
	// The rest of [1, 101) holds 99; the next segment (step doubled, 200) holds 100.
	if got, err := g.NextN("a", 100); err != nil || got != 200 {
		t.Fatalf("NextN(100): got %d, %v; want 200 (from the next segment [101, 301))", got, err)
	}
	in, err := g.Info("a")
	if err != nil {
		t.Fatal(err)
	}
	if in.MaxCount < in.Current.Remaining {
		t.Fatalf("MaxCount %d below the remaining %d", in.MaxCount, in.Current.Remaining)
	}
	// Take IDs until fewer than 150 are left in the current segment.
	for in.Current.Remaining >= 150 {
		mustNext(t, g, "a")
		in, _ = g.Info("a")
	}
	// The next segment will be 100 IDs (the store's step shrinks the floor, the step halves).
	st.set(func(s *fakeStore) { s.rows["a"].step = 100 })
	clk.Add(time.Hour) // the segment lasted long: the step halves
	waitIdle(t, g, "a")
	in, _ = g.Info("a")
	before := in.Current
	nextSize := in.Next.End - in.Next.Start
	if !in.NextReady {
		if err := forceLoad(t, g, "a"); err != nil {
			t.Fatal(err)
		}
		in, _ = g.Info("a")
		nextSize = in.Next.End - in.Next.Start
	}
	n := max(before.Remaining, nextSize) + 1
	if _, err := g.NextN("a", n); !errors.Is(err, ErrLimit) {
		t.Fatalf("NextN(%d) with %d left and a next segment of %d: got %v, want ErrLimit", n, before.Remaining, nextSize, err)
	}
	after, _ := g.Info("a")
	if after.Current != before {
		t.Fatalf("the refused INCRBY changed the current segment: %+v, want %+v", after.Current, before)
	}
	if after.MaxCount != n-1 {
		t.Fatalf("MaxCount: got %d, want %d (the largest n INCRBY accepts now)", after.MaxCount, n-1)
	}
	if _, err := g.NextN("a", n-1); err != nil {
		t.Fatalf("NextN(MaxCount = %d): %v", n-1, err)
	}
}

// TestMaxTagsFirstLoadsInFlight: with MaxTags tags held only by first loads still in flight
// (a store that hangs), a new tag is refused with ErrUnavailable, not the permanent-sounding
// ErrLimit: those loads may fail and free the limit. Once they have failed, the new tag is
// held and served when the store is back.
func TestMaxTagsFirstLoadsInFlight(t *testing.T) {
	clk, st, g := startGen(t, map[string]int64{"x": 10, "y": 10, "z": 10}, func(cfg *Config) {
		cfg.MaxTags = 2
	})
	block, started := make(chan struct{}), make(chan string, 2)
	st.set(func(s *fakeStore) { s.block, s.started, s.fail = block, started, errors.New("db down") })
	errs := make(chan error, 2)
	for _, tag := range []string{"x", "y"} {
		go func() { _, err := g.Next(tag); errs <- err }()
	}
	<-started
	<-started
	_, err := g.Next("z")
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLimit) {
		t.Fatalf("limit reached by first loads in flight: got %v, want ErrUnavailable", err)
	}
	close(block)
	for range 2 {
		<-errs
	}
	st.set(func(s *fakeStore) { s.block, s.started, s.fail = nil, nil, nil })
	clk.Add(time.Second)
	if got := mustNext(t, g, "z"); got != 1 {
		t.Fatalf("z after the failed first loads: got %d, want 1", got)
	}
	// Held for real: the limit is a LIMIT again.
	mustNext(t, g, "x")
	if _, err := g.Next("y"); !errors.Is(err, ErrLimit) {
		t.Fatalf("two tags held and loaded: got %v, want ErrLimit", err)
	}
}
