package segment

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRefillNotBehindFirstLoads: a burst of 1,200 first loads of new tags, each stuck at the
// store, beside a held hot tag. The hot tag's refill is loaded at once (it never waits behind
// them), the first loads run on at most half the loaders, and the hot tag is then served
// without a wait. Fails when refills share the first loads' queue or when first loads may
// take every loader (the hot tag then goes without IDs while the burst loads).
func TestRefillNotBehindFirstLoads(t *testing.T) {
	clk := newFakeClock()
	rows := map[string]int64{"hot": 100}
	const burst = 1200
	for i := range burst {
		rows[fmt.Sprintf("new-%d", i)] = 10
	}
	st := newFakeStore(rows)
	block := make(chan struct{})
	st.set(func(s *fakeStore) {
		for i := range burst {
			s.hidden[fmt.Sprintf("new-%d", i)] = true
		}
		s.block = block
		s.blockIf = func(tag string) bool { return strings.HasPrefix(tag, "new-") }
	})
	cfg := testConfig(clk)
	cfg.NoWarmStart = true
	cfg.MaxLoaders, cfg.MaxPending = 8, 1024
	cfg.WaitTimeout, cfg.LoadTimeout = time.Minute, time.Minute
	g := newTestGen(t, cfg, st, newFakeMarks())
	mustNext(t, g, "hot") // held: its first segment [1, 101)

	var wg sync.WaitGroup
	t.Cleanup(func() { close(block); wg.Wait() })
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = g.Next(fmt.Sprintf("new-%d", i)) // waits, or is refused when the queue is full
		}()
	}
	waitFor(t, "the first loads queued", func() bool { return len(g.firsts) == cfg.MaxPending })
	waitFor(t, "the first-load loaders at the store", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.blockedIn == firstLoaders(cfg.MaxLoaders)
	})
	// Use the hot segment up to its end: its preload (the refill) starts on the way.
	for range 99 {
		mustNext(t, g, "hot")
	}
	waitFor(t, "the hot tag's refill published while 1,200 first loads wait", func() bool {
		in, err := g.Info("hot")
		return err == nil && in.NextReady
	})
	if v := mustNext(t, g, "hot"); v != 101 {
		t.Errorf("hot after its refill: %d, want 101", v)
	}
	st.mu.Lock()
	most := st.maxBlockedIn
	st.mu.Unlock()
	if most > firstLoaders(cfg.MaxLoaders) {
		t.Errorf("%d first loads ran at once, want at most %d of %d loaders", most, firstLoaders(cfg.MaxLoaders), cfg.MaxLoaders)
	}
	// A further new tag finds the first loads' queue full: it is told so, not "slow store".
	_, err := g.Next("new-late")
	var te *TagError
	if !errors.As(err, &te) || !errors.Is(err, ErrUnavailable) || !strings.Contains(te.Waited, "loader queue is full") {
		t.Errorf("a first load beyond the queue: %v (waited %q), want UNAVAILABLE saying the queue is full", err, waitedOf(err))
	}
}

func waitedOf(err error) string {
	var te *TagError
	if errors.As(err, &te) {
		return te.Waited
	}
	return ""
}

// TestUnavailableSaysWhatItWaited: a request whose wait ends says what it waited for: the
// store, when its load was running there, or a free loader, when its load never left the
// queue (not "store unreachable or slow" while the store answers and the load waits for a
// loader).
func TestUnavailableSaysWhatItWaited(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10, "b": 10})
	block := make(chan struct{})
	st.set(func(s *fakeStore) { s.block = block })
	cfg := testConfig(clk)
	cfg.NoWarmStart = true
	cfg.MaxLoaders = 2 // one of them runs first loads
	cfg.LoadTimeout = time.Minute
	g := newTestGen(t, cfg, st, newFakeMarks())
	errs := map[string]chan error{"a": make(chan error, 1), "b": make(chan error, 1)}
	for _, tag := range []string{"a", "b"} {
		go func() { _, err := g.Next(tag); errs[tag] <- err }()
		if tag == "a" {
			waitFor(t, "a at the store", func() bool { st.mu.Lock(); defer st.mu.Unlock(); return st.inFlight == 1 })
		}
	}
	waitFor(t, "b queued", func() bool { return len(g.firsts) == 1 })
	waitFor(t, "both waiting", func() bool { return g.Stats().Waits == 2 })
	clk.Add(cfg.WaitTimeout + cfg.LoadTimeout + time.Second)
	for tag, want := range map[string]string{"a": "for the store", "b": "for a free loader"} {
		err := <-errs[tag]
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(waitedOf(err), want) {
			t.Errorf("%s: %v (waited %q), want UNAVAILABLE that waited %s", tag, err, waitedOf(err), want)
		}
	}
	close(block)
}
