package segment

import "testing"

// TestServes: Serves says whether values are in memory without taking any or starting a load:
// false for a tag not held, true for what the current segment holds, false past it and once
// it is used up.
func TestServes(t *testing.T) {
	clk := newFakeClock()
	fs := newFakeStore(map[string]int64{"t": 10})
	cfg := testConfig(clk)
	cfg.NoWarmStart = true
	cfg.PreloadRatio = 0.99 // no preload: the segment alone decides
	g := newTestGen(t, cfg, fs, newFakeMarks())
	if g.Serves("t", 1) {
		t.Fatal("Serves before the first load: true")
	}
	if len(fs.stepsSeen()) != 0 {
		t.Fatal("Serves started a load")
	}
	first := mustNext(t, g, "t") // loads [first, first+10)
	if !g.Serves("t", 9) || g.Serves("t", 10) || g.Serves("t", 0) {
		t.Fatalf("9 left: Serves(9) %v, Serves(10) %v, Serves(0) %v; want true, false, false", g.Serves("t", 9), g.Serves("t", 10), g.Serves("t", 0))
	}
	for i := 0; i < 9; i++ {
		if !g.Serves("t", 1) {
			t.Fatalf("after %d values: Serves false, want true", i+1)
		}
		if v := mustNext(t, g, "t"); v != first+int64(i)+1 {
			t.Fatalf("got %d, want %d (Serves must not take values)", v, first+int64(i)+1)
		}
	}
	if g.Serves("t", 1) {
		t.Fatal("segment used up: Serves true")
	}
}
