package bench

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: each power of two is split into 2^subBits linear
// sub-buckets, so a recorded value is known to within 1/64 (1.6%) of itself, as an HDR
// histogram with two significant digits.
const (
	subBits    = 6
	subCount   = 1 << subBits
	numBuckets = (64-subBits)*subCount + subCount // index of the largest uint64, plus one
)

// Histogram records durations in log-linear buckets (HDR-like): fixed size, no allocation on
// Record, exact count, sum, min and max. It is not safe for concurrent use: each client
// records into its own and the results are merged.
type Histogram struct {
	counts   [numBuckets]uint64
	total    uint64
	sum      uint64
	min, max uint64
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram { return &Histogram{min: math.MaxUint64} }

// bucketOf returns the bucket index of v. Values below 2*subCount have a bucket each; above,
// the top subBits+1 significant bits of v select the bucket.
func bucketOf(v uint64) int {
	l := bits.Len64(v)
	if l <= subBits+1 {
		return int(v)
	}
	s := l - subBits - 1
	return s*subCount + int(v>>uint(s))
}

// bucketRange returns the smallest and largest values that fall into bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < 2*subCount {
		return uint64(i), uint64(i)
	}
	s := i/subCount - 1
	m := uint64(i - s*subCount)
	lo = m << uint(s)
	return lo, lo + (uint64(1) << uint(s)) - 1
}

// Record adds one value. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	h.counts[bucketOf(v)]++
	h.total++
	h.sum += v
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// Merge adds the values of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.total }

// Min is the smallest value recorded (0 when empty).
func (h *Histogram) Min() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Max is the largest value recorded, exactly.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the exact mean.
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / h.total)
}

// Quantile returns the value at quantile q in [0, 1]: the upper end of the bucket holding
// the ceil(q*count)-th smallest value, clamped to the exact min and max. So the figure is
// never below the true quantile and at most 1/64 above it.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = max(rank, 1)
	rank = min(rank, h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bucketRange(i)
			hi = min(max(hi, h.min), h.max)
			return time.Duration(hi)
		}
	}
	return time.Duration(h.max)
}
