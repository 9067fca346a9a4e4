package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketRoundTrip(t *testing.T) {
	vals := []uint64{0, 1, 63, 64, 127, 128, 129, 1000, 1 << 20, 1<<20 + 12345, 1<<40 - 1, 1 << 62, math.MaxUint64}
	for range 1000 {
		vals = append(vals, rand.Uint64()>>rand.IntN(64))
	}
	prev := -1
	slices.Sort(vals)
	for _, v := range vals {
		i := bucketOf(v)
		if i < 0 || i >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d, want in [0, %d)", v, i, numBuckets)
		}
		if i < prev {
			t.Fatalf("bucketOf(%d) = %d, below the bucket of a smaller value (%d)", v, i, prev)
		}
		prev = i
		lo, hi := bucketRange(i)
		if v < lo || v > hi {
			t.Fatalf("value %d in bucket %d = [%d, %d]", v, i, lo, hi)
		}
		if float64(hi-lo) > float64(lo)/subCount {
			t.Fatalf("bucket %d = [%d, %d] wider than 1/%d of its value", i, lo, hi, subCount)
		}
	}
	// Buckets tile the line: each starts right after the previous one ends.
	for i := 1; i < numBuckets; i++ {
		_, phi := bucketRange(i - 1)
		lo, _ := bucketRange(i)
		if lo != phi+1 {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, phi+1)
		}
	}
}

func TestHistogramQuantiles(t *testing.T) {
	tests := []struct {
		name string
		vals []time.Duration
		q    float64
		want time.Duration
	}{
		{name: "single", vals: []time.Duration{5 * time.Millisecond}, q: 0.5, want: 5 * time.Millisecond},
		{name: "median of three small", vals: []time.Duration{1, 2, 3}, q: 0.5, want: 2},
		{name: "q0 is min", vals: []time.Duration{10, 20, 30}, q: 0, want: 10},
		{name: "q1 is max", vals: []time.Duration{10, 20, time.Second}, q: 1, want: time.Second},
		{name: "negative counts as zero", vals: []time.Duration{-5}, q: 0.5, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHistogram()
			for _, v := range tt.vals {
				h.Record(v)
			}
			if got := h.Quantile(tt.q); got != tt.want {
				t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

// TestHistogramAccuracy compares quantiles with the exact ones of a sorted sample.
func TestHistogramAccuracy(t *testing.T) {
	h := NewHistogram()
	vals := make([]time.Duration, 100000)
	for i := range vals {
		// Log-uniform from 10µs to 100ms, like request latencies.
		vals[i] = time.Duration(1e4 * math.Pow(1e4, rand.Float64()))
		h.Record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
		got := h.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/subCount {
			t.Errorf("Quantile(%v) = %v, want within [%v, %v]", q, got, exact, exact+exact/subCount)
		}
	}
	if h.Min() != vals[0] || h.Max() != vals[len(vals)-1] {
		t.Errorf("min, max = %v, %v, want %v, %v", h.Min(), h.Max(), vals[0], vals[len(vals)-1])
	}
	if h.Count() != uint64(len(vals)) {
		t.Errorf("count = %d, want %d", h.Count(), len(vals))
	}
}

func TestHistogramMerge(t *testing.T) {
	a, b, all := NewHistogram(), NewHistogram(), NewHistogram()
	for i := range 1000 {
		d := time.Duration(i) * time.Microsecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(b)
	a.Merge(NewHistogram()) // empty: no effect, in particular on min
	if *a != *all {
		t.Errorf("merged histogram differs from the one that saw every value: count %d min %v max %v, want %d %v %v",
			a.Count(), a.Min(), a.Max(), all.Count(), all.Min(), all.Max())
	}
	empty := NewHistogram()
	if empty.Quantile(0.99) != 0 || empty.Min() != 0 || empty.Mean() != 0 {
		t.Errorf("empty histogram: got p99 %v min %v mean %v, want zeros", empty.Quantile(0.99), empty.Min(), empty.Mean())
	}
}

func TestHistogramRecordAllocs(t *testing.T) {
	h := NewHistogram()
	if n := testing.AllocsPerRun(1000, func() { h.Record(123456) }); n != 0 {
		t.Errorf("Record allocates %v times, want 0", n)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	h := NewHistogram()
	var d time.Duration
	for b.Loop() {
		d += 997
		h.Record(d & (1<<24 - 1))
	}
}
