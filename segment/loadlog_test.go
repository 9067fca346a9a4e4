package segment

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
)

// slowStore advances the fake clock by d in every Allocate: a load that takes exactly d.
type slowStore struct {
	*fakeStore
	clk *clock.Fake
	d   time.Duration
}

func (s slowStore) Allocate(ctx context.Context, tag string, step int64) (Alloc, error) {
	s.clk.Add(s.d)
	return s.fakeStore.Allocate(ctx, tag, step)
}

// TestLoadRecords: each load is remembered with its start, latency and range (or error),
// newest first, and counted in the latency histogram; Info.Issued counts the tag's IDs.
func TestLoadRecords(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 10})
	g := newTestGen(t, testConfig(clk), slowStore{st, clk, 30 * time.Millisecond}, newFakeMarks())
	t0 := clk.Now()
	for range 3 {
		mustNext(t, g, "a")
	}
	in := waitIdle(t, g, "a")
	if in.Issued != 3 {
		t.Errorf("Issued: got %d, want 3", in.Issued)
	}
	if len(in.Loads) == 0 {
		t.Fatal("no load recorded")
	}
	if got, want := in.Loads[len(in.Loads)-1], (LoadRecord{At: t0, Duration: 30 * time.Millisecond, Start: 1, End: 11}); got != want {
		t.Errorf("first load: got %+v, want %+v", got, want)
	}
	n := len(in.Loads)

	boom := errors.New("store down")
	st.set(func(s *fakeStore) { s.fail = boom })
	if err := forceLoad(t, g, "a"); !errors.Is(err, boom) {
		t.Fatalf("forced load: got %v, want %v", err, boom)
	}
	in, _ = g.Info("a")
	if len(in.Loads) != n+1 || in.Loads[0].Error == "" || in.Loads[0].Start != 0 || in.Loads[0].Duration != 30*time.Millisecond {
		t.Errorf("after a failed load: got %+v, want it first with its error", in.Loads)
	}

	h := g.Stats().LoadSeconds
	if h.Count != uint64(n+1) || math.Abs(h.Sum-0.03*float64(n+1)) > 1e-9 {
		t.Errorf("histogram: got count %d sum %v, want %d loads of 30ms", h.Count, h.Sum, n+1)
	}
	for i, le := range LoadBuckets {
		want := uint64(0)
		if le >= 0.03 {
			want = uint64(n + 1)
		}
		if h.Counts[i] != want {
			t.Errorf("bucket le=%v: got %d, want %d", le, h.Counts[i], want)
		}
	}
}

func TestLoadLogKeepsNewest(t *testing.T) {
	var l loadLog
	for i := range loadLogSize + 3 {
		l.add(LoadRecord{Start: int64(i)})
	}
	got := l.list()
	if len(got) != loadLogSize || got[0].Start != loadLogSize+2 || got[loadLogSize-1].Start != 3 {
		t.Errorf("got %+v, want the %d newest, newest first", got, loadLogSize)
	}
}
