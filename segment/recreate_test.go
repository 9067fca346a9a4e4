package segment

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A tag retired and deleted from the store, then re-created by auto-create on its next
// request, starts at this instance's mark: it serves (no REGRESSION) and never reissues.
func TestAutoCreateAfterRetireStartsAtMark(t *testing.T) {
	fs := newFakeStore(nil)
	cfg := testConfig(newFakeClock())
	cfg.AutoCreate = true
	g := newTestGen(t, cfg, fs, newFakeMarks())
	var last int64
	for range 5 {
		last = mustNext(t, g, "a")
	}
	if !g.Retire("a") {
		t.Fatal("Retire(a): not held")
	}
	fs.set(func(s *fakeStore) { delete(s.rows, "a") })
	v, err := g.Next("a")
	if err != nil || v <= last {
		t.Fatalf("INCR a after retire, delete and auto-create: got %d, %v; want above %d", v, err, last)
	}
}

// Every call of the embedded store returns on its context's deadline, even while another
// transaction holds bbolt's writer lock (bbolt cannot cancel; the call stops waiting).
func TestBoltCallsHonourContext(t *testing.T) {
	st := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	if err := st.Create(t.Context(), Tag{Name: "a", Step: 10}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_ = st.db.Update(func(*bolt.Tx) error { close(held); <-release; return nil })
	}()
	<-held
	defer close(release)
	for name, call := range map[string]func(ctx context.Context) error{
		"Allocate":   func(ctx context.Context) error { _, err := st.Allocate(ctx, "a", 0); return err },
		"Create":     func(ctx context.Context) error { return st.Create(ctx, Tag{Name: "b", Step: 10}) },
		"RaiseMaxID": func(ctx context.Context) error { _, _, err := st.RaiseMaxID(ctx, "a", 100); return err },
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- call(ctx) }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s with the writer lock held: %v, want the deadline", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not return on its context's deadline", name)
		}
		cancel()
	}
}
