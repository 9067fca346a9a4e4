package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// TestSpansSplitTheRange: the head and the tail of a range are contiguous, disjoint and
// cover it exactly; the tail starts at the take that starts the next fetch (a tenth in).
func TestSpansSplitTheRange(t *testing.T) {
	tb := &Tag{name: "s"}
	for _, tc := range []struct {
		name     string
		lo, size int64
		head     int64 // the size of the head; 0: no head
	}{
		{"one ID", 5, 1, 0},
		{"below ten", 1, 9, 0},
		{"ten", 1, 10, 0},
		{"nineteen", 100, 19, 0},
		{"twenty", 100, 20, 1},
		{"forty", 1, 40, 3},
		{"a million", 7, 1_000_000, 99_999},
	} {
		s := tb.newSpans(tc.lo, tc.size)
		var parts []*span
		for p := s; p != nil; p = p.tail {
			parts = append(parts, p)
		}
		if tc.head == 0 {
			if len(parts) != 1 || (parts[0].base+1) != tc.lo || parts[0].size != tc.size {
				t.Errorf("%s: got %d parts, first [%d,+%d); want one [%d,+%d)", tc.name, len(parts), parts[0].base+1, parts[0].size, tc.lo, tc.size)
			}
			continue
		}
		if len(parts) != 2 {
			t.Fatalf("%s: got %d parts, want a head and a tail", tc.name, len(parts))
		}
		h, tl := parts[0], parts[1]
		if (h.base+1) != tc.lo || h.size != tc.head || (tl.base+1) != tc.lo+tc.head || (tl.base+1)+tl.size != tc.lo+tc.size || tl.tail != nil {
			t.Errorf("%s: got head [%d,+%d) tail [%d,+%d); want head [%d,+%d) then the rest of [%d,+%d)",
				tc.name, h.base+1, h.size, tl.base+1, tl.size, tc.lo, tc.head, tc.lo, tc.size)
		}
	}
}

// TestSpanCounterAlone: the counter every take writes shares no cache line with the fields a
// take reads, nor with the next object.
func TestSpanCounterAlone(t *testing.T) {
	var s span
	if off := unsafe.Offsetof(s.taken); off%cacheLine != 0 || off < unsafe.Offsetof(s.tail)+unsafe.Sizeof(s.tail) {
		t.Errorf("taken at offset %d, want a multiple of %d after the read fields", off, cacheLine)
	}
	if end := unsafe.Offsetof(s.taken) + cacheLine; unsafe.Sizeof(s) < end {
		t.Errorf("span is %d bytes, want at least %d (the counter's line to itself)", unsafe.Sizeof(s), end)
	}
}

// TestRangeTakenWhole: one goroutine takes every ID of every range, in order, none past a
// range's end: with one server the IDs are exactly 1..n.
func TestRangeTakenWhole(t *testing.T) {
	for _, size := range []int64{1, 9, 25, 40} {
		f := startFake(t)
		c := newClient(t, Options{Addrs: []string{f.addr}, MinBatch: size, MaxBatch: size})
		tg := c.Tag("w")
		for want := int64(1); want <= 10*size+3; want++ {
			var id int64
			var err error
			switch want % 3 { // the three ways in, over the same buffer
			case 0:
				id, err = c.Next(context.Background(), "w")
			case 1:
				id, err = tg.Next(context.Background())
			default:
				var ids []int64
				ids, err = tg.NextN(context.Background(), 1)
				if err == nil {
					id = ids[0]
				}
			}
			if err != nil || id != want {
				t.Fatalf("ranges of %d: take %d: got %d, %v; want %d", size, want, id, err, want)
			}
		}
	}
}

// TestSwitchRace: many goroutines wait at the start of a tag, are let go at once into a head
// of three IDs, and keep crossing the ends of ranges of 40 (head and tail switches, next
// ranges becoming current), by Next, Tag.Next and NextN. No ID is handed out twice, none
// lies outside a range the server granted, none is skipped, and each goroutine's IDs
// increase.
func TestSwitchRace(t *testing.T) {
	f := startFake(t)
	f.hold = make(chan struct{})
	c := newClient(t, Options{Addrs: []string{f.addr}, MinBatch: 40, MaxBatch: 40})
	tg := c.Tag("r")
	const goroutines, each = 32, 300
	got := make([][]int64, goroutines)
	var wg sync.WaitGroup
	ctx := context.Background()
	for g := range goroutines {
		wg.Go(func() {
			for len(got[g]) < each {
				var ids []int64
				var id int64
				var err error
				switch g % 3 {
				case 0:
					id, err = c.Next(ctx, "r")
					ids = []int64{id}
				case 1:
					id, err = tg.Next(ctx)
					ids = []int64{id}
				default:
					ids, err = c.NextN(ctx, "r", 3)
				}
				if err != nil {
					t.Error(err)
					return
				}
				got[g] = append(got[g], ids...)
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.waits.Load() < goroutines && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if w := c.waits.Load(); w < goroutines {
		t.Errorf("%d goroutines waited for the first range, want %d", w, goroutines)
	}
	f.mu.Lock()
	close(f.hold)
	f.mu.Unlock()
	wg.Wait()
	var all []int64
	for g, ids := range got {
		if !slices.IsSorted(ids) {
			t.Errorf("goroutine %d: IDs not increasing", g)
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	if d := len(all) - len(slices.Compact(slices.Clone(all))); d != 0 {
		t.Fatalf("%d duplicate IDs in %d", d, len(all))
	}
	if id, ok := inGranted(f, all); !ok {
		t.Fatalf("ID %d outside every range the server granted", id)
	}
	// A range becomes current only once the one before is used up, so one client of one
	// server skips nothing: the IDs are 1..n.
	if !slices.Equal(all, seq(1, int64(len(all)))) {
		t.Fatalf("IDs 1..%d: %d of them skipped", len(all), all[len(all)-1]-int64(len(all)))
	}
}

// TestTagHandle: Client.Tag returns one buffer per name, shared with Client.Next; a Tag of an
// ordered tag asks the server every time; a Tag answers CLOSED after Close.
func TestTagHandle(t *testing.T) {
	f := startFake(t)
	f.ordered["o"] = true
	c := newClient(t, Options{Addrs: []string{f.addr}, MinBatch: 10, MaxBatch: 10})
	ctx := context.Background()
	a, b := c.Tag("a"), c.Tag("a")
	if a != b || a.Name() != "a" {
		t.Fatalf("Tag(a) twice: got %p and %p named %q, want one buffer named a", a, b, a.Name())
	}
	var ids []int64
	for range 30 {
		id, err := a.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id2, err := c.Next(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id, id2)
	}
	if want := seq(1, 60); !slices.Equal(ids, want) {
		t.Fatalf("Tag.Next and Client.Next interleaved: got %v, want %v", ids, want)
	}
	o := c.Tag("o")
	for want := int64(1); want <= 3; want++ {
		if id, err := o.Next(ctx); err != nil || id != want {
			t.Fatalf("ordered Tag.Next: got %d, %v; want %d", id, err, want)
		}
	}
	if n := f.count("INCR"); n != 3 {
		t.Fatalf("INCR sent %d times for 3 Tag.Next of an ordered tag, want 3", n)
	}
	_ = c.Close()
	if id, err := a.Next(ctx); !errors.Is(err, ErrClosed) || id != 0 {
		t.Fatalf("Tag.Next after Close: got %d, %v; want 0, CLOSED", id, err)
	}
}

func seq(lo, hi int64) []int64 {
	var s []int64
	for v := lo; v <= hi; v++ {
		s = append(s, v)
	}
	return s
}
