package handlers

import "testing"

// TestMayBlockSegmentWaits: INCR, INCRBY and IDS.SEGMENT of a tag with no segment in memory
// (they would wait for a load) run off the event loop; once the tag's segment holds the
// values they need they run on it. Fails when MayBlock ignores the segment's state (the loop
// would then stall its other connections until the watchdog, 10-20 ms per waiting request).
func TestMayBlockSegmentWaits(t *testing.T) {
	ts := startServer(t, serverOpts{autoCreate: true, noWarm: true})
	cmd := func(s ...string) [][]byte {
		a := make([][]byte, len(s))
		for i := range s {
			a[i] = []byte(s[i])
		}
		return a
	}
	for _, args := range [][][]byte{cmd("INCR", "cold"), cmd("incrby", "cold", "5"), cmd("IDS.SEGMENT", "cold"), cmd("ids.segment", "cold", "10")} {
		if !ts.h.MayBlock(args) {
			t.Errorf("%q on a tag not loaded: MayBlock false, want true", args)
		}
	}
	if _, err := ts.seg.Next("cold"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][][]byte{cmd("INCR", "cold"), cmd("INCRBY", "cold", "5"), cmd("IDS.SEGMENT", "cold"), cmd("IDS.SEGMENT", "cold", "10")} {
		if ts.h.MayBlock(args) {
			t.Errorf("%q with a segment in memory: MayBlock true, want false", args)
		}
	}
	// More than the segment holds (the default step is 1000) would wait for the next one.
	if !ts.h.MayBlock(cmd("INCRBY", "cold", "5000")) {
		t.Errorf("INCRBY past the segment: MayBlock false, want true")
	}
	// Malformed counts are answered by the command itself, on the loop.
	for _, args := range [][][]byte{cmd("INCRBY", "cold", "x"), cmd("INCRBY", "cold", "0"), cmd("IDS.SEGMENT", "cold", "-1"), cmd("GET", "cold")} {
		if ts.h.MayBlock(args) {
			t.Errorf("%q: MayBlock true, want false", args)
		}
	}
}
