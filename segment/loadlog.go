package segment

import (
	"sync/atomic"
	"time"
)

// LoadRecord is one finished load of a tag's segment (the status page's "last loads").
type LoadRecord struct {
	At       time.Time     // when the load started (Config.Now)
	Duration time.Duration // how long the store took, mark checks included
	Start    int64         // the range loaded, [Start, End); zero on failure
	End      int64
	Error    string // empty when the load succeeded
}

// loadLogSize is how many loads each buffer remembers.
const loadLogSize = 8

// loadLog is a buffer's last loads, a ring once full; guarded by buffer.mu. The records grow
// with the loads (a tag loaded once holds one), so that 100,000 tags loaded once cost one
// record each, not loadLogSize (BenchmarkManyTags/memory).
type loadLog struct {
	recs []LoadRecord // record i of the ring is the (k*loadLogSize + i)-th written
	n    int          // records written in total
}

func (l *loadLog) add(r LoadRecord) {
	if len(l.recs) < loadLogSize {
		l.recs = append(l.recs, r)
	} else {
		l.recs[l.n%loadLogSize] = r
	}
	l.n++
}

// list returns the records, newest first.
func (l *loadLog) list() []LoadRecord {
	k := min(l.n, loadLogSize)
	out := make([]LoadRecord, 0, k)
	for i := 1; i <= k; i++ {
		out = append(out, l.recs[(l.n-i)%loadLogSize])
	}
	return out
}

// LoadBuckets are the upper bounds, in seconds, of the load-duration histogram of Stats.
var LoadBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// loadHist is a histogram of load durations with lock-free counters.
type loadHist struct {
	counts [13]atomic.Uint64 // one per bucket of LoadBuckets, then +Inf (not cumulative)
	sumNs  atomic.Int64
}

func (h *loadHist) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(LoadBuckets) && s > LoadBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

// LoadHistogram is a snapshot of the load durations: Counts[i] loads took at most
// LoadBuckets[i] (cumulative), Count in all, Sum seconds in all.
type LoadHistogram struct {
	Counts []uint64
	Count  uint64
	Sum    float64
}

func (h *loadHist) snapshot() LoadHistogram {
	out := LoadHistogram{Counts: make([]uint64, len(LoadBuckets))}
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		if i < len(LoadBuckets) {
			out.Counts[i] = cum
		}
	}
	out.Count = cum
	out.Sum = time.Duration(h.sumNs.Load()).Seconds()
	return out
}

// recordLoad notes a finished load of b (s on success, err otherwise) that began at start.
func (g *Generator) recordLoad(b *buffer, start time.Time, s *seg, err error) {
	d := max(g.cfg.Clock.Now().Sub(start), 0)
	g.loadHist.observe(d)
	r := LoadRecord{At: start, Duration: d}
	if err != nil {
		r.Error = err.Error()
	} else if s != nil {
		r.Start, r.End = s.start, s.end
	}
	b.mu.Lock()
	b.loads.add(r)
	b.mu.Unlock()
}
