package segment

import (
	"errors"
	"time"
)

// SegmentInfo describes one segment of a tag's double buffer.
type SegmentInfo struct {
	Loaded    bool
	Start     int64 // first ID of the range
	End       int64 // exclusive end of the range
	Next      int64 // next ID to hand out (End when exhausted)
	Remaining int64
}

// Info is the state of a tag's buffer (Leaf's /cache page).
type Info struct {
	Tag        string
	Current    SegmentInfo // the segment being served
	Next       SegmentInfo // the preloaded segment, if any
	NextReady  bool
	Loading    bool
	InitOK     bool         // a load has succeeded
	Step       int64        // current (dynamic) step: size of the latest segment loaded
	MinStep    int64        // the tag's stored step
	Mark       int64        // highest range end granted (the regression guard)
	LastRefill time.Time    // time of the latest successful load (zero if none)
	LastError  string       // error of the latest failed load, if the latest load failed
	Issued     int64        // IDs handed out from this buffer (an estimate, as Stats.IDs)
	Loads      []LoadRecord // the latest loads, newest first
	// MaxCount is the largest n that NextN (INCRBY) accepts now without ErrLimit: the rest
	// of the current segment, or the size of the next one (loaded, or the least the next
	// load can lease: the stored step, and at least half the current step).
	MaxCount int64
}

func segInfo(s *seg) SegmentInfo {
	if s == nil {
		return SegmentInfo{}
	}
	next := min(s.cursor.Load(), s.end)
	return SegmentInfo{Loaded: true, Start: s.start, End: s.end, Next: next, Remaining: s.end - next}
}

// Info returns the buffer state of tag (IDS.INFO). It does not load anything; a tag not held
// fails with ErrUnknownTag. When its first load failed moments ago (the negative cache), that
// load's error (ErrUnavailable, with the store's cause) is the TagError's Cause.
func (g *Generator) Info(tag string) (Info, error) {
	b := g.tags.load(tag)
	if b == nil {
		if err := ValidateTag(tag); err != nil {
			return Info{}, err
		}
		te := tagError(tag, ErrUnknownTag, "tag not held by this instance")
		if err := g.negative(tag); err != nil && errors.Is(err, ErrUnavailable) {
			te.Cause = err
		}
		return Info{}, te
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	in := Info{
		Tag:        b.tag,
		Current:    segInfo(b.cur.Load()),
		Next:       segInfo(b.next),
		NextReady:  b.next != nil,
		Loading:    b.loading,
		InitOK:     b.initOK,
		Step:       b.step,
		MinStep:    b.minStep,
		Mark:       b.mark,
		LastRefill: b.lastRefill,
		Issued:     b.issuedLocked(),
		Loads:      b.loads.list(),
	}
	if b.lastErr != nil {
		in.LastError = b.lastErr.Error()
	}
	switch {
	case b.next != nil:
		in.MaxCount = b.next.end - b.next.start
	case b.initOK:
		in.MaxCount = max(b.minStep, b.step/2)
	}
	in.MaxCount = max(in.MaxCount, in.Current.Remaining)
	return in, nil
}

// Marks lists every durable mark of this instance, by tag name (IDS.MARKS): the highest range
// end ever granted per tag, read from the marks file, for held tags and for tags not loaded
// since the start (or whose load failed) alike. An error when the Marks cannot list.
func (g *Generator) Marks() ([]Mark, error) {
	return listed(g.marks.AllMarks())
}

// MarksAfter lists up to n durable marks whose tag sorts after the given one, by tag name:
// one page of Marks (IDS.MARKS cursor), read without the others.
func (g *Generator) MarksAfter(after string, n int) ([]Mark, error) {
	return listed(g.marks.MarksAfter(after, n))
}

// listed is a listing of the marks, or, from Marks that cannot list, the error that says so.
func listed(ms []Mark, err error) ([]Mark, error) {
	if errors.Is(err, ErrNotSupported) {
		return nil, errors.New("segment: the marks store cannot list its marks")
	}
	return ms, err
}

// Stats are counters since New.
type Stats struct {
	IDs           int64 // IDs handed out (an estimate: NextN remainders are subtracted, dropped tags kept)
	LoadsOK       int64
	LoadsFailed   int64
	LoadsRejected int64 // loads refused by the full loader queue or a closed generator
	LoadsPanicked int64 // loads that panicked (counted in LoadsFailed too)
	Regressions   int64 // ranges refused by the regression guard
	Unavailable   int64 // requests failed with ErrUnavailable
	UnknownTag    int64 // requests failed with ErrUnknownTag
	Waits         int64 // requests that waited for a load (no segment was ready)
	WarmLoads     int64 // first segments loaded by the warm start
	// StepCapped counts loads whose demand needed a segment larger than MaxStep to outlast the
	// load after it (see demandStep): raise --max-step, or bring the store closer.
	StepCapped  int64
	Tags        int // tags held
	LoadSeconds LoadHistogram
	// RemainderResumed: IDs of the previous graceful shutdown's remainder file served first
	// (published at New). RemainderDiscarded: IDs of it refused (another store, consumed
	// before, failed the store or marks check, unreadable): a gap, never served.
	RemainderResumed, RemainderDiscarded int64
}

// Stats returns the counters (INFO segment). It costs one pass over the held tags.
func (g *Generator) Stats() Stats {
	st := Stats{
		IDs:           g.stats.droppedIDs.Load(),
		LoadsOK:       g.stats.loadsOK.Load(),
		LoadsFailed:   g.stats.loadsFailed.Load(),
		LoadsRejected: g.stats.loadsRejected.Load(),
		LoadsPanicked: g.stats.loadsPanicked.Load(),
		Regressions:   g.stats.regressions.Load(),
		Unavailable:   g.stats.unavailable.Load(),
		UnknownTag:    g.stats.unknown.Load(),
		Waits:         g.stats.waits.Load(),
		WarmLoads:     g.stats.warmLoads.Load(),
		StepCapped:    g.stats.stepCapped.Load(),
		Tags:          int(g.ntags.Load()),
		LoadSeconds:   g.loadHist.snapshot(),
	}
	st.RemainderResumed = g.stats.remainderResumed.Load()
	st.RemainderDiscarded = g.stats.remainderDiscarded.Load()
	g.tags.each(func(b *buffer) bool {
		st.IDs += b.issued()
		return true
	})
	return st
}
