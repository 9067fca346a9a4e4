package segment

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// The regressed state survives any other error: a failed max_id read (a timeout) must not
// make the next attempt lease again, or retries would walk max_id up to the mark and then
// lease ranges granted to other instances before the failover.
func TestRegressedStateSurvivesTransientError(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeStore(map[string]int64{"a": 100})
	st := readerStore{fs}
	cfg := testConfig(clk)
	cfg.MaxStep = 100
	g := newTestGen(t, cfg, st, newFakeMarks())
	mustNext(t, g, "a")
	forceLoad(t, g, "a") // mark 201
	g.Retire("a")        // the next request starts a new buffer of the tag
	fs.set(func(s *fakeStore) { s.rows["a"].maxID -= 150 })
	if _, err := g.Next("a"); !errors.Is(err, ErrRegression) {
		t.Fatalf("got %v, want ErrRegression", err)
	}
	allocs := fs.allocCount()
	fs.set(func(s *fakeStore) { s.maxIDErr = errors.New("i/o timeout") })
	clk.Add(time.Second)
	if _, err := g.Next("a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("with max_id unreadable: got %v, want ErrUnavailable", err)
	}
	fs.set(func(s *fakeStore) { s.maxIDErr = nil })
	for i := range 5 {
		clk.Add(time.Second)
		if v, err := g.Next("a"); !errors.Is(err, ErrRegression) {
			t.Fatalf("retry %d after the transient error: got %d, %v; want ErrRegression", i, v, err)
		}
	}
	if got := fs.allocCount(); got != allocs {
		t.Fatalf("got %d Allocate calls while regressed, want 0", got-allocs)
	}
	fs.set(func(s *fakeStore) { s.rows["a"].maxID = 201 }) // back at the mark
	clk.Add(time.Second)
	if got := mustNext(t, g, "a"); got != 201 {
		t.Fatalf("got %d once max_id is back at the mark, want 201", got)
	}
}

// A range is checked against the mark before it is published, and the mark is raised
// durably before publication: after a crash the restarted instance refuses the range.
func TestMarkRaisedBeforePublish(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10})
	mk := newFakeMarks()
	g := newTestGen(t, testConfig(clk), st, mk)
	mk.set(func(f *fakeMarks) { f.raiseErr = errors.New("disk full") })
	if _, err := g.Next("a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable when the mark cannot be raised", err)
	}
	mk.set(func(f *fakeMarks) { f.raiseErr = nil })
	clk.Add(time.Second)
	v := mustNext(t, g, "a")
	if m := mk.get("a"); m <= v {
		t.Fatalf("served %d with the durable mark at %d, want the mark above every served ID", v, m)
	}
}

// TestNotReadyWhenMarksFail: the store answers but the marks file refuses the raise, so no
// new segment can be used: /readyz's inputs say not ready (nothing held can serve), with the
// marks error; ready again once a raise succeeds.
func TestNotReadyWhenMarksFail(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10})
	mk := newFakeMarks()
	g := newTestGen(t, testConfig(clk), st, mk)
	mk.set(func(f *fakeMarks) { f.raiseErr = errors.New("disk full") })
	if _, err := g.Next("a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable when the mark cannot be raised", err)
	}
	if h := g.Health(); h.Ready() || h.StoreOK || !strings.Contains(h.StoreError, "disk full") {
		t.Fatalf("marks file failing, nothing held: got %+v, want not ready with the marks error", h)
	}
	mk.set(func(f *fakeMarks) { f.raiseErr = nil })
	clk.Add(time.Second)
	mustNext(t, g, "a")
	if h := g.Health(); !h.Ready() || !h.StoreOK {
		t.Fatalf("marks file back: got %+v, want ready", h)
	}
}

// deletingStore deletes the row of the tag right after a lease (an operator's DELETE racing
// the load) and holds the load there until release is closed: the range is granted, its mark
// not yet raised.
type deletingStore struct {
	*fakeStore
	leased, release chan struct{}
}

func (s *deletingStore) Allocate(ctx context.Context, tag string, step int64) (Alloc, error) {
	a, err := s.fakeStore.Allocate(ctx, tag, step)
	if err == nil {
		s.set(func(f *fakeStore) { delete(f.rows, tag) })
		close(s.leased)
		<-s.release
	}
	return a, err
}

// TestCreateWaitsForRunningLoad: IDS.CREATE without START reads the mark under the tag's
// guard, so a load of the tag that leased [1, 11) just before the row was deleted has raised
// the mark to 11 first, and the re-created row starts at 11, not at 1.
func TestCreateWaitsForRunningLoad(t *testing.T) {
	st := &deletingStore{fakeStore: newFakeStore(map[string]int64{"a": 10}), leased: make(chan struct{}), release: make(chan struct{})}
	cfg := testConfig(newFakeClock())
	cfg.NoWarmStart = true
	g := newTestGen(t, cfg, st, newFakeMarks())
	loaded := make(chan error, 1)
	go func() { _, err := g.Next("a"); loaded <- err }()
	<-st.leased
	created := make(chan error, 1)
	go func() { created <- g.Create(context.Background(), Tag{Name: "a", Step: 10}) }()
	select {
	case err := <-created: // no guard: Create read the mark before the load raised it
		created <- err
	case <-time.After(200 * time.Millisecond): // waiting on the guard (or slow)
	}
	close(st.release)
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	var start int64
	st.set(func(f *fakeStore) { start = f.rows["a"].maxID })
	if start < 11 {
		t.Fatalf("re-created row starts at %d, below the range [1, 11) the running load leased", start)
	}
}
