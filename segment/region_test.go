package segment

import (
	"context"
	"errors"
	"math"
	"testing"
)

func TestParseRegion(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Region
		bad      bool
	}{
		{name: "empty is single", in: "", want: Region{0, 1}},
		{name: "first of two", in: "0/2", want: Region{0, 2}},
		{name: "last of three", in: "2/3", want: Region{2, 3}},
		{name: "k equals n", in: "2/2", bad: true},
		{name: "negative", in: "-1/2", bad: true},
		{name: "zero regions", in: "0/0", bad: true},
		{name: "too many", in: "0/257", bad: true},
		{name: "no slash", in: "1", bad: true},
		{name: "junk", in: "a/b", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRegion(tc.in)
			if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
				t.Errorf("ParseRegion(%q) = %v, %v; want %v, bad %v", tc.in, got, err, tc.want, tc.bad)
			}
		})
	}
}

func TestRegionCounter(t *testing.T) {
	r := Region{1, 3}
	for id := int64(-2); id < 50; id++ {
		x := r.Counter(id)
		if r.ID(x) < id || (x > 0 && r.ID(x-1) >= id) {
			t.Fatalf("Counter(%d) = %d (ID %d): want the smallest counter whose ID is >= %d", id, x, r.ID(x), id)
		}
	}
	if got := r.ID(r.MaxCounter()); got < 0 || got <= math.MaxInt64-r.N {
		t.Errorf("ID(MaxCounter) = %d: want the largest ID of the region below MaxInt64", got)
	}
}

// TestRegionalIDs: every path that hands IDs out issues only the region's share, increasing.
func TestRegionalIDs(t *testing.T) {
	_, _, g := startGen(t, map[string]int64{"a": 10}, nil)
	rg := NewRegional(g, Region{1, 4})
	prev := int64(0)
	for range 25 {
		v, err := rg.Next("a")
		if err != nil {
			t.Fatal(err)
		}
		if v%4 != 1 || v <= prev {
			t.Fatalf("Next: got %d after %d, want increasing IDs ≡ 1 mod 4", v, prev)
		}
		prev = v
	}
	ids, err := rg.AppendIDs(nil, "a", 30)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range ids {
		if v%4 != 1 || v <= prev {
			t.Fatalf("AppendIDs: got %d after %d, want increasing IDs ≡ 1 mod 4", v, prev)
		}
		prev = v
	}
	if v, err := rg.NextN("a", 1); err != nil || v%4 != 1 || v <= prev {
		t.Errorf("NextN 1: got %d, %v; want the next ID ≡ 1 mod 4", v, err)
	}
	if _, err := rg.NextN("a", 2); !errors.Is(err, ErrLimit) {
		t.Errorf("NextN 2 in a region: got %v, want ErrLimit (a region's IDs are never contiguous)", err)
	}
}

// TestRegionalCreate: IDS.CREATE START is the first ID, taken as the region's first ID at or
// above it.
func TestRegionalCreate(t *testing.T) {
	_, _, g := startGen(t, nil, nil)
	rg := NewRegional(g, Region{1, 2})
	if err := rg.Create(context.Background(), Tag{Name: "b", MaxID: 1000, Step: 10}); err != nil {
		t.Fatal(err)
	}
	if v, err := rg.Next("b"); err != nil || v != 1001 {
		t.Errorf("first ID of START 1000 in region 1/2: got %d, %v; want 1001", v, err)
	}
}

func TestRegionalOverflow(t *testing.T) {
	rg := &Regional{R: Region{1, 2}, maxCtr: Region{1, 2}.MaxCounter()}
	if _, err := rg.id("a", rg.maxCtr+1); !errors.Is(err, ErrLimit) {
		t.Errorf("counter past MaxCounter: got %v, want ErrLimit, never a wrapped ID", err)
	}
	if v, err := rg.id("a", rg.maxCtr); err != nil || v < 0 {
		t.Errorf("counter MaxCounter: got %d, %v; want a positive ID", v, err)
	}
}

// BenchmarkRegionNext compares, in one run, INCR's path through the handlers' interface on the
// single region (the Generator itself) and on region 1/2 (Regional); AtomicAdd is the baseline.
func BenchmarkRegionNext(b *testing.B) {
	type nexter interface{ Next(string) (int64, error) }
	g, _ := benchGen(b)
	for _, tc := range []struct {
		name string
		n    nexter
	}{
		{"single", g},
		{"region 1/2", NewRegional(g, Region{1, 2})},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.n.Next("bench"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
