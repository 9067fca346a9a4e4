package segment

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// maxRangeEnd bounds range ends so that a cursor pushed past its end by failed takers can
// never overflow int64: a failed take adds 1 (it would need 2^62 of them), NextN never moves
// the cursor past the end, AppendIDs adds only while the cursor is below the end.
const maxRangeEnd = math.MaxInt64 / 2

// MaxRangeEnd is the largest range end the generator serves (a store refuses to raise a
// counter to it or above).
const MaxRangeEnd = maxRangeEnd

// seg is one leased range [start, end). It is immutable except for its cursor, so a taker
// always compares its candidate with the bound of the range the candidate came from (the
// switch hazard of docs/HAZARDS.md cannot occur). Every failed take leaves cursor >= end, so "cursor
// >= end" is exactly "exhausted".
type seg struct {
	cursor    atomic.Int64 // next value to hand out; may run past end
	start     int64
	end       int64 // exclusive
	threshold int64 // taking a value >= threshold means more than PreloadRatio is consumed
}

// newSegLead returns the segment [start, end) whose preload starts once more than ratio of it
// is consumed, or earlier, when lead IDs are left (the demand during two loads), if ratio
// alone would start it later.
func newSegLead(start, end int64, ratio float64, lead int64) *seg {
	s := &seg{start: start, end: end}
	// consumed after taking v is v-start+1; "more than ratio*size" <=> v >= start+floor(ratio*size).
	s.threshold = start + int64(float64(end-start)*ratio)
	if lead > 0 {
		s.threshold = min(s.threshold, max(start, end-lead))
	}
	s.cursor.Store(start)
	return s
}

// take hands out the next value of s; ok is false when s is exhausted. The candidate and the
// bound come from the same immutable object.
func (s *seg) take() (v int64, ok bool) {
	v = s.cursor.Add(1) - 1
	return v, v < s.end
}

func (s *seg) exhausted() bool { return s.cursor.Load() >= s.end }

// used is the number of values taken from s (abandoned remainders included).
func (s *seg) used() int64 { return min(s.cursor.Load(), s.end) - s.start }

// Flags of buffer.flags; the hot path only asks "is it zero" (no next segment and no load:
// a preload is due once the threshold is passed).
const (
	flagLoading   = 1 << iota // a load is submitted or running
	flagNextReady             // next holds a loaded segment
	flagDead                  // dropped: never loads again
)

type takeState uint8

const (
	taken        takeState = iota // v is an ID
	takenPreload                  // v is an ID, and a preload is due
	notTaken                      // no current segment, or it is exhausted
)

// take is the inlinable fast path of Next on b.
func (b *buffer) take() (int64, takeState) {
	s := b.cur.Load()
	if s == nil {
		return 0, notTaken
	}
	v := s.cursor.Add(1) - 1
	if v >= s.end {
		return 0, notTaken
	}
	if v >= s.threshold && b.flags.Load() == 0 {
		return v, takenPreload
	}
	return v, taken
}

// buffer is the double buffer of one tag. Its first fields are what a lookup and a take
// read (the name, compared by tagIndex.load; cur; flags): a short name lives inline in name,
// so that round-robin INCR over many tags touches one line of the buffer, not also a
// separately allocated string.
type buffer struct {
	cur   atomic.Pointer[seg] // the segment being served; nil before the first load
	flags atomic.Uint32       // mirror of loading/next under mu, for the hot path
	tag   string              // owned: points into name when it fits there
	name  [tagInline]byte
	// retryAt (ns of Generator.mono, 0 = none): no new load before it (after a failure or
	// rejection).
	retryAt atomic.Int64
	gen     uint64    // refresh generation that created the buffer (under Generator.mu)
	guard   *tagGuard // shared by every buffer of this tag (see tagGuard)

	mu         sync.Mutex // slow path only: switch, load state
	next       *seg
	loading    bool
	dead       bool          // dropped from the tag map: no load starts or publishes any more
	guardRef   bool          // b holds a reference on guard (released once dead and not loading)
	done       chan struct{} // closed when the running load ends; nil when none runs
	initOK     bool          // a load succeeded once (the step state is valid)
	mark       int64         // highest range end granted (durable in Marks)
	step       int64         // size of the latest segment (the current dynamic step)
	minStep    int64         // the stored step (leaf_alloc.step) at the latest load
	fixed      int8          // 1: a shaped tag's counter row, leased at its stored step only; -1: not; 0: not known yet
	lastRefill time.Time
	since      time.Time     // when cur became current (the demand is measured from there)
	rate       int64         // demand (IDs per second) measured at the latest load, or remembered
	loadTook   time.Duration // duration of the latest successful load, or remembered
	lastErr    error
	retired    int64 // values used by segments switched out (issued + abandoned)
	abandoned  int64 // values skipped by NextN
	loads      loadLog

	// firstPending: counted in Generator.firstLoads (no segment published yet, not dropped).
	firstPending bool
	// The running load (loader.go): a refill (the buffer had published a segment when it
	// was submitted) or a first load, and whether a loader has started it (false while it
	// waits in a queue).
	refill     bool
	runStarted bool
}

// tagInline is how many bytes of a tag name a buffer holds inline (longer names get their
// own copy): with cur, flags and tag before it, the fields a lookup reads fill 64 bytes.
const tagInline = 32

// newBuffer returns the buffer of tag; it keeps its own copy of the name.
func newBuffer(tag string) *buffer {
	b := &buffer{}
	if len(tag) <= len(b.name) {
		n := copy(b.name[:], tag)
		b.tag = unsafe.String(&b.name[0], n)
	} else {
		b.tag = strings.Clone(tag)
	}
	return b
}

// tagGuard orders the leases of one tag across every buffer ever created for it in one
// Generator: a buffer dropped by a refresh (still held by in-flight requests) and its
// replacement share it. Its mutex is held across "read the mark, lease, check, raise the
// mark", so no lease of the tag can interleave with another: each range a buffer of the tag
// accepts starts at or above the end of every range accepted before it, which is what makes
// IDs strictly increasing per tag within the instance and the regression check hole-free.
// A guard lives while a buffer references it (and, once regressed, until the store is back
// above the mark).
type tagGuard struct {
	mu        sync.Mutex // held across one whole lease (store I/O; loaders only)
	mark      int64      // highest range end granted (at least the durable mark once read)
	regressed bool       // the latest lease was refused; sticky until max_id >= mark
	refs      int        // buffers referencing it (Generator.guardMu)
}

// setFlagsLocked recomputes flags from the state under mu.
func (b *buffer) setFlagsLocked() {
	var f uint32
	if b.loading {
		f |= flagLoading
	}
	if b.next != nil {
		f |= flagNextReady
	}
	if b.dead {
		f |= flagDead
	}
	b.flags.Store(f)
}

// issued estimates the IDs handed out from b (stats only).
func (b *buffer) issued() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.issuedLocked()
}

func (b *buffer) issuedLocked() int64 {
	n := b.retired - b.abandoned
	if s := b.cur.Load(); s != nil {
		n += s.used()
	}
	return n
}

// canServe reports whether b can hand out an ID without a load.
func (b *buffer) canServe() bool {
	if s := b.cur.Load(); s != nil && !s.exhausted() {
		return true
	}
	return b.flags.Load()&flagNextReady != 0
}
