package snowflake

import (
	"testing"
	"time"
)

// TestRestartWithChangedLayoutDoesNotReissue (adversarial review of issue #7): the data dir's
// time bound is kept in Unix milliseconds, but an ID encodes milliseconds since the epoch with
// the layout's shifts. A restart of the same data dir with --snowflake-epoch moved forward by D
// (or other --snowflake-bits) issues the IDs of D ms ago again. The restart must either refuse
// (naming the options) or issue only above every ID of the earlier run.
//
// It fails on the code as reviewed: the second run reissues the first run's IDs one for one.
func TestRestartWithChangedLayoutDoesNotReissue(t *testing.T) {
	dir := t.TempDir()
	c := newFakeClock(ms2024)
	run := func(epochMs int64, n int) ([]int64, error) {
		src, err := NewFileSource(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(c)
		cfg.Layout = Layout{Epoch: time.UnixMilli(epochMs)}
		g, err := New(cfg, src, nil)
		if err != nil {
			return nil, err // a refusal is a correct answer
		}
		defer g.Close()
		waitReady(t, g)
		var ids []int64
		for range n {
			ids = append(ids, mustNext(t, g))
			c.Add(time.Millisecond)
		}
		return ids, nil
	}
	first, err := run(DefaultEpochMs, 50)
	if err != nil {
		t.Fatal(err)
	}
	c.Add(time.Second)
	// The epoch moved forward by the time that passed since the first run began.
	second, err := run(DefaultEpochMs+c.Now().UnixMilli()-ms2024, 50)
	if err != nil {
		t.Logf("restart with another epoch refused: %v", err)
		return
	}
	seen := make(map[int64]bool, len(first))
	for _, id := range first {
		seen[id] = true
	}
	dups := 0
	for _, id := range second {
		if seen[id] {
			dups++
		}
	}
	if dups > 0 || second[0] <= first[len(first)-1] {
		t.Fatalf("restart with the epoch moved forward by the time since the first run: %d of %d IDs reissued; first new ID %d, last old ID %d",
			dups, len(second), second[0], first[len(first)-1])
	}
}
