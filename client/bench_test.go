package client

import (
	"context"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// The speed of Next is judged against a bare atomic.Int64.Add measured in the same run:
//
//	go test -run '^$' -bench 'Atomic|ClientNext|TagNext' -benchmem -count 5 ./client/
//
// BenchmarkClientNext / BenchmarkAtomicBaseline is the ratio (one goroutine), and the
// Parallel pair on every core. BenchmarkClientNextLatency reports the p99.9 of one Next.
// BenchmarkTagNext is BenchmarkClientNext through a Tag.
//
// Built so, Next is a call: with the call to its slow path its body is over the compiler's
// inlining budget. An application built with a CPU profile in which Next is hot has it
// inlined at its hot call sites (Go applies the main module's default.pgo, or -pgo=FILE,
// to every package of the build, this one included). testdata/next.pgo is such a profile,
// of these benchmarks; from the repository root,
//
//	go test -pgo=client/testdata/next.pgo -run '^$' -bench 'Atomic|ClientNext|TagNext' -benchmem -count 5 ./client/
//
// measures Next as such an application calls it (go test -pgo=auto does not read a
// default.pgo here: only a main package's). To make the profile again:
//
//	go test -run '^$' -bench 'ClientNext$|ClientNextParallel|TagNext' -cpuprofile client/testdata/next.pgo -o /tmp/client.test ./client/

var sink atomic.Int64

// threadCPU is the CPU time of the calling OS thread. Beside ns/op (wall time), the one-
// goroutine benchmarks report cpu-ns/op: on a shared machine a benchmark that was descheduled
// shows it in ns/op, not in cpu-ns/op, so the ratio of cpu-ns/op holds under load.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(rusageThread, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPerOp runs loop on one locked OS thread and reports its CPU time per op.
func cpuPerOp(b *testing.B, loop func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0 := threadCPU()
	loop()
	b.ReportMetric(float64(threadCPU()-t0)/float64(b.N), "cpu-ns/op")
}

func BenchmarkAtomicBaseline(b *testing.B) {
	var n atomic.Int64
	cpuPerOp(b, func() {
		for b.Loop() {
			n.Add(1)
		}
	})
	sink.Store(n.Load())
}

func BenchmarkAtomicBaselineParallel(b *testing.B) {
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Add(1)
		}
	})
	sink.Store(n.Load())
}

// benchClient is a client of a leafd (embedded store) warmed up to its steady state: the
// range size grown to MaxBatch and the next range fetched ahead.
func benchClient(b *testing.B) *Client {
	b.Helper()
	c := coldClient(b)
	ctx := context.Background()
	for range 5_000_000 {
		if _, err := c.Next(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

func BenchmarkClientNext(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	var failed error // reported after the loop: the loop itself makes no call of its own
	cpuPerOp(b, func() {
		var last int64
		for b.Loop() {
			id, err := c.Next(ctx, "bench")
			if err != nil {
				failed = err
				break
			}
			last = id
		}
		sink.Store(last)
	})
	if failed != nil {
		b.Fatal(failed)
	}
}

// BenchmarkTagNext is BenchmarkClientNext through the tag's handle (Client.Tag).
func BenchmarkTagNext(b *testing.B) {
	tg := benchClient(b).Tag("bench")
	ctx := context.Background()
	b.ReportAllocs()
	var failed error // reported after the loop: the loop itself makes no call of its own
	cpuPerOp(b, func() {
		var last int64
		for b.Loop() {
			id, err := tg.Next(ctx)
			if err != nil {
				failed = err
				break
			}
			last = id
		}
		sink.Store(last)
	})
	if failed != nil {
		b.Fatal(failed)
	}
}

func BenchmarkClientNextParallel(b *testing.B) {
	c := benchClient(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		var last int64
		for pb.Next() {
			id, err := c.Next(ctx, "bench")
			if err != nil {
				b.Error(err)
				return
			}
			last = id
		}
		sink.Store(last)
	})
}

// BenchmarkClientNextLatency takes IDs as fast as one goroutine can and times every eighth
// Next (timing each would make the clock reads the rate): it reports the quantiles of one
// call (ns), the rate it ran at, and how many takes waited for a fetch (none may at 10 M
// IDs/s and more).
func BenchmarkClientNextLatency(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	lat := make([]int64, 0, 1<<22)
	waits := c.waits.Load()
	start := time.Now()
	i := 0
	for b.Loop() {
		if i++; i&7 != 0 || len(lat) == cap(lat) {
			if _, err := c.Next(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
			continue
		}
		t0 := time.Now()
		if _, err := c.Next(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, int64(time.Since(t0)))
	}
	el := time.Since(start)
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) }
	b.ReportMetric(q(0.5), "p50-ns")
	b.ReportMetric(q(0.999), "p99.9-ns")
	b.ReportMetric(float64(lat[len(lat)-1]), "max-ns")
	b.ReportMetric(float64(b.N)/el.Seconds()/1e6, "M-IDs/s")
	b.ReportMetric(float64(c.waits.Load()-waits), "waits")
}

// coldClient is a client of a fresh leafd on the embedded store.
func coldClient(b *testing.B) *Client {
	b.Helper()
	needBinary(b)
	l := e2e.Start(b)
	c, err := New(Options{Addrs: []string{l.Addr}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func BenchmarkClientSnowflake(b *testing.B) {
	c := coldClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Snowflake(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
