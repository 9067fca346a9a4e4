package segment

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/leafd/leafd/internal/testenv"
)

// storeKind opens a store and a marks file that survive a "restart" (a new Generator on the
// same store, marks file reopened).
type storeKind struct {
	name string
	open func(t *testing.T) (Store, func() *MarkFile)
}

func storeKinds() []storeKind {
	marksOpener := func(t *testing.T, dir string) func() *MarkFile {
		return func() *MarkFile {
			mk, err := OpenMarkFile(filepath.Join(dir, "marks.db"))
			if err != nil {
				t.Fatal(err)
			}
			return mk
		}
	}
	return []storeKind{
		{"embedded", func(t *testing.T) (Store, func() *MarkFile) {
			dir := t.TempDir()
			st := openTestBolt(t, filepath.Join(dir, "leafd.db"))
			return st, marksOpener(t, dir)
		}},
		{"mariadb", func(t *testing.T) (Store, func() *MarkFile) {
			dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
			return openTestMySQL(t, dsn, nil), marksOpener(t, t.TempDir())
		}},
	}
}

// After a restart, on both stores: the instance is ready at once with no traffic (not once
// every stored tag has been requested), the warm start loads the first segment of the tags
// it served before, and the first requests then wait for no load.
func TestReadyAndWarmAfterRestart(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			st, openMarks := k.open(t)
			ctx := context.Background()
			cfg := Config{AutoCreate: true, WaitTimeout: 5 * time.Second}
			tags := []string{"t1", "t2", "t3", "t4", "t5"}
			for i := range 20 { // tags in the store this instance never served
				if err := st.Create(ctx, Tag{Name: fmt.Sprintf("other%02d", i), Step: 100}); err != nil {
					t.Fatal(err)
				}
			}
			mk := openMarks()
			g, err := New(cfg, st, mk, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			last := map[string]int64{}
			for _, tag := range tags {
				last[tag] = mustNext(t, g, tag)
			}
			_ = g.Close()
			_ = mk.Close()

			start := time.Now()
			mk = openMarks()
			defer mk.Close()
			g, err = New(cfg, st, mk, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if h := g.Health(); !h.Ready() {
				t.Fatalf("right after start: got %+v, want ready (the store answers)", h)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("ready after %v, want within 2s", d)
			}
			select {
			case <-g.WarmDone():
			case <-time.After(30 * time.Second):
				t.Fatal("warm start did not end within 30s")
			}
			if s := g.Stats(); s.WarmLoads != int64(len(tags)) || s.Tags != len(tags) {
				t.Fatalf("got %d warm loads, %d tags held; want %d, %d (only the tags served before)",
					s.WarmLoads, s.Tags, len(tags), len(tags))
			}
			for _, tag := range tags {
				if v := mustNext(t, g, tag); v <= last[tag] {
					t.Fatalf("%s: got %d after a restart, want above %d", tag, v, last[tag])
				}
			}
			if s := g.Stats(); s.Waits != 0 {
				t.Fatalf("got %d requests that waited for a load after the warm restart, want 0", s.Waits)
			}
		})
	}
}

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
	dir := t.TempDir()
	mk, err := OpenMarkFile(filepath.Join(dir, "marks.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer mk.Close()
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
