package handlers

import (
	"bufio"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/snowflake"
)

// TestExecSumsDemand: EXEC's flag sums what its queued ID commands take of each tag (INCR 1,
// INCRBY n, IDS.SEGMENT n, IDS.NEXT n, a shaped tag's counter row) and of the snowflake
// generator, and runs off the loop when a tag's segment in memory does not hold the sum,
// although each command alone is served. Fails when EXEC asks each command's flag alone
// (then sixteen INCRBY tx 400000, each served alone, need several loads together, and those
// loads run on the loop and stall its other connections).
func TestExecSumsDemand(t *testing.T) {
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	rec := &mayRecorder{last: map[string]bool{}}
	ts := startServer(t, serverOpts{autoCreate: true, noWarm: true, shapes: true, loops: 1,
		config: func(c *Config) { c.Now = clk.now },
		wrap:   func(h *Handler) resp.Handler { rec.h = h; return rec }})
	m := newMayClient(t, ts, rec)
	// Each tag is loaded with its first segment (step 1000) and one value taken: 999 left.
	for _, cmd := range []string{"INCR a", "INCR b", "INCR c", "INCR d", "INCR e", "INCR f",
		"IDS.CREATE s1 FORMAT D{yyyyMMdd}{seq:6} RESET day", "IDS.CREATE s2 FORMAT D{yyyyMMdd}{seq:6} RESET day",
		"IDS.NEXT s1", "IDS.NEXT s2"} {
		m.may(cmd)
	}
	rep := func(n int, cmd string) []string {
		q := make([]string, n)
		for i := range q {
			q[i] = cmd
		}
		return q
	}
	cat := func(qs ...[]string) []string {
		var out []string
		for _, q := range qs {
			out = append(out, q...)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		queue []string
		want  bool
	}{
		// First the snowflake cases: a fresh generator's millisecond holds at least 3997.
		{"snowflake within a millisecond", rep(2, "IDS.SNOWFLAKE 100"), false},
		{"snowflake past a millisecond's 4096", rep(41, "IDS.SNOWFLAKE 100"), true},
		{"INCRBY 998 + INCR: 999 of 999", []string{"INCRBY a 998", "INCR a"}, false},
		{"INCRBY 998 + 2 INCR: 1000 of 999", []string{"INCRBY b 998", "INCR b", "PING", "INCR b"}, true},
		{"four INCRBY 300 of one tag", rep(4, "INCRBY c 300"), true},
		{"IDS.SEGMENT and IDS.NEXT of a plain tag", cat(rep(9, "IDS.SEGMENT d 100"), []string{"IDS.NEXT d 99", "INCR d"}), true},
		{"two tags, each within its segment", []string{"INCRBY e 900", "INCRBY f 900", "INCR e", "INCR f"}, false},
		{"a shaped tag's row: 999 of 999", cat(rep(9, "IDS.NEXT s2 100"), []string{"IDS.NEXT s2 99"}), false},
		{"a shaped tag's row: 1000 of 999", cat(rep(9, "IDS.NEXT s1 100"), []string{"IDS.NEXT s1 99", "INCR s1"}), true},
	} {
		m.may("MULTI")
		for _, q := range tc.queue {
			if m.may(q) {
				t.Fatalf("%s: %q inside MULTI (queued only): MayBlock true", tc.name, q)
			}
		}
		if got := m.may("EXEC"); got != tc.want {
			t.Errorf("%s: EXEC MayBlock %v, want %v", tc.name, got, tc.want)
		}
	}
	// Outside MULTI nothing is summed: each command asks its own count.
	if m.may("INCRBY e 90") || m.may("INCRBY e 8") {
		t.Error("outside MULTI: INCRBY within the segment: MayBlock true")
	}
}

// gateClock is a fake clock whose Sleep, once armed, reports itself and waits for the test.
type gateClock struct {
	*clock.Fake
	armed   atomic.Bool
	entered chan time.Duration
	release chan struct{}
}

func (c *gateClock) Sleep(d time.Duration) {
	if c.armed.Load() {
		c.entered <- d
		<-c.release
	}
	c.Fake.Sleep(d)
}

// TestSnowflakeWaitsOffLoop: an IDS.SNOWFLAKE whose count the current millisecond's sequence
// does not hold (it would wait for the next millisecond) runs off the event loop: while it
// waits, another client of the same loop is served and the watchdog never took the loop
// over. One the millisecond holds stays on the loop. The clock is the fake, so the wait lasts
// exactly as long as the test holds it. Fails without IDS.SNOWFLAKE's mayWait flag, or with a
// flag that ignores the sequence used (then a pipeline of IDS.SNOWFLAKE 1000 waits out the
// next milliseconds on the loop, holding every other connection of that loop).
func TestSnowflakeWaitsOffLoop(t *testing.T) {
	clk := &gateClock{Fake: clock.NewFake(time.Now()), entered: make(chan time.Duration, 4), release: make(chan struct{})}
	ts := startServer(t, serverOpts{loops: 1,
		config:     func(c *Config) { c.MaxBatch = 1000 },
		snowConfig: func(c *snowflake.Config) { c.Clock = clk; c.SequenceStartZero = true }})
	var once sync.Once
	free := func() { once.Do(func() { clk.armed.Store(false); close(clk.release) }) }
	t.Cleanup(free) // before the server's shutdown (cleanups run last first)
	a := ts.raw(t)
	ar := bufio.NewReader(a)
	ids := func() {
		t.Helper()
		if line, err := ar.ReadString('\n'); err != nil || strings.TrimSpace(line) != "*1000" {
			t.Fatalf("IDS.SNOWFLAKE 1000: %q, %v", line, err)
		}
		for i := 0; i < 1000; i++ {
			if line, err := ar.ReadString('\n'); err != nil || line[0] != ':' {
				t.Fatalf("ID %d: %q, %v", i, line, err)
			}
		}
	}
	// The fake clock stands still: four batches of 1000 take 4000 of this millisecond's 4096.
	for i := 0; i < 4; i++ {
		fmt.Fprint(a, "IDS.SNOWFLAKE 1000\r\n")
		ids()
	}
	st0 := ts.srv.Stats() // a take-over before this is the machine's (a batch stalled a period)
	if st0.LoopOffloads != 0 {
		t.Fatalf("batches the millisecond holds ran off the loop: %d offloads", st0.LoopOffloads)
	}
	clk.armed.Store(true)
	fmt.Fprint(a, "IDS.SNOWFLAKE 1000\r\n") // 96 left: waits for the next millisecond
	select {
	case <-clk.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the fifth batch never waited for the next millisecond")
	}
	b := ts.raw(t)
	br := bufio.NewReader(b)
	fmt.Fprint(b, "PING\r\n")
	if line, err := br.ReadString('\n'); err != nil || strings.TrimSpace(line) != "+PONG" {
		t.Fatalf("other client while IDS.SNOWFLAKE waits: %q, %v", line, err)
	}
	st := ts.srv.Stats()
	free()
	if n := st.LoopTakeovers - st0.LoopTakeovers; n != 0 {
		t.Errorf("the watchdog took the loop over %d times: IDS.SNOWFLAKE waited on the loop", n)
	}
	if st.LoopOffloads != 1 {
		t.Errorf("LoopOffloads %d, want 1 (the batch that waits)", st.LoopOffloads)
	}
	ids()
	// The clock moved to the next millisecond, 904 of it used: 1000 more are served at once.
	fmt.Fprint(a, "IDS.SNOWFLAKE 1000\r\n")
	ids()
	if st := ts.srv.Stats(); st.LoopOffloads != 1 {
		t.Errorf("a batch the millisecond holds ran off the loop: LoopOffloads %d, want 1", st.LoopOffloads)
	}
}
