package snowflake

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
)

// instantSource persists nothing: benchmarks measure the generator, not a disk.
type instantSource struct{}

func (instantSource) Acquire(context.Context) (Worker, error) {
	return Worker{ID: 1, Source: "bench"}, nil
}
func (instantSource) Extend(context.Context, time.Time) error { return nil }
func (instantSource) Close() error                            { return nil }

// layoutLimit is the most IDs per second one worker can issue with the default layout.
const layoutLimit = 4096 * 1000

func benchGen(b *testing.B) *Generator {
	b.Helper()
	g, err := New(Config{SequenceStartZero: true}, instantSource{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	return g
}

func reportRate(b *testing.B, start time.Time) {
	el := time.Since(start)
	rate := float64(b.N) / el.Seconds()
	b.ReportMetric(rate, "ids/s")
	b.ReportMetric(rate/layoutLimit, "ratio_to_4096000")
}

// BenchmarkNext measures one goroutine against the layout limit: 4096 IDs per millisecond, so
// both the per-ID cost and the precision of the wait for the next millisecond count.
func BenchmarkNext(b *testing.B) {
	g := benchGen(b)
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		if _, err := g.Next(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRate(b, start)
}

func BenchmarkNextParallel(b *testing.B) {
	g := benchGen(b)
	b.ReportAllocs()
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := g.Next(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	reportRate(b, start)
}

// BenchmarkAppendIDs: batches of 100 under one lock acquisition; ns/op is per ID.
func BenchmarkAppendIDs(b *testing.B) {
	g := benchGen(b)
	b.ReportAllocs()
	buf := make([]int64, 0, 100)
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i += 100 {
		var err error
		if buf, err = g.AppendIDs(buf[:0], min(100, b.N-i)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRate(b, start)
}

// BenchmarkAppendIDs1000Random: IDS.SNOWFLAKE 1000 as leafd serves it by default (random
// sequence start): batches of 1000, which span milliseconds. A saturated worker starts each
// millisecond after a full one at 0, so the random start costs nothing here.
func BenchmarkAppendIDs1000Random(b *testing.B) {
	g, err := New(Config{}, instantSource{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	b.ReportAllocs()
	buf := make([]int64, 0, 1000)
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i += 1000 {
		if buf, err = g.AppendIDs(buf[:0], min(1000, b.N-i)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRate(b, start)
}

// BenchmarkBaselineAtomic is the floor for comparison: a bare atomic counter (no time, no limit).
func BenchmarkBaselineAtomic(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	for range b.N {
		n.Add(1)
	}
}

// BenchmarkUnthrottled measures the per-ID cost alone: a clock that advances 1ms per call never
// exhausts the sequence, so no waiting is involved.
func BenchmarkUnthrottled(b *testing.B) {
	var ms atomic.Int64
	ms.Store(time.Now().UnixMilli())
	g, err := New(Config{SequenceStartZero: true, Clock: tickClock{ms: &ms}, LeaseWindow: time.Hour}, instantSource{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := g.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

// tickClock advances 1ms on every Now; its waits are real.
type tickClock struct {
	clock.Real
	ms *atomic.Int64
}

func (c tickClock) Now() time.Time { return time.UnixMilli(c.ms.Add(1)) }
