package segment

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// counterStore leases [n*step, (n+1)*step) per call and keeps nothing per tag, so that heap
// measurements count the generator only.
type counterStore struct {
	baseStore
	n atomic.Int64
}

const counterStep = 1 << 30

func (s *counterStore) Allocate(ctx context.Context, tag string, step int64) (Alloc, error) {
	if step <= 0 {
		step = counterStep
	}
	return Alloc{MaxID: s.n.Add(step), Step: counterStep}, nil
}
func (s *counterStore) Tags(context.Context) ([]string, error) { return nil, nil }
func (s *counterStore) Create(context.Context, Tag) error      { return nil }

type nopMarks struct{ baseMarks }

func (nopMarks) Mark(string) (int64, error) { return 0, nil }
func (nopMarks) Raise(string, int64) error  { return nil }

// manyTags holds n loaded tags ("t0".."t<n-1>").
func manyTags(tb testing.TB, n int) (*Generator, []string) {
	tb.Helper()
	// The refresh would drop every tag: counterStore lists none.
	cfg := Config{Clock: newFakeClock(), MaxTags: n + 10, NoWarmStart: true, WaitTimeout: time.Minute,
		RefreshInterval: 24 * time.Hour}
	g, err := New(cfg, &counterStore{}, nopMarks{}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close() })
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("t%d", i)
		if _, err := g.Next(names[i]); err != nil {
			tb.Fatal(err)
		}
	}
	return g, names
}

// With 100,000 tags held, INCR on a held tag still allocates nothing.
func TestManyTagsNextAllocs(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	g, names := manyTags(t, n)
	if got := g.Stats().Tags; got != n {
		t.Fatalf("got %d tags held, want %d", got, n)
	}
	tag := []byte(names[n/2])
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := g.Next(unsafe.String(&tag[0], len(tag))); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("got %v allocs per Next with %d tags held, want 0", allocs, n)
	}
}

// BenchmarkManyTags: adding tags (the cost of one new tag with 100,000 held), INCR on one
// tag with only it held and with 100,000 held (incr-ratio: alternating blocks, the target is
// >= 0.9), round-robin over the 100,000 held tags against one tag (incr-rr-ratio), and the
// heap per held tag after a GC (loaded, one segment). handlers' BenchmarkServeManyTags is the
// same through the server. Figures in docs/BENCHMARKS.md.
func BenchmarkManyTags(b *testing.B) {
	const n = 100_000
	b.Run("add", func(b *testing.B) {
		// Each iteration adds one tag to a generator that already holds n.
		g, _ := manyTags(b, n)
		g.cfg.MaxTags = 1 << 30
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := g.buffer(fmt.Sprintf("new%d", i)); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("memory", func(b *testing.B) {
		for b.Loop() {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			g, names := manyTags(b, n)
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/tag")
			runtime.KeepAlive(names)
			_ = g.Close()
		}
	})
	incr := func(b *testing.B, held int) {
		g, names := manyTags(b, held)
		tag := names[held/2]
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := g.Next(tag); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("incr-1-tag-held", func(b *testing.B) { incr(b, 1) })
	b.Run("incr-100k-tags-held", func(b *testing.B) { incr(b, n) })
	// ratio: INCR of one tag with only it held against INCR of one tag with 100,000 held,
	// alternating blocks on one goroutine so that a loaded machine's noise hits both alike
	// ("ratio" = time with 1 held / time with 100,000 held; the target is >= 0.9).
	// rr-ratio: the same one tag against round-robin over all 100,000 held tags (every Next a
	// different buffer: the cache misses of a wide working set).
	next := func(b *testing.B, g *Generator, tag string) {
		if _, err := g.Next(tag); err != nil {
			b.Fatal(err)
		}
	}
	ratio := func(b *testing.B, rr bool) {
		g1, one := manyTags(b, 1)
		gn, names := manyTags(b, n)
		const block = 4096
		var t1, tn time.Duration
		i := 0
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			a := time.Now()
			for range block {
				next(b, g1, one[0])
			}
			m := time.Now()
			if rr {
				for range block {
					next(b, gn, names[i])
					if i++; i == n {
						i = 0
					}
				}
			} else {
				for range block {
					next(b, gn, names[n/2])
				}
			}
			t1 += m.Sub(a)
			tn += time.Since(m)
		}
		b.ReportMetric(float64(t1.Nanoseconds())/float64(b.N*block), "ns/incr-1")
		b.ReportMetric(float64(tn.Nanoseconds())/float64(b.N*block), "ns/incr-100k")
		b.ReportMetric(float64(t1)/float64(tn), "ratio")
	}
	b.Run("incr-ratio", func(b *testing.B) { ratio(b, false) })
	b.Run("incr-rr-ratio", func(b *testing.B) { ratio(b, true) })
}
