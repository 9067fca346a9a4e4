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

// TestNextHeldDropped: a Held whose buffer was dropped since ServesHeld found it (the tag
// retired, a replacement buffer loaded) is not taken from: NextHeld looks the tag up, and
// the value comes from the replacement, above every value of the dropped buffer.
func TestNextHeldDropped(t *testing.T) {
	g := newTestGen(t, testConfig(newFakeClock()), newFakeStore(map[string]int64{"a": 100, "b": 100}), newFakeMarks())
	first := mustNext(t, g, "a")
	held, ok := g.ServesHeld("a", 1)
	if !ok {
		t.Fatal("ServesHeld(a): not served after a successful Next")
	}
	if v, err := g.NextHeld(held, "a"); err != nil || v != first+1 {
		t.Fatalf("NextHeld of a live buffer: got %d, %v; want %d", v, err, first+1)
	}
	if _, err := g.NextHeld(held, "b"); err != nil {
		t.Fatal(err)
	}
	if v := mustNext(t, g, "a"); v != first+2 {
		t.Fatalf("NextHeld with another tag's name moved a's buffer: a's next is %d, want %d", v, first+2)
	}
	if !g.Retire("a") {
		t.Fatal("Retire(a): not held")
	}
	replacement := mustNext(t, g, "a") // a new buffer, leased above the old one's range
	if v, err := g.NextHeld(held, "a"); err != nil || v != replacement+1 {
		t.Fatalf("NextHeld of a dropped buffer: got %d, %v; want %d (from the replacement)", v, err, replacement+1)
	}
}
