package handlers

import (
	"context"
	"testing"
	"time"
)

// TestCounterRowRefused: a shaped tag's counter row (tag@period) is not served by INCR,
// INCRBY, IDS.SEGMENT or IDS.NEXT under its own name (an opaque tag's raw counter would
// leak), neither on the instance that serves the tag nor on one that has not
// seen its shape yet; a plain tag whose name has an '@' is served as before.
func TestCounterRowRefused(t *testing.T) {
	dir := t.TempDir()
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, testKey(), serverOpts{autoCreate: true, dir: dir, markFile: true})
	c := s.client(t, 2, "")
	ctx := context.Background()
	for _, args := range [][]any{
		{"IDS.CREATE", "o", "OPAQUE"},
		{"IDS.CREATE", "d", "FORMAT", "D{yyyyMMdd}{seq:6}", "RESET", "day", "OPAQUE"},
	} {
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	if err := c.Incr(ctx, "o").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "IDS.NEXT", "d").Err(); err != nil {
		t.Fatal(err)
	}
	check := func(name string) {
		t.Helper()
		for _, args := range [][]any{
			{"INCR", "o@"}, {"INCR", "d@20261201"}, {"INCRBY", "d@20261201", 2},
			{"IDS.SEGMENT", "d@20261201"}, {"IDS.SEGMENT", "o@", 3}, {"IDS.NEXT", "d@20261201"},
			{"IDS.CREATE", "d@20261202", "START", "999999"}, {"IDS.CREATE", "d@20261203"},
		} {
			cl := s.client(t, 2, "")
			err := cl.Do(ctx, args...).Err()
			if err == nil || err.Error()[:6] != "SHAPED" {
				t.Errorf("%s: %v: got %v, want SHAPED", name, args, err)
			}
		}
	}
	check("serving instance")
	if v, err := c.Incr(ctx, "plain@x").Result(); err != nil || v != 1 {
		t.Errorf("INCR plain@x: %d, %v; want 1 (a plain tag with '@')", v, err)
	}
	s.stop()

	s = shapedServer(t, clk, testKey(), serverOpts{autoCreate: true, dir: dir, markFile: true, noWarm: true})
	check("instance that has not seen the shapes")
}
