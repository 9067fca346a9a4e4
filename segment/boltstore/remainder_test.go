package boltstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/leafd/leafd/segment"
)

// remDir is one embedded data dir (leafd.db, marks.db paired, remainder.json) for the
// remainder tests; open and close it like a start and a stop of leafd.
type remDir struct {
	dir string
	st  *BoltStore
	mk  *MarkFile
}

func (d *remDir) path() string { return filepath.Join(d.dir, "remainder.json") }

func openRemDir(t *testing.T, dir string) *remDir {
	t.Helper()
	st, err := OpenBolt(filepath.Join(dir, "leafd.db"), BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, serr := os.Stat(filepath.Join(dir, "marks.db"))
	mk, err := OpenMarkFile(filepath.Join(dir, "marks.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PairMarks(st, mk, serr == nil, false); err != nil {
		t.Fatal(err)
	}
	d := &remDir{dir: dir, st: st, mk: mk}
	t.Cleanup(d.close)
	return d
}

func (d *remDir) close() { _ = d.mk.Close(); _ = d.st.Close() }

func remConfig(d *remDir) segment.Config {
	cfg := testConfig(newFakeClock())
	cfg.RemainderFile = d.path()
	cfg.NoWarmStart = true
	return cfg
}

// remGen starts a generator on d with store st (d.st or a wrapper) and marks mk.
func remGen(t *testing.T, d *remDir, st segment.Store, mk segment.Marks) *segment.Generator {
	t.Helper()
	g, err := segment.New(remConfig(d), st, mk, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// firstLife creates tag "a" (step 100) in a new data dir, takes 15 IDs (1..15, past the
// preload threshold, so a next segment is loaded: [101, 301), the dynamic step doubled) and
// saves the remainder: the file holds [16, 101) and [101, 301), 285 IDs.
func firstLife(t *testing.T) *remDir {
	t.Helper()
	d := openRemDir(t, t.TempDir())
	if err := d.st.Create(context.Background(), segment.Tag{Name: "a", MaxID: 1, Step: 100}); err != nil {
		t.Fatal(err)
	}
	g := remGen(t, d, d.st, d.mk)
	for want := int64(1); want <= 15; want++ {
		if v := mustNext(t, g, "a"); v != want {
			t.Fatalf("first life: got %d, want %d", v, want)
		}
	}
	if in := waitIdle(t, g, "a"); !in.NextReady {
		t.Fatalf("first life: next segment not loaded: %+v", in)
	}
	rep, err := g.SaveRemainder(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tags != 1 || rep.IDs != 285 {
		t.Fatalf("saved %+v, want 1 tag and 285 IDs ([16, 101) and [101, 301))", rep)
	}
	if _, err := g.Next("a"); err == nil {
		t.Fatal("an ID was served after SaveRemainder")
	}
	d.close()
	return d
}

// TestRemainderResumesWithoutGap: the next start of the data dir serves 16, 17, ... through
// both saved ranges and on into a new lease, every integer once; the file is gone.
func TestRemainderResumesWithoutGap(t *testing.T) {
	d := openRemDir(t, firstLife(t).dir)
	g := remGen(t, d, d.st, d.mk)
	if _, err := os.Stat(d.path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the remainder file is still there after the resume: %v", err)
	}
	for want := int64(16); want <= 600; want++ {
		if v := mustNext(t, g, "a"); v != want {
			t.Fatalf("got %d, want %d (no gap, no repeat)", v, want)
		}
	}
	if st := g.Stats(); st.RemainderResumed != 285 || st.RemainderDiscarded != 0 {
		t.Fatalf("stats: resumed %d, discarded %d; want 285, 0", st.RemainderResumed, st.RemainderDiscarded)
	}
}

// remStore wraps the embedded store to inject what the fences must catch.
type remStore struct {
	*BoltStore
	consumeErr error            // ConsumeRemainder fails with it (nothing recorded)
	lower      map[string]int64 // Rows reports max_id lowered to this
}

func (s *remStore) ConsumeRemainder(ctx context.Context, token string) error {
	if s.consumeErr != nil {
		return s.consumeErr
	}
	return s.BoltStore.ConsumeRemainder(ctx, token)
}

func (s *remStore) Rows(ctx context.Context) ([]segment.Tag, error) {
	rows, err := s.BoltStore.Rows(ctx)
	for i := range rows {
		if v, ok := s.lower[rows[i].Name]; ok {
			rows[i].MaxID = v
		}
	}
	return rows, err
}

// remMarks lowers marks (a marks.db restored from before the ranges).
type remMarks struct {
	*MarkFile
	lower map[string]int64
}

func (m *remMarks) Mark(tag string) (int64, error) {
	if v, ok := m.lower[tag]; ok {
		return v, nil
	}
	return m.MarkFile.Mark(tag)
}

// TestRemainderConsumedBeforeServe (fence: consume before serve). A start that cannot
// record the consumption in the store publishes nothing of the file and keeps it; the start
// after it resumes at 16. A copy of the file put back after that (a restored data dir, or a
// kill -9 before the removal) is refused: its token is consumed in leafd.db, and the IDs
// 16.. are not served twice.
func TestRemainderConsumedBeforeServe(t *testing.T) {
	d := openRemDir(t, firstLife(t).dir)
	copyOf, err := os.ReadFile(d.path())
	if err != nil {
		t.Fatal(err)
	}
	g := remGen(t, d, &remStore{BoltStore: d.st, consumeErr: errors.New("store down")}, d.mk)
	if g.Serves("a", 1) || g.Stats().RemainderResumed != 0 {
		t.Fatal("with the consumption not recorded, the file's ranges were published")
	}
	if _, err := os.Stat(d.path()); err != nil {
		t.Fatalf("the unconsumed file was not kept: %v", err)
	}
	_ = g.Close()
	d.close()

	d = openRemDir(t, d.dir)
	g = remGen(t, d, d.st, d.mk)
	if v := mustNext(t, g, "a"); v != 16 {
		t.Fatalf("second start: first ID %d, want 16 (the kept file)", v)
	}
	_ = g.Close() // no SaveRemainder: a kill -9
	d.close()

	if err := os.WriteFile(d.path(), copyOf, 0o600); err != nil {
		t.Fatal(err)
	}
	d = openRemDir(t, d.dir)
	granted, err := d.st.MaxID(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	g = remGen(t, d, d.st, d.mk)
	if v := mustNext(t, g, "a"); v < granted {
		t.Fatalf("restored file: first ID %d, want above every range granted (%d)", v, granted)
	}
	if st := g.Stats(); st.RemainderResumed != 0 || st.RemainderDiscarded != 285 {
		t.Fatalf("restored file: resumed %d, discarded %d; want 0, 285", st.RemainderResumed, st.RemainderDiscarded)
	}
	if _, err := os.Stat(d.path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused file was not removed: %v", err)
	}
}

// TestRemainderNotBelowLaterLeases (the marks check, the other way): a start that could not
// consume the file but then leased and served the tag (301) moved the mark above the file's
// end; the next start discards the file instead of serving 16.. below IDs already issued.
func TestRemainderNotBelowLaterLeases(t *testing.T) {
	d := openRemDir(t, firstLife(t).dir)
	g := remGen(t, d, &remStore{BoltStore: d.st, consumeErr: errors.New("store down")}, d.mk)
	if v := mustNext(t, g, "a"); v != 301 {
		t.Fatalf("with the consumption not recorded: first ID %d, want 301 (a new lease)", v)
	}
	_ = g.Close()
	d.close()
	d = openRemDir(t, d.dir)
	g = remGen(t, d, d.st, d.mk)
	if v := mustNext(t, g, "a"); v <= 301 {
		t.Fatalf("next start: first ID %d, want above 301 (already issued)", v)
	}
	if st := g.Stats(); st.RemainderResumed != 0 || st.RemainderDiscarded != 285 {
		t.Fatalf("resumed %d, discarded %d; want 0, 285", st.RemainderResumed, st.RemainderDiscarded)
	}
}

// TestRemainderStoreCheck (fence: the store and marks check). A range that ends above the
// store's max_id (a failover to a replica behind it, a restored leafd.db) or above the
// instance's mark (a restored marks.db) is discarded and counted, never served.
func TestRemainderStoreCheck(t *testing.T) {
	for _, tc := range []struct {
		name       string
		storeLower map[string]int64
		markLower  map[string]int64
	}{
		{"max_id below the end", map[string]int64{"a": 101}, nil},
		{"mark below the end", nil, map[string]int64{"a": 101}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := openRemDir(t, firstLife(t).dir)
			g := remGen(t, d, &remStore{BoltStore: d.st, lower: tc.storeLower}, &remMarks{MarkFile: d.mk, lower: tc.markLower})
			if st := g.Stats(); st.RemainderResumed != 0 || st.RemainderDiscarded != 285 {
				t.Fatalf("resumed %d, discarded %d; want 0, 285", st.RemainderResumed, st.RemainderDiscarded)
			}
			if g.Serves("a", 1) {
				t.Fatal("the tag holds a segment from the refused file")
			}
			if _, err := os.Stat(d.path()); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the refused file was not removed: %v", err)
			}
		})
	}
}

// TestRemainderIdentity (fence: the binding to the store). The file of one data dir put
// beside another store (another pairing id) is discarded, though its tag and ranges would
// pass the store check there.
func TestRemainderIdentity(t *testing.T) {
	src := firstLife(t)
	other := openRemDir(t, t.TempDir())
	ctx := context.Background()
	if err := other.st.Create(ctx, segment.Tag{Name: "a", MaxID: 1, Step: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.st.Allocate(ctx, "a", 0); err != nil { // max_id 1001
		t.Fatal(err)
	}
	if err := other.mk.Raise("a", 1001); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(src.path())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other.path(), data, 0o600); err != nil {
		t.Fatal(err)
	}
	g := remGen(t, other, other.st, other.mk)
	if st := g.Stats(); st.RemainderResumed != 0 || st.RemainderDiscarded != 285 {
		t.Fatalf("resumed %d, discarded %d; want 0, 285", st.RemainderResumed, st.RemainderDiscarded)
	}
	if g.Serves("a", 1) {
		t.Fatal("the tag holds a segment from another store's file")
	}
}

// TestRemainderSaveCutsExactly: takers racing SaveRemainder never get an ID that the file
// also holds (the cursor is cut with one atomic swap), and every ID below the cut was taken.
func TestRemainderSaveCutsExactly(t *testing.T) {
	for range 20 {
		d := openRemDir(t, t.TempDir())
		if err := d.st.Create(context.Background(), segment.Tag{Name: "a", MaxID: 1, Step: 100000}); err != nil {
			t.Fatal(err)
		}
		g := remGen(t, d, d.st, d.mk)
		mustNext(t, g, "a")
		var wg sync.WaitGroup
		got := make([][]int64, 4)
		start := make(chan struct{})
		for i := range got {
			wg.Go(func() {
				<-start
				for {
					v, err := g.Next("a")
					if err != nil {
						return
					}
					got[i] = append(got[i], v)
				}
			})
		}
		close(start)
		for g.Stats().IDs < 2000 {
			runtime.Gosched()
		}
		if _, err := g.SaveRemainder(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		d.close()
		d = openRemDir(t, d.dir)
		g2 := remGen(t, d, d.st, d.mk)
		seen := map[int64]bool{1: true}
		for _, ids := range got {
			for _, v := range ids {
				if seen[v] {
					t.Fatalf("ID %d issued twice", v)
				}
				seen[v] = true
			}
		}
		first := mustNext(t, g2, "a")
		if seen[first] {
			t.Fatalf("the remainder starts at %d, an ID already issued", first)
		}
		for v := int64(1); v < first; v++ {
			if !seen[v] {
				t.Fatalf("ID %d below the cut %d was neither issued nor saved", v, first)
			}
		}
		_ = g2.Close()
		d.close()
	}
}

// TestRemainderCorruptFile: an unreadable file is discarded (removed), the start goes on.
func TestRemainderCorruptFile(t *testing.T) {
	d := openRemDir(t, firstLife(t).dir)
	if err := os.WriteFile(d.path(), []byte(`{"version":1,"store":"x","tok`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := remGen(t, d, d.st, d.mk)
	if v := mustNext(t, g, "a"); v != 301 {
		t.Fatalf("first ID %d, want 301", v)
	}
	if _, err := os.Stat(d.path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the corrupt file was not removed: %v", err)
	}
}

// TestRemainderOfOrderedTagDiscarded (fence: an ordered tag's remainder is not resumed). A
// tag the store lists as ORDERED is served only by its leader's new term from a fresh range:
// resuming its remainder as an ordinary tag could issue IDs below IDs its leader issued
// meanwhile. When the list cannot be read the file is kept, nothing of it served.
func TestRemainderOfOrderedTagDiscarded(t *testing.T) {
	d := openRemDir(t, firstLife(t).dir)
	cfg := remConfig(d)
	cfg.Ordered = func(context.Context) ([]string, error) { return nil, errors.New("db down") }
	g, err := segment.New(cfg, d.st, d.mk, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); st.RemainderResumed != 0 {
		t.Fatalf("resumed %d IDs while the ordered tags could not be listed", st.RemainderResumed)
	}
	if _, err := os.Stat(d.path()); err != nil {
		t.Fatalf("the remainder file was not kept when the list failed: %v", err)
	}
	_ = g.Close()

	cfg.Ordered = func(context.Context) ([]string, error) { return []string{"a"}, nil }
	g, err = segment.New(cfg, d.st, d.mk, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Close() }()
	if st := g.Stats(); st.RemainderResumed != 0 || st.RemainderDiscarded != 285 {
		t.Fatalf("stats: resumed %d, discarded %d; want 0, 285 (an ordered tag's remainder)",
			st.RemainderResumed, st.RemainderDiscarded)
	}
	if v := mustNext(t, g, "a"); v <= 300 {
		t.Fatalf("ordered tag served %d from its old remainder, want a fresh range above 300", v)
	}
}
