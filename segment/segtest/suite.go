package segtest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/leafd/leafd/segment"
)

// MarksFile is the instance's marks as a store's tests open them: closed before a "restart"
// and opened again.
type MarksFile interface {
	segment.Marks
	Close() error
}

// Opener opens a fresh, empty store for one test, and a function that opens the instance's
// marks; each call of that function opens the same marks again (a restart). The store is
// closed by the opener's cleanup.
type Opener func(t *testing.T) (segment.Store, func() MarksFile)

// Run runs the conformance suite on the store open opens: what the generator relies on from
// every Store (docs/DESIGN.md, "The store interface"). Each store's tests call it.
func Run(t *testing.T, open Opener) {
	for _, c := range []struct {
		name string
		test func(t *testing.T, open Opener)
	}{
		{"AllocateLeasesConsecutiveRanges", allocateLeasesConsecutiveRanges},
		{"UnknownTag", unknownTag},
		{"CreateRefusesExisting", createRefusesExisting},
		{"ConcurrentAllocationsDisjoint", concurrentAllocationsDisjoint},
		{"LeaseFloor", floorAllocation},
		{"LeaseCreates", createAllocate},
		{"GeneratorAcrossRestarts", generatorAcrossRestarts},
		{"ReadyAndWarmAfterRestart", readyAndWarmAfterRestart},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, open) })
	}
}

// allocateLeasesConsecutiveRanges: Allocate leases [MaxID-step, MaxID), each range starting
// where the previous one ended, with the stored step or the one passed.
func allocateLeasesConsecutiveRanges(t *testing.T, open Opener) {
	st, _ := open(t)
	ctx := context.Background()
	if err := st.Create(ctx, segment.Tag{Name: "seq", MaxID: 5, Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := int64(5)
	for i, step := range []int64{0, 0, 25, 1, 0} {
		a, err := st.Allocate(ctx, "seq", step)
		if err != nil {
			t.Fatalf("Allocate #%d: %v", i, err)
		}
		size := step
		if size <= 0 {
			size = 10
		}
		if a.MaxID-size != want || a.Step != 10 {
			t.Fatalf("Allocate #%d (step %d): got range [%d, %d) stored step %d, want start %d, stored step 10",
				i, step, a.MaxID-size, a.MaxID, a.Step, want)
		}
		want = a.MaxID
	}
	tags, err := st.Tags(ctx)
	if err != nil || len(tags) != 1 || tags[0] != "seq" {
		t.Fatalf("Tags: got %v, %v; want [seq]", tags, err)
	}
}

// unknownTag: Allocate of a tag without a row is ErrUnknownTag.
func unknownTag(t *testing.T, open Opener) {
	st, _ := open(t)
	if _, err := st.Allocate(context.Background(), "nope", 0); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Allocate of a missing tag: got %v, want ErrUnknownTag", err)
	}
}

// createRefusesExisting: a second Create of a tag is ErrTagExists and leaves the row as it is.
func createRefusesExisting(t *testing.T, open Opener) {
	st, _ := open(t)
	ctx := context.Background()
	if err := st.Create(ctx, segment.Tag{Name: "dup", MaxID: 100, Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := st.Create(ctx, segment.Tag{Name: "dup", MaxID: 1, Step: 10}); !errors.Is(err, segment.ErrTagExists) {
		t.Fatalf("second Create: got %v, want ErrTagExists", err)
	}
	if a, err := st.Allocate(ctx, "dup", 0); err != nil || a.MaxID != 110 {
		t.Fatalf("Allocate after the refused Create: got %+v, %v; want max_id 110", a, err)
	}
}

// concurrentAllocationsDisjoint: concurrent Allocate calls lease disjoint ranges that together
// cover the IDs from the first one, without a hole.
func concurrentAllocationsDisjoint(t *testing.T, open Opener) {
	st, _ := open(t)
	ctx := context.Background()
	if err := st.Create(ctx, segment.Tag{Name: "conc", Step: 7}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	const workers, each = 8, 10
	var (
		mu     sync.Mutex
		starts []int64
		wg     sync.WaitGroup
	)
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range each {
				a, err := st.Allocate(ctx, "conc", 0)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				starts = append(starts, a.MaxID-7)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Allocate: %v", err)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	for i, s := range starts {
		if want := int64(1 + 7*i); s != want {
			t.Fatalf("range #%d starts at %d, want %d (ranges disjoint and without a hole)", i, s, want)
		}
	}
}

// lessor is the store's Lease: both stores implement segment.Lessor.
func lessor(t *testing.T, st segment.Store) segment.Lessor {
	t.Helper()
	l, ok := st.(segment.Lessor)
	if !ok {
		t.Fatalf("%T does not implement segment.Lessor", st)
	}
	return l
}

// floorAllocation: a Lease with a floor leases a range at or above it as Allocate does, and
// returns one below it without error, for the generator's regression check to refuse.
func floorAllocation(t *testing.T, open Opener) {
	st, _ := open(t)
	l := lessor(t, st)
	ctx := context.Background()
	if err := st.Create(ctx, segment.Tag{Name: "floor", Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	a, err := l.Lease(ctx, segment.LeaseRequest{Tag: "floor", Floor: 1})
	if err != nil || a.MaxID != 11 || a.Created {
		t.Fatalf("Lease at the floor: got %+v, %v; want max_id 11, not created", a, err)
	}
	a, err = l.Lease(ctx, segment.LeaseRequest{Tag: "floor", Floor: 1000})
	if err != nil || a.MaxID-10 >= 1000 {
		t.Fatalf("Lease below the floor: got %+v, %v; want a range below 1000 and no error", a, err)
	}
}

// createAllocate: a Lease that creates makes a missing tag and leases its first range, and
// leases an existing tag's next range without creating it.
func createAllocate(t *testing.T, open Opener) {
	st, _ := open(t)
	l := lessor(t, st)
	ctx := context.Background()
	row := segment.Tag{Name: "ca", MaxID: 1, Step: 10}
	a, err := l.Lease(ctx, segment.LeaseRequest{Tag: "ca", Create: &row})
	if err != nil || !a.Created || a.MaxID-10 < 1 {
		t.Fatalf("Lease creating a new tag: got %+v, %v; want a range from 1 up, created", a, err)
	}
	first := a.MaxID
	a, err = l.Lease(ctx, segment.LeaseRequest{Tag: "ca", Create: &row})
	if err != nil || a.Created || a.MaxID != first+10 {
		t.Fatalf("Lease creating an existing tag: got %+v, %v; want max_id %d, not created", a, err, first+10)
	}
	if _, err := l.Lease(ctx, segment.LeaseRequest{Tag: "missing"}); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("Lease of a missing tag without Create: got %v, want ErrUnknownTag", err)
	}
}

// generatorAcrossRestarts: a generator on the store serves strictly increasing IDs of a tag it
// creates on first use, and a new generator on the same store and marks serves above them.
func generatorAcrossRestarts(t *testing.T, open Opener) {
	st, openMarks := open(t)
	cfg := segment.Config{AutoCreate: true, WaitTimeout: 5 * time.Second}
	var last int64
	for life := range 3 {
		mk := openMarks()
		g, err := segment.New(cfg, st, mk, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			v := MustNext(t, g, "life")
			if v <= last {
				_ = g.Close()
				_ = mk.Close()
				t.Fatalf("life %d, ID #%d: got %d, want above %d", life, i, v, last)
			}
			last = v
		}
		if err := g.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		_ = mk.Close()
	}
}

// readyAndWarmAfterRestart: after a restart, the instance is ready at once with no traffic (not once
// every stored tag has been requested), the warm start loads the first segment of the tags
// it served before, and the first requests then wait for no load.
func readyAndWarmAfterRestart(t *testing.T, open Opener) {
	st, openMarks := open(t)
	ctx := context.Background()
	cfg := segment.Config{AutoCreate: true, WaitTimeout: 5 * time.Second}
	tags := []string{"t1", "t2", "t3", "t4", "t5"}
	for i := range 20 { // tags in the store this instance never served
		if err := st.Create(ctx, segment.Tag{Name: fmt.Sprintf("other%02d", i), Step: 100}); err != nil {
			t.Fatal(err)
		}
	}
	mk := openMarks()
	g, err := segment.New(cfg, st, mk, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	for _, tag := range tags {
		last[tag] = MustNext(t, g, tag)
	}
	_ = g.Close()
	_ = mk.Close()

	start := time.Now()
	mk = openMarks()
	defer mk.Close()
	g, err = segment.New(cfg, st, mk, zaptest.NewLogger(t))
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
		if v := MustNext(t, g, tag); v <= last[tag] {
			t.Fatalf("%s: got %d after a restart, want above %d", tag, v, last[tag])
		}
	}
	if s := g.Stats(); s.Waits != 0 {
		t.Fatalf("got %d requests that waited for a load after the warm restart, want 0", s.Waits)
	}
}
