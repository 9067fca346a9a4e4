package ids

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/shape"
)

// blockingPrefetch is a segment core whose Prefetch (the load of a next period's first
// segment) holds until its context ends, as a store that stopped answering would.
type blockingPrefetch struct {
	memSegments
	started chan string
	running atomic.Int64
}

func (b *blockingPrefetch) Prefetch(ctx context.Context, tag string) error {
	b.running.Add(1)
	defer b.running.Add(-1)
	b.started <- tag
	<-ctx.Done()
	return ctx.Err()
}

// TestCloseEndsPrefetch: a preparation of the next period that is stuck in the store is
// cancelled by Close, which returns only once its worker is gone; after Close no request
// starts another one, and requests still serve.
func TestCloseEndsPrefetch(t *testing.T) {
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	now := end.Add(-10 * time.Second) // within the default PeriodLead of the day's end
	seg := &blockingPrefetch{started: make(chan string, 1)}
	r := New(Config{Now: func() time.Time { return now }, CreateTimeout: time.Hour}, seg, zap.NewNop())
	s, err := shape.Compile("daily", shape.Spec{Format: "D{yyyyMMdd}{seq:6}", Reset: "day"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := r.shapes.add(s)
	for range 2 { // the first creates the day's row, the second starts the next day's
		if _, _, err := r.shapedCounter(e); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case row := <-seg.started:
		if row == "" {
			t.Fatal("prefetched an empty row name")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no preparation of the next period started")
	}
	closed := make(chan struct{})
	go func() { _ = r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the stuck preparation (its context is not the router's)")
	}
	if n := seg.running.Load(); n != 0 {
		t.Fatalf("%d preparations still running after Close", n)
	}
	if n := r.Prefetching(); n != 0 {
		t.Fatalf("Prefetching() = %d after Close, want 0", n)
	}
	e.ahead.Store(nil) // as if the period had not been prepared: a request would start it again
	if _, _, err := r.shapedCounter(e); err != nil {
		t.Fatal(err)
	}
	if r.Prefetching() != 0 || len(seg.started) != 0 {
		t.Fatal("a request after Close started a preparation")
	}
	if err := r.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
}
