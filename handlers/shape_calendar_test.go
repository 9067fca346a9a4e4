package handlers

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestDSTDaysStartAtOne: in the zones whose midnight does not exist on their spring-forward
// day, the first ID after the clocks jump carries that day's date and counter 1, and
// IDS.PARSE of it names that day; TZ Local is refused.
func TestDSTDaysStartAtOne(t *testing.T) {
	for _, tc := range []struct {
		zone string
		jump time.Time // the instant the clocks jump to 01:00
		day  string
	}{
		{"America/Santiago", time.Date(2026, 9, 6, 4, 0, 0, 0, time.UTC), "20260906"},
		{"America/Havana", time.Date(2026, 3, 8, 5, 0, 0, 0, time.UTC), "20260308"},
		{"Atlantic/Azores", time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), "20260329"},
	} {
		t.Run(tc.zone, func(t *testing.T) {
			clk := newTestClock(tc.jump.Add(-2 * time.Second))
			s := shapedServer(t, clk, nil, serverOpts{})
			c := s.client(t, 3, "")
			ctx := context.Background()
			if err := c.Do(ctx, "IDS.CREATE", "d", "FORMAT", "D{yyyyMMdd}{seq:6}", "RESET", "day", "TZ", tc.zone, "STEP", "100").Err(); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := c.Do(ctx, "IDS.NEXT", "d").Err(); err != nil {
					t.Fatal(err)
				}
			}
			clk.set(tc.jump)
			got, err := c.Do(ctx, "IDS.NEXT", "d").Text()
			if want := "D" + tc.day + "000001"; err != nil || got != want {
				t.Fatalf("first ID after the jump: %q, %v; want %s", got, err, want)
			}
			p := flatMap(t, c.Do(ctx, "IDS.PARSE", "d", got).Val())
			if p["period"] != tc.day || p["counter"] != "1" {
				t.Fatalf("IDS.PARSE %s: %v", got, p)
			}
		})
	}
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, nil, serverOpts{})
	c := s.client(t, 3, "")
	err := c.Do(context.Background(), "IDS.CREATE", "l", "FORMAT", "L{yyyyMMdd}{seq:6}", "RESET", "day", "TZ", "Local").Err()
	wantErr(t, err, "BADFORMAT")
}

// BenchmarkRepeatedHour serves IDS.NEXT of a RESET hour tag in New York at a normal hour and
// in the hour shown twice at the fall-back (1 November 2026, 01:00-02:00 EDT then EST),
// interleaved in blocks on one server, and reports normal time / repeated time as "ratio"
// (1: the repeated hour costs nothing more; the target is ≥ 0.8).
func BenchmarkRepeatedHour(b *testing.B) {
	for _, p := range []int{1, 16} {
		b.Run(fmt.Sprintf("P%d", p), func(b *testing.B) {
			ny, _ := time.LoadLocation("America/New_York")
			normal := time.Date(2026, 11, 1, 12, 30, 0, 0, ny)
			repeated := time.Date(2026, 11, 1, 1, 30, 0, 0, ny).Add(time.Hour) // 01:30 EST, the second time
			clk := newTestClock(normal)
			s := startServer(b, serverOpts{autoCreate: true, shapes: true, config: func(c *Config) { c.Now = clk.now }})
			ctx := context.Background()
			for _, tag := range []string{"hn", "hr"} {
				if err := s.client(b, 2, "").Do(ctx, "IDS.CREATE", tag, "FORMAT", "H{yyyyMMddHH}{seq:8}", "RESET", "hour", "TZ", "America/New_York", "STEP", "1000000").Err(); err != nil {
					b.Fatal(err)
				}
			}
			// One tag per hour, so that each keeps its own period cached, as one tag does
			// through its hour; the clock is set per block.
			clk.set(normal)
			hn := shapeCmdClient(b, s.addr, "*2\r\n$8\r\nIDS.NEXT\r\n$2\r\nhn\r\n", p, 2)
			clk.set(repeated)
			hr := shapeCmdClient(b, s.addr, "*2\r\n$8\r\nIDS.NEXT\r\n$2\r\nhr\r\n", p, 2)
			const block = 64
			var tn, tr time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += 2 * block * p {
				clk.set(normal)
				t0 := time.Now()
				for range block {
					hn(p)
				}
				t1 := time.Now()
				clk.set(repeated)
				for range block {
					hr(p)
				}
				tn += t1.Sub(t0)
				tr += time.Since(t1)
			}
			b.ReportMetric(float64(tn)/float64(tr), "ratio")
		})
	}
}
