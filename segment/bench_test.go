package segment

import (
	"sync/atomic"
	"testing"
	"time"
)

// The baseline: a bare atomic counter, the floor of any ID generator. Compare
// BenchmarkBufferNext and BenchmarkGeneratorNext with it (same run, -count 5, medians).

func BenchmarkAtomicAdd(b *testing.B) {
	var c atomic.Int64
	b.ReportAllocs()
	for b.Loop() {
		c.Add(1)
	}
}

func BenchmarkAtomicAddParallel(b *testing.B) {
	var c atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Add(1)
		}
	})
}

// benchGen returns a generator whose tag "bench" holds one huge segment, so no switch or
// load happens during the benchmark (a switch costs one mutex per segment, amortized away).
func benchGen(b *testing.B) (*Generator, *buffer) {
	b.Helper()
	st := newFakeStore(map[string]int64{"bench": 1 << 40})
	g, err := New(Config{Clock: newFakeClock()}, st, newFakeMarks(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	if _, err := g.Next("bench"); err != nil {
		b.Fatal(err)
	}
	buf, _ := g.buffer("bench")
	return g, buf
}

func BenchmarkBufferNext(b *testing.B) {
	g, buf := benchGen(b)
	b.ReportAllocs()
	for b.Loop() {
		// What Next runs after the map lookup.
		if v, st := buf.take(); st != taken {
			if _, err := g.nextMiss(buf, v, st); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkBufferNextParallel(b *testing.B) {
	g, buf := benchGen(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if v, st := buf.take(); st != taken {
				if _, err := g.nextMiss(buf, v, st); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

func BenchmarkGeneratorNext(b *testing.B) {
	g, _ := benchGen(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Next("bench"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGeneratorNextParallel(b *testing.B) {
	g, _ := benchGen(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := g.Next("bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGeneratorNextSmallStep includes switches and background loads (step 1000 against
// an instant store): the amortized cost of the slow path.
func BenchmarkGeneratorNextSmallStep(b *testing.B) {
	st := newFakeStore(map[string]int64{"bench": 1000})
	g, err := New(Config{Clock: newFakeClock(), MaxStep: 1000}, st, newFakeMarks(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Next("bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBufferNextRatio interleaves blocks of the baseline (atomic.Int64.Add) and of the
// per-buffer hot path on one goroutine and reports baseline/hot-path time as "ratio" (1 means
// as fast as a bare atomic add), so that the noise of a shared machine hits both alike.
func BenchmarkBufferNextRatio(b *testing.B) {
	g, buf := benchGen(b)
	var c atomic.Int64
	const block = 4096
	var base, hot time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		for range block {
			c.Add(1)
		}
		t1 := time.Now()
		for range block {
			if v, st := buf.take(); st != taken {
				if _, err := g.nextMiss(buf, v, st); err != nil {
					b.Fatal(err)
				}
			}
		}
		t2 := time.Now()
		base += t1.Sub(t0)
		hot += t2.Sub(t1)
	}
	b.ReportMetric(float64(base)/float64(hot), "ratio")
}
