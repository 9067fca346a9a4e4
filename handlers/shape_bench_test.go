package handlers

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// shapeCmdClient dials addr and returns a function that sends n (at most p) pipelined copies of
// the RESP command one and waits for their replies of linesPer lines each.
func shapeCmdClient(tb testing.TB, addr, one string, p, linesPer int) func(n int) {
	tb.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	req := []byte(strings.Repeat(one, p))
	buf := make([]byte, 64<<10)
	batch := func(n int) {
		if _, err := conn.Write(req[:n*len(one)]); err != nil {
			tb.Fatal(err)
		}
		for lines := 0; lines < n*linesPer; {
			k, err := conn.Read(buf)
			if err != nil {
				tb.Fatal(err)
			}
			for _, c := range buf[:k] {
				if c == '-' && linesPer > 1 {
					tb.Fatalf("error reply: %q", buf[:k])
				}
				if c == '\n' {
					lines++
				}
			}
		}
	}
	for range 200 {
		batch(p)
	}
	return batch
}

const (
	respIncr   = "*2\r\n$4\r\nINCR\r\n$5\r\nplain\r\n"
	respNext   = "*2\r\n$8\r\nIDS.NEXT\r\n$5\r\norder\r\n"
	respOpaque = "*2\r\n$8\r\nIDS.NEXT\r\n$6\r\nsecret\r\n"
)

func shapedBenchServer(tb testing.TB) *testServer {
	tb.Helper()
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := startServer(tb, serverOpts{autoCreate: true, shapes: true, config: func(c *Config) { c.Now = clk.now; c.IDKey = testKey() }})
	c := s.client(tb, 2, "")
	ctx := context.Background()
	for _, args := range [][]any{
		{"IDS.CREATE", "order", "FORMAT", "ORD{yyyyMMdd}{seq:10}", "RESET", "day", "TZ", "Asia/Shanghai", "STEP", "100000"},
		{"IDS.CREATE", "secret", "FORMAT", "S{seq:12}", "OPAQUE", "STEP", "100000"},
		{"IDS.CREATE", "plain", "STEP", "100000"},
	} {
		if err := c.Do(ctx, args...).Err(); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// TestIDsNextAllocs: the server path of IDS.NEXT on a daily tag allocates nothing per ID
// beyond the reply (measured as TestIncrAllocs measures INCR).
func TestIDsNextAllocs(t *testing.T) {
	if testing.Short() || raceOn {
		t.Skip("short, or the race detector (its sync.Pool drops pooled buffers at random)")
	}
	s := shapedBenchServer(t)
	for _, tc := range []struct{ name, cmd string }{{"daily", respNext}, {"opaque", respOpaque}} {
		const batch, rounds = 100, 100
		round := shapeCmdClient(t, s.addr, tc.cmd, batch, 2)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range rounds {
			round(batch)
		}
		runtime.ReadMemStats(&after)
		per := float64(after.Mallocs-before.Mallocs) / (batch * rounds)
		t.Logf("%s: %.4f allocations per IDS.NEXT", tc.name, per)
		if per > 0.1 {
			t.Errorf("%s: %.3f allocations per IDS.NEXT on the server path, want 0", tc.name, per)
		}
	}
}

// BenchmarkServeNextRatio interleaves blocks of pipelined INCRs (a plain tag) and of
// pipelined IDS.NEXTs (a daily formatted tag; an opaque FF1 tag) on one leafd and reports
// INCR time / IDS.NEXT time as "ratio" (1: formatting costs nothing measurable; the target is
// ≥ 0.8), so the noise of a shared machine hits both alike.
func BenchmarkServeNextRatio(b *testing.B) {
	for _, tc := range []struct{ name, cmd string }{{"daily", respNext}, {"opaque", respOpaque}} {
		for _, p := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/P%d", tc.name, p), func(b *testing.B) {
				s := shapedBenchServer(b)
				incr := shapeCmdClient(b, s.addr, respIncr, p, 1)
				next := shapeCmdClient(b, s.addr, tc.cmd, p, 2)
				benchRatio(b, p, incr, next)
			})
		}
	}
}
