package admin

import (
	"container/heap"
	"slices"

	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/segment"
)

// DefaultMetricsMaxTags is how many tags get per-tag series in /metrics by default
// (--metrics-max-tags). Eight series per tag: 200 tags are about 150 KB a scrape.
const DefaultMetricsMaxTags = 200

// The per-tag series of /metrics are bounded: at any tag count a scrape carries at most
// Config.MetricsMaxTags tags' series, and totals over every held tag. The tags exported are
// the ones an operator must see, in this order: those that cannot serve, those whose latest
// load failed, those running out (no next segment and under a fifth of their step left, the
// LeafdSegmentRunningOut condition), then the busiest (most IDs handed out; a counter, so
// the busy set changes slowly and its series stay continuous). The alerts on per-tag series
// keep firing: a tag in trouble always ranks above every healthy one.

// tagUrgency ranks a tag's state for export: lower is more urgent.
func tagUrgency(in segment.Info) int {
	switch {
	case in.Current.Remaining == 0 && !in.NextReady:
		return 0
	case in.LastError != "":
		return 1
	case !in.NextReady && in.Current.Remaining+in.Next.Remaining < in.Step/5:
		return 2
	}
	return 3
}

// tagTotals counts every held tag's state, whatever is exported.
type tagTotals struct {
	cannotServe, failing, noNext, loading, exported int
	remaining                                       int64
}

// tagRank is a tag kept for export.
type tagRank struct {
	in      segment.Info
	urgency int
}

// before reports whether a ranks above b (exported first).
func (a tagRank) before(b tagRank) bool {
	if a.urgency != b.urgency {
		return a.urgency < b.urgency
	}
	if a.in.Issued != b.in.Issued {
		return a.in.Issued > b.in.Issued
	}
	return a.in.Tag < b.in.Tag
}

// rankHeap keeps the best n ranks seen; its root is the lowest of them.
type rankHeap []tagRank

func (h rankHeap) Len() int           { return len(h) }
func (h rankHeap) Less(i, j int) bool { return h[j].before(h[i]) }
func (h rankHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *rankHeap) Push(x any)        { *h = append(*h, x.(tagRank)) }
func (h *rankHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// pickTags reads every held tag once and returns the max most urgent ones (in rank order)
// and the totals over all. Memory is O(max), whatever the tag count.
func pickTags(seg handlers.Segments, maxTags int) ([]segment.Info, tagTotals) {
	var tot tagTotals
	h := make(rankHeap, 0, max(0, min(maxTags, 1024)))
	for _, tag := range seg.Tags() {
		in, err := seg.Info(tag)
		if err != nil {
			continue // dropped since Tags
		}
		r := tagRank{in: in, urgency: tagUrgency(in)}
		tot.remaining += in.Current.Remaining + in.Next.Remaining
		if in.Current.Remaining == 0 && !in.NextReady {
			tot.cannotServe++
		}
		if in.LastError != "" {
			tot.failing++
		}
		if !in.NextReady {
			tot.noNext++
		}
		if in.Loading {
			tot.loading++
		}
		switch {
		case maxTags <= 0:
		case len(h) < maxTags:
			r.in.Loads = nil // not exported: free it
			heap.Push(&h, r)
		case r.before(h[0]):
			r.in.Loads = nil
			h[0] = r
			heap.Fix(&h, 0)
		}
	}
	out := make([]tagRank, len(h))
	copy(out, h)
	slices.SortFunc(out, func(a, b tagRank) int {
		switch {
		case a.before(b):
			return -1
		case b.before(a):
			return 1
		}
		return 0
	})
	infos := make([]segment.Info, len(out))
	for i, r := range out {
		infos[i] = r.in
	}
	tot.exported = len(infos)
	return infos, tot
}
