package snowflake

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
)

func TestJSLayoutValidate(t *testing.T) {
	for _, tc := range []struct {
		l  Layout
		ok bool
	}{
		{JSLayout(), true},
		{Layout{TimeBits: 41, WorkerBits: 3, SeqBits: 9}, true},
		{Layout{TimeBits: 40, WorkerBits: 4, SeqBits: 8}, true},   // 52
		{Layout{TimeBits: 41, WorkerBits: 10, SeqBits: 12}, true}, // 63
		{Layout{TimeBits: 41, WorkerBits: 3, SeqBits: 10}, false}, // 54: neither 63 nor JS-safe
		{Layout{TimeBits: 41, WorkerBits: 10, SeqBits: 11}, false},
	} {
		if err := tc.l.Validate(); (err == nil) != tc.ok {
			t.Errorf("%d/%d/%d: got %v, want ok=%v", tc.l.TimeBits, tc.l.WorkerBits, tc.l.SeqBits, err, tc.ok)
		}
	}
}

// Every ID of the JavaScript-safe layout, up to its very last, is below 2^53 and survives a
// round trip through a float64 (what JavaScript's Number is); golden IDs from a fake clock.
func TestJSLayoutIDs(t *testing.T) {
	l := JSLayout()
	last := (int64(1)<<41-1)<<12 | 7<<9 | 511
	if last != 1<<53-1 || int64(float64(last)) != last {
		t.Fatalf("the layout's largest ID %d is not 2^53-1 or not exact as a float64", last)
	}
	c := clock.NewFakeMs(ms2024)
	cfg := testConfig(c)
	cfg.Layout = l
	g := newGen(t, cfg, &fakeSource{w: Worker{ID: 5}})
	d := ms2024 - DefaultEpochMs
	for i := range int64(3) {
		want := d<<12 | 5<<9 | i
		if got := mustNext(t, g); got != want || got >= 1<<53 || int64(float64(got)) != got {
			t.Fatalf("ID %d: got %d, want %d (below 2^53, exact as a float64)", i, got, want)
		}
	}
	// The layout lasts: 41 bits of milliseconds from Leaf's epoch end in 2080.
	if y := l.MaxTime().Year(); y != 2080 {
		t.Fatalf("the JS layout ends in %d, want 2080", y)
	}
	// A worker id the layout cannot hold is refused at start (8 workers: 0-7).
	if _, err := New(cfg, &fakeSource{w: Worker{ID: 8}}, nil); err == nil {
		t.Fatal("worker 8 in a 3-bit worker field: want an error")
	}
}

func TestFriendly(t *testing.T) {
	for _, l := range []Layout{DefaultLayout(), JSLayout()} {
		at := time.Date(2026, 12, 1, 15, 24, 15, 876e6, time.UTC)
		id := (at.UnixMilli()-l.EpochMs())<<(l.WorkerBits+l.SeqBits) | 5<<l.SeqBits | 16
		got := string(l.AppendFriendly(nil, id))
		if got != "20261201152415876-5-16" {
			t.Fatalf("%d/%d/%d: friendly %s, want 20261201152415876-5-16", l.TimeBits, l.WorkerBits, l.SeqBits, got)
		}
		back, err := l.ParseFriendly(got)
		if err != nil || back != id {
			t.Fatalf("ParseFriendly(%s) = %d, %v; want %d", got, back, err, id)
		}
		for _, bad := range []string{"20261201152415876-5", "2026120115241587-5-16", "20261301152415876-5-16",
			"20261201152415876-5-016", "20261201152415876-+5-16", "20261201152415876-5-99999", "19991201152415876-5-16",
			"2026120115241587x-5-16"} {
			if _, err := l.ParseFriendly(bad); !errors.Is(err, ErrFriendly) {
				t.Errorf("ParseFriendly(%q): got %v, want ErrFriendly", bad, err)
			}
		}
	}
	if _, err := JSLayout().ParseFriendly("20261201152415876-8-16"); err == nil {
		t.Error("worker 8 in the JS layout: want ErrFriendly")
	}
	l := DefaultLayout()
	buf := make([]byte, 0, 48)
	if a := testing.AllocsPerRun(100, func() { buf = l.AppendFriendly(buf[:0], 1741610183685066752) }); a != 0 {
		t.Fatalf("AppendFriendly: %.0f allocations", a)
	}
	if !strings.HasPrefix(string(buf), "2024") {
		t.Fatalf("friendly %s", buf)
	}
}
