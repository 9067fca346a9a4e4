package segment

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// Readiness follows the store, not the tags: down with nothing held is not ready; down with a
// held tag that still has IDs is ready; back up is ready again without any request.
func TestHealthFollowsStore(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10})
	st.set(func(s *fakeStore) { s.tagsErr = errors.New("db down"); s.fail = errors.New("db down") })
	tick := make(chan time.Time)
	cfg := testConfig(clk)
	cfg.Clock = tickAt{clk, storeProbe, tick}
	g := newTestGen(t, cfg, st, newFakeMarks())
	if h := g.Health(); h.Ready() || h.StoreError == "" {
		t.Fatalf("store down, nothing held: got %+v, want not ready with the error", h)
	}
	st.set(func(s *fakeStore) { s.tagsErr = nil; s.fail = nil })
	tick <- time.Time{} // the probe refresh runs
	waitFor(t, "readiness after the store is back", func() bool { return g.Health().Ready() })
	mustNext(t, g, "a")
	st.set(func(s *fakeStore) { s.fail = errors.New("db down") })
	b, _ := g.buffer("a")
	b.mu.Lock()
	g.startLoadLocked(b)
	done := b.done
	b.mu.Unlock()
	g.submit(b)
	<-done
	if h := g.Health(); h.StoreOK || h.Serving != 1 || !h.Ready() {
		t.Fatalf("store down, a held tag with IDs: got %+v, want ready, serving 1", h)
	}
}

// TestWarmAfterOutageStart: an instance started while the store does not answer warms the
// tags it served before as soon as a tag list succeeds (the store probe), not only when the
// store answers at start; and Close before the store ever answered still ends the warm start.
func TestWarmAfterOutageStart(t *testing.T) {
	mk := &recentMarks{fakeMarks: newFakeMarks()}
	tags := []string{"w1", "w2", "w3"}
	st := newFakeStore(map[string]int64{"w1": 10, "w2": 10, "w3": 10, "cold": 10})
	for _, tag := range tags {
		if err := mk.Raise(tag, 1); err != nil { // served by this instance before
			t.Fatal(err)
		}
	}
	st.set(func(s *fakeStore) { s.tagsErr = errors.New("db down"); s.fail = errors.New("db down") })
	tick := make(chan time.Time)
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.Clock = tickAt{clk, storeProbe, tick}
	g := newTestGen(t, cfg, st, mk)
	select {
	case <-g.WarmDone():
		t.Fatal("warm start ended while the store never answered")
	default:
	}
	st.set(func(s *fakeStore) { s.tagsErr = nil; s.fail = nil })
	tick <- time.Time{} // the probe refresh succeeds
	select {
	case <-g.WarmDone():
	case <-time.After(30 * time.Second):
		t.Fatal("warm start did not end within 30s of the store's return")
	}
	if s := g.Stats(); s.WarmLoads != int64(len(tags)) || s.Tags != len(tags) {
		t.Fatalf("after the store returned: %d warm loads, %d tags held; want %d, %d", s.WarmLoads, s.Tags, len(tags), len(tags))
	}

	// Closed before the store ever answered: WarmDone is closed all the same.
	st.set(func(s *fakeStore) { s.tagsErr = errors.New("db down") })
	g2, err := New(cfg, st, mk, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = g2.Close()
	select {
	case <-g2.WarmDone():
	default:
		t.Fatal("WarmDone still open after Close")
	}
}

// recentMarks is a fakeMarks that lists the tags raised, most recent first (RecentTags,
// as the marks file is): the tags a warm start loads.
type recentMarks struct {
	*fakeMarks
	mu     sync.Mutex
	recent []string
}

func (m *recentMarks) Raise(tag string, end int64) error {
	if err := m.fakeMarks.Raise(tag, end); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recent = append([]string{tag}, slices.DeleteFunc(m.recent, func(s string) bool { return s == tag })...)
	return nil
}

func (m *recentMarks) RecentTags(n int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.recent[:min(n, len(m.recent))]), nil
}
