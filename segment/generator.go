package segment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Generator serves segment IDs for many tags. It is safe for concurrent use.
//
// It owns a bounded pool of loader goroutines, a tag-refresh goroutine and a warm-start
// goroutine; Close stops and waits for them.
type Generator struct {
	cfg   Config
	store Store
	marks Marks
	log   *zap.Logger

	// tags maps a tag to its live buffer. Readers (the hot path) use sync.Map's lock-free
	// Load, which allocates nothing; adding or removing one tag costs O(1) under mu, never a
	// copy of the whole map.
	tags  sync.Map // string -> *buffer
	ntags atomic.Int64
	mu    sync.Mutex // serializes adding and removing tags; gen
	gen   uint64     // refresh generation

	guardMu sync.Mutex // leaf lock: guards, tagGuard.refs
	guards  map[string]*tagGuard

	negMu sync.Mutex
	neg   map[string]negEntry // tag -> why it is refused for now (unknown, or its load failed)

	jobs      chan *buffer
	poolMu    sync.RWMutex // submit (R) vs Close (W): nothing is queued after the drain
	closed    atomic.Bool
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	storeErr atomic.Pointer[string] // nil when the latest store call answered
	warmDone chan struct{}          // closed when the warm start has ended

	stats struct {
		loadsOK, loadsFailed, loadsRejected, loadsPanicked atomic.Int64
		regressions, unavailable, unknown                  atomic.Int64
		waits, warmLoads                                   atomic.Int64
		droppedIDs                                         atomic.Int64 // IDs issued by buffers since dropped
	}
	loadHist loadHist
}

// negEntry is a remembered refusal of a tag that is not held.
type negEntry struct {
	until int64 // unix ns of Config.Now
	err   error // the load error (ErrUnknownTag, or what made the first load fail)
}

var (
	errRejected = errors.New("segment: loader queue full")
	errClosed   = errors.New("segment: generator closed")
	// errStale: the buffer was dropped from the tag map; the caller looks the tag up again.
	errStale = errors.New("segment: buffer dropped")
)

// storeProbe is the refresh period while the store does not answer, so that readiness
// returns soon after the store does.
const storeProbe = time.Second

// New starts a Generator: it lists the store's tags once (a failure is logged, not fatal:
// tags are then found on first use and requests fail with ErrUnavailable until the store
// answers), then starts the loaders, the periodic tag refresh and the warm start (the first
// segment of the tags this instance served most recently, one load at a time).
func New(cfg Config, store Store, marks Marks, log *zap.Logger) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || marks == nil {
		return nil, errors.New("segment: New needs a Store and Marks")
	}
	if log == nil {
		log = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	g := &Generator{
		cfg:      cfg,
		store:    store,
		marks:    marks,
		log:      log,
		guards:   make(map[string]*tagGuard),
		neg:      make(map[string]negEntry),
		jobs:     make(chan *buffer, cfg.MaxPending),
		warmDone: make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel

	rctx, rcancel := context.WithTimeout(ctx, cfg.LoadTimeout)
	listed, err := g.refresh(rctx)
	rcancel()
	if err != nil {
		log.Warn("segment: initial tag list failed; tags will be loaded on first use", zap.Error(err))
	}
	var warm []string
	if err == nil && !cfg.NoWarmStart {
		warm = g.warmList(listed)
	}

	g.wg.Add(cfg.MaxLoaders + 1)
	for range cfg.MaxLoaders {
		go g.worker(ctx)
	}
	go g.refresher(ctx)
	if len(warm) == 0 {
		close(g.warmDone)
	} else {
		g.wg.Add(1)
		go g.warm(ctx, warm)
	}
	return g, nil
}

// Next returns the next ID of tag (INCR). It allocates nothing when tag is held and its
// current segment has IDs left.
func (g *Generator) Next(tag string) (int64, error) {
	if v, ok := g.tags.Load(tag); ok {
		b := v.(*buffer)
		// The per-buffer hot path (buffer.take, inlined): an atomic pointer load, an atomic
		// add, a comparison with the bound; past the preload threshold one atomic load of the
		// flags.
		if v, st := b.take(); st == taken {
			return v, nil
		} else {
			return g.nextMiss(b, v, st)
		}
	}
	return g.nextSlow(tag)
}

// nextMiss handles what the inlined fast path does not on a held tag: a preload to start
// after a successful take, or no value at all.
func (g *Generator) nextMiss(b *buffer, v int64, st takeState) (int64, error) {
	if st == takenPreload {
		g.preload(b)
		return v, nil
	}
	return g.nextSlow(b.tag)
}

// nextSlow handles what the inlined fast path does not: a tag not held, or no value in its
// current segment. A buffer dropped meanwhile (errStale) is never loaded again: the tag is
// looked up anew, so every later value comes from a buffer whose ranges lie above it.
func (g *Generator) nextSlow(tag string) (int64, error) {
	var w waiter
	for {
		b, err := g.buffer(tag)
		if err != nil {
			return 0, err
		}
		v, err := g.nextFrom(b, &w)
		if err != errStale {
			return v, err
		}
	}
}

func (g *Generator) nextFrom(b *buffer, w *waiter) (int64, error) {
	for {
		s := b.cur.Load()
		if s != nil {
			if v, ok := s.take(); ok {
				if v >= s.threshold && b.flags.Load() == 0 {
					g.preload(b)
				}
				return v, nil
			}
		}
		if _, err := g.advance(b, s, w, true); err != nil {
			return 0, err
		}
	}
}

// NextN reserves n contiguous IDs of tag from one segment and returns the highest; the caller
// owns [r-n+1, r] (INCRBY). When the rest of the current segment cannot hold n, the next
// segment is loaded (or awaited) first and n checked against its size: only when it fits is
// the rest abandoned (a gap) and the next segment used; otherwise ErrLimit, with nothing
// abandoned. A tag this instance does not hold is never created by a count that the first
// segment of a new tag (Config.DefaultStep) cannot hold.
func (g *Generator) NextN(tag string, n int64) (int64, error) {
	if n < 1 {
		return 0, tagError(tag, ErrLimit, fmt.Sprintf("count %d: must be at least 1", n))
	}
	if err := g.checkNewTagCount(tag, n); err != nil {
		return 0, err
	}
	var w waiter
	for {
		b, err := g.buffer(tag)
		if err != nil {
			return 0, err
		}
		v, err := g.nextNFrom(b, n, &w)
		if err != errStale {
			return v, err
		}
	}
}

func (g *Generator) nextNFrom(b *buffer, n int64, w *waiter) (int64, error) {
	for {
		s := b.cur.Load()
		if s != nil {
			// CAS, not Add: a failed Add(n) would push the cursor n past the end each time,
			// and repeated INCRBY calls while no segment can be loaded would wrap it.
			for c := s.cursor.Load(); c < s.end; c = s.cursor.Load() {
				if n <= s.end-c {
					if !s.cursor.CompareAndSwap(c, c+n) {
						continue
					}
					last := c + n - 1
					if last >= s.threshold && b.flags.Load() == 0 {
						g.preload(b)
					}
					return last, nil
				}
				// The rest does not fit. Abandon it only for a next segment that holds n.
				nx, err := g.advance(b, s, w, false)
				if err != nil {
					return 0, err
				}
				if nx == nil {
					break // s was switched out meanwhile
				}
				if size := nx.end - nx.start; n > size {
					return 0, tagError(b.tag, ErrLimit, fmt.Sprintf(
						"count %d exceeds what a segment holds now (max %d)", n, max(size, s.end-s.cursor.Load())))
				}
				if s.cursor.CompareAndSwap(c, s.end) {
					b.mu.Lock()
					b.abandoned += s.end - c
					b.mu.Unlock()
					break
				}
			}
		}
		if _, err := g.advance(b, s, w, true); err != nil {
			return 0, err
		}
	}
}

// checkNewTagCount refuses, without creating anything, an INCRBY of a tag that is neither
// held nor in the store when auto-create would give it segments smaller than n.
func (g *Generator) checkNewTagCount(tag string, n int64) error {
	if !g.cfg.AutoCreate || n <= g.cfg.DefaultStep {
		return nil
	}
	if _, ok := g.tags.Load(tag); ok {
		return nil
	}
	if err := ValidateTag(tag); err != nil {
		return err
	}
	r, ok := g.store.(maxIDReader)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.WaitTimeout)
	defer cancel()
	if _, err := r.MaxID(ctx, tag); errors.Is(err, ErrUnknownTag) {
		return tagError(tag, ErrLimit, fmt.Sprintf(
			"count %d exceeds the first segment of a new tag (max %d); the tag was not created", n, g.cfg.DefaultStep))
	}
	return nil // other errors show again, as the real error, on the load
}

// AppendIDs appends n strictly increasing IDs of tag to dst (IDS.SEGMENT); they may span
// segments. n must be in [0, Config.MaxBatch], else ErrLimit. On error dst is returned
// unchanged (IDs already taken are lost: a gap).
func (g *Generator) AppendIDs(dst []int64, tag string, n int) ([]int64, error) {
	if n < 0 || n > g.cfg.MaxBatch {
		return dst, tagError(tag, ErrLimit, fmt.Sprintf("count %d: must be between 0 and %d", n, g.cfg.MaxBatch))
	}
	base := len(dst)
	dst = slices.Grow(dst, n)
	var w waiter
	left := int64(n)
	for {
		b, err := g.buffer(tag)
		if err != nil {
			return dst[:base], err
		}
		if dst, err = g.appendFrom(dst, b, &left, &w); err != errStale {
			if err != nil {
				return dst[:base], err
			}
			return dst, nil
		}
	}
}

func (g *Generator) appendFrom(dst []int64, b *buffer, left *int64, w *waiter) ([]int64, error) {
	for *left > 0 {
		s := b.cur.Load()
		// The Load keeps failed calls from pushing an exhausted cursor further (see NextN).
		if s != nil && s.cursor.Load() < s.end {
			if v0 := s.cursor.Add(*left) - *left; v0 < s.end {
				m := min(*left, s.end-v0)
				for v := v0; v < v0+m; v++ {
					dst = append(dst, v)
				}
				*left -= m
				if v0+m-1 >= s.threshold && b.flags.Load() == 0 {
					g.preload(b)
				}
				continue
			}
		}
		if _, err := g.advance(b, s, w, true); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// buffer returns the live buffer of tag, creating it if needed.
func (g *Generator) buffer(tag string) (*buffer, error) {
	if v, ok := g.tags.Load(tag); ok {
		return v.(*buffer), nil
	}
	return g.lookupSlow(tag)
}

// lookupSlow handles a tag that is not held: validate, consult the negative cache, then
// create its buffer (loaded by the caller's slow path). Nothing is created when it fails.
func (g *Generator) lookupSlow(tag string) (*buffer, error) {
	if err := ValidateTag(tag); err != nil {
		return nil, err
	}
	if err := g.negative(tag); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addLocked(tag)
}

// addLocked creates the buffer of tag unless one is held (g.mu held). O(1).
func (g *Generator) addLocked(tag string) (*buffer, error) {
	if v, ok := g.tags.Load(tag); ok {
		return v.(*buffer), nil
	}
	if g.ntags.Load() >= int64(g.cfg.MaxTags) {
		return nil, tagError(tag, ErrLimit, fmt.Sprintf("too many tags held by this instance (max %d)", g.cfg.MaxTags))
	}
	b := newBuffer(strings.Clone(tag))
	b.gen = g.gen
	b.guard = g.acquireGuard(b.tag)
	b.guardRef = true
	g.tags.Store(b.tag, b)
	g.ntags.Add(1)
	return b, nil
}

func (g *Generator) acquireGuard(tag string) *tagGuard {
	g.guardMu.Lock()
	defer g.guardMu.Unlock()
	gd := g.guards[tag]
	if gd == nil {
		gd = &tagGuard{}
		g.guards[tag] = gd
	}
	gd.refs++
	return gd
}

// releaseGuardLocked drops b's reference on its guard (b.mu held). A regressed guard is kept
// without references, so the regressed state survives the buffers of the tag.
func (g *Generator) releaseGuardLocked(b *buffer) {
	if !b.guardRef {
		return
	}
	b.guardRef = false
	g.guardMu.Lock()
	defer g.guardMu.Unlock()
	gd := b.guard
	gd.refs--
	if gd.refs == 0 && g.guards[b.tag] == gd {
		gd.mu.Lock() // no lease runs: refs was > 0 during each
		regressed := gd.regressed
		gd.mu.Unlock()
		if !regressed {
			delete(g.guards, b.tag)
		}
	}
}

// waiter bounds the total wait of one request.
type waiter struct {
	deadline <-chan time.Time
	waited   bool // waited for a load that has ended
	counted  bool // counted in stats.waits
}

// advance is called after a take from s (b's current segment when read, or nil) failed or did
// not fit, so s is nil or about to be given up. It makes sure the next segment of b is loaded
// (starting a load or waiting for the running one, bounded by WaitTimeout) and returns it;
// with doSwitch it also makes it current. It returns (nil, nil) when b's current segment is
// no longer s, errStale when b was dropped, and the request's error when no segment can be
// had.
func (g *Generator) advance(b *buffer, s *seg, w *waiter, doSwitch bool) (*seg, error) {
	for {
		b.mu.Lock()
		if b.cur.Load() != s {
			b.mu.Unlock()
			w.waited = false
			return nil, nil
		}
		if nx := b.next; nx != nil { // never set on a dead buffer
			if doSwitch {
				if s != nil {
					b.retired += s.used()
				}
				b.cur.Store(nx)
				b.next = nil
				b.setFlagsLocked()
			}
			b.mu.Unlock()
			w.waited = false
			return nx, nil
		}
		if b.loading {
			done := b.done
			b.mu.Unlock()
			if w.deadline == nil {
				w.deadline = g.cfg.after(g.cfg.WaitTimeout)
			}
			if !w.counted {
				w.counted = true
				g.stats.waits.Add(1)
			}
			select {
			case <-done:
				w.waited = true
				continue
			case <-w.deadline:
				b.mu.Lock()
				err := g.failureLocked(b, "no segment ready within the wait timeout")
				b.mu.Unlock()
				return nil, err
			}
		}
		// No segment and no load. A load we waited for has failed, or one failed recently:
		// report it rather than hit the store again before RetryBackoff.
		if b.dead && (!w.waited || b.lastErr == nil) && !g.closed.Load() {
			b.mu.Unlock()
			w.waited = false // the next buffer of the tag starts afresh
			return nil, errStale
		}
		if w.waited || (b.lastErr != nil && g.cfg.Now().UnixNano() < b.retryAt.Load()) || g.closed.Load() {
			err := g.failureLocked(b, "no segment ready")
			b.mu.Unlock()
			return nil, err
		}
		g.startLoadLocked(b)
		b.mu.Unlock()
		g.submit(b)
	}
}

// failureLocked builds the error of a request that found no segment (b.mu held).
func (g *Generator) failureLocked(b *buffer, what string) error {
	err := b.lastErr
	if g.closed.Load() {
		err = errClosed
	}
	return g.requestError(b.tag, err, what)
}

// requestError turns the error of a load into the error of a request.
func (g *Generator) requestError(tag string, err error, what string) error {
	var te *TagError
	switch {
	case errors.Is(err, ErrUnknownTag):
		g.stats.unknown.Add(1)
		detail := "no such tag in the store"
		if !g.cfg.AutoCreate {
			detail += " (auto-create is off)"
		}
		return &TagError{Tag: strings.Clone(tag), Err: ErrUnknownTag, Detail: detail}
	case errors.Is(err, ErrRegression) && errors.As(err, &te):
		return te
	case errors.Is(err, ErrLimit) && errors.As(err, &te):
		return te
	}
	g.stats.unavailable.Add(1)
	if err != nil {
		what += "; last load: " + err.Error()
	}
	return &TagError{Tag: strings.Clone(tag), Err: ErrUnavailable, Detail: what}
}

// Info describes one segment of a tag's double buffer.
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
// fails with ErrUnknownTag.
func (g *Generator) Info(tag string) (Info, error) {
	v, ok := g.tags.Load(tag)
	if !ok {
		if err := ValidateTag(tag); err != nil {
			return Info{}, err
		}
		return Info{}, tagError(tag, ErrUnknownTag, "tag not held by this instance")
	}
	b := v.(*buffer)
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

// Tags returns the held tags, sorted (IDS.TAGS).
func (g *Generator) Tags() []string {
	out := make([]string, 0, g.ntags.Load())
	g.tags.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	slices.Sort(out)
	return out
}

// Marks lists every durable mark of this instance, by tag name (IDS.MARKS): the highest range
// end ever granted per tag, read from the marks file, for held tags and for tags not loaded
// since the start (or whose load failed) alike. An error when the Marks cannot list.
func (g *Generator) Marks() ([]Mark, error) {
	ml, ok := g.marks.(MarkLister)
	if !ok {
		return nil, errors.New("segment: the marks store cannot list its marks")
	}
	return ml.AllMarks()
}

// Create inserts tag t into the store (IDS.CREATE). A zero Step means Config.DefaultStep; a
// zero MaxID means 1, or this instance's mark of the tag when it issued IDs of it before (a
// tag retired or deleted and created again continues above them). A START below that mark is
// refused with ErrLimit. ErrTagExists when it exists, ErrInvalidTag for a bad name, ErrLimit
// when this instance holds Config.MaxTags tags.
func (g *Generator) Create(ctx context.Context, t Tag) error {
	if err := ValidateTag(t.Name); err != nil {
		return err
	}
	t.Name = strings.Clone(t.Name)
	if t.Step == 0 {
		t.Step = g.cfg.DefaultStep
	}
	if t.Step < 0 || t.MaxID < 0 || t.MaxID >= maxRangeEnd {
		return &TagError{Tag: t.Name, Err: ErrLimit, Detail: fmt.Sprintf("step %d, start %d: must be positive", t.Step, t.MaxID)}
	}
	if _, held := g.tags.Load(t.Name); !held && g.ntags.Load() >= int64(g.cfg.MaxTags) {
		return &TagError{Tag: t.Name, Err: ErrLimit, Detail: fmt.Sprintf("too many tags held by this instance (max %d)", g.cfg.MaxTags)}
	}
	mark, err := g.marks.Mark(t.Name)
	if err != nil {
		return fmt.Errorf("segment: create tag %q: read mark: %w", t.Name, err)
	}
	switch {
	case t.MaxID == 0:
		t.MaxID = max(1, mark)
	case t.MaxID < mark:
		return &TagError{Tag: t.Name, Err: ErrLimit, Detail: fmt.Sprintf(
			"start %d is below %d: this instance already issued IDs of this tag up to there", t.MaxID, mark)}
	}
	if err := g.store.Create(ctx, t); err != nil {
		if errors.Is(err, ErrTagExists) {
			return &TagError{Tag: t.Name, Err: ErrTagExists, Detail: "tag already exists"}
		}
		return fmt.Errorf("segment: create tag %q: %w", t.Name, err)
	}
	g.unforget(t.Name)
	g.log.Info("segment: tag created", zap.String("tag", t.Name), zap.Int64("start", t.MaxID), zap.Int64("step", t.Step))
	return nil
}

// Retire stops serving tag from this instance: its buffer is dropped (the rest of its
// segments is a gap). Its durable mark stays, so a later re-creation of the tag, here or by
// auto-create, can never reissue its IDs (Create starts above the mark; a lower range is
// refused as a regression). It reports whether the tag was held.
func (g *Generator) Retire(tag string) bool {
	v, ok := g.tags.Load(tag)
	if !ok {
		return false
	}
	g.drop(v.(*buffer))
	g.log.Info("segment: tag retired", zap.String("tag", tag))
	return true
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
	Tags          int   // tags held
	LoadSeconds   LoadHistogram
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
		Tags:          int(g.ntags.Load()),
		LoadSeconds:   g.loadHist.snapshot(),
	}
	g.tags.Range(func(_, v any) bool {
		st.IDs += v.(*buffer).issued()
		return true
	})
	return st
}

// Health is what readiness is decided from.
type Health struct {
	// StoreOK: the latest store call (tag list or lease) was answered. Errors of one tag
	// (unknown, regression) count as answers.
	StoreOK bool
	// StoreError is the error of the latest store call when it failed.
	StoreError string
	// Serving is the number of held tags that can serve now (IDs left in the current
	// segment, or the next one loaded). Counted only when the store does not answer.
	Serving int
	// Warming: the warm start is still loading first segments.
	Warming bool
}

// Ready reports whether the instance can serve: the store answers (any tag can then be
// loaded on its first request), or, while it does not, at least one held tag still has IDs.
func (h Health) Ready() bool { return h.StoreOK || h.Serving > 0 }

// Health returns the readiness inputs (/readyz). While the store answers it costs nothing;
// otherwise one pass over the held tags.
func (g *Generator) Health() Health {
	h := Health{StoreOK: true}
	select {
	case <-g.warmDone:
	default:
		h.Warming = true
	}
	if e := g.storeErr.Load(); e != nil {
		h.StoreOK, h.StoreError = false, *e
		g.tags.Range(func(_, v any) bool {
			if v.(*buffer).canServe() {
				h.Serving++
			}
			return true
		})
	}
	return h
}

// WarmDone is closed when the warm start has ended.
func (g *Generator) WarmDone() <-chan struct{} { return g.warmDone }

// storeAnswered records the outcome of a store call for Health: err is nil or an error of
// the call; errors of one tag mean the store answered.
func (g *Generator) storeAnswered(err error) {
	switch {
	case err == nil, errors.Is(err, ErrUnknownTag), errors.Is(err, ErrRegression),
		errors.Is(err, ErrLimit), errors.Is(err, ErrTagExists), errors.Is(err, ErrInvalidTag):
		if g.storeErr.Load() != nil {
			g.storeErr.Store(nil)
		}
	case errors.Is(err, errRejected), errors.Is(err, errClosed), errors.Is(err, errStale):
	default:
		msg := err.Error()
		g.storeErr.Store(&msg)
	}
}

// Close stops the loaders, the refresh and the warm start, cancelling running loads, and
// waits for them. It is idempotent. Segments already held keep being served; anything needing
// a load fails with ErrUnavailable.
func (g *Generator) Close() error {
	g.closeOnce.Do(func() {
		g.poolMu.Lock()
		g.closed.Store(true)
		g.poolMu.Unlock()
		g.cancel()
		g.wg.Wait()
		for {
			select {
			case b := <-g.jobs:
				g.finish(b, nil, errClosed)
				continue
			default:
			}
			break
		}
	})
	return nil
}

// negative returns the remembered refusal of tag, if any.
func (g *Generator) negative(tag string) error {
	g.negMu.Lock()
	e, ok := g.neg[tag]
	if ok && g.cfg.Now().UnixNano() >= e.until {
		delete(g.neg, tag)
		ok = false
	}
	g.negMu.Unlock()
	if !ok {
		return nil
	}
	what := "no segment ready"
	if !errors.Is(e.err, ErrUnknownTag) {
		what = "the latest load of this tag failed; retrying after a back-off"
	}
	return g.requestError(tag, e.err, what)
}

// remember refuses tag (an owned string) for ttl with err, within MaxNegative.
func (g *Generator) remember(tag string, err error, ttl time.Duration) {
	now := g.cfg.Now().UnixNano()
	g.negMu.Lock()
	defer g.negMu.Unlock()
	if len(g.neg) >= g.cfg.MaxNegative {
		for k, e := range g.neg {
			if e.until <= now {
				delete(g.neg, k)
			}
		}
		for k := range g.neg { // still full: evict arbitrary entries
			if len(g.neg) < g.cfg.MaxNegative {
				break
			}
			delete(g.neg, k)
		}
	}
	g.neg[tag] = negEntry{until: now + int64(ttl), err: err}
}

func (g *Generator) unforget(tag string) {
	g.negMu.Lock()
	delete(g.neg, tag)
	g.negMu.Unlock()
}

// drop kills b and removes it from the tag map if it is still the buffer of its tag: no load
// of b starts or publishes any more, and requests holding b look the tag up again. b is dead
// before it leaves the map (both under g.mu), so no replacement can exist while b may still
// accept a range: every range of a replacement is leased after b's last one. The guard stays
// referenced until a load still running on b ends.
func (g *Generator) drop(b *buffer) {
	g.mu.Lock()
	b.mu.Lock()
	wasDead := b.dead
	if !wasDead {
		b.dead = true
		b.next = nil
		b.setFlagsLocked()
		if !b.loading {
			g.releaseGuardLocked(b)
		}
	}
	if v, ok := g.tags.Load(b.tag); ok && v == b {
		g.tags.Delete(b.tag)
		g.ntags.Add(-1)
	}
	b.mu.Unlock()
	g.mu.Unlock()
	if !wasDead {
		g.stats.droppedIDs.Add(b.issued())
	}
}

// refresh drops the held buffers of tags the store no longer lists (buffers created on first
// use while the list was being read are kept) and returns the listed tags. It creates no
// buffer: a tag is held only once it is requested or warmed.
func (g *Generator) refresh(ctx context.Context) (map[string]struct{}, error) {
	g.mu.Lock()
	g.gen++
	gen := g.gen
	g.mu.Unlock()
	names, err := g.store.Tags(ctx)
	g.storeAnswered(err)
	if err != nil {
		return nil, fmt.Errorf("segment: list tags: %w", err)
	}
	want := make(map[string]struct{}, len(names))
	// MySQL's default collations compare biz_tag case-insensitively: the store serves "Foo"
	// from row "foo" but lists "foo". Keep such buffers (tags are ASCII); a buffer whose row
	// is really gone is dropped by its next load (ErrUnknownTag).
	folded := make(map[string]struct{}, len(names))
	for _, n := range names {
		if err := ValidateTag(n); err != nil {
			g.log.Warn("segment: store has a tag that cannot be served", zap.Error(err))
			continue
		}
		want[n] = struct{}{}
		folded[strings.ToLower(n)] = struct{}{}
	}
	var dropped []*buffer
	g.tags.Range(func(k, v any) bool {
		b := v.(*buffer)
		if _, ok := folded[strings.ToLower(k.(string))]; !ok {
			g.mu.Lock()
			old := b.gen < gen
			g.mu.Unlock()
			if old {
				dropped = append(dropped, b)
			}
		}
		return true
	})
	for _, b := range dropped {
		g.drop(b)
		g.log.Info("segment: tag no longer in the store; dropped", zap.String("tag", b.tag))
	}
	return want, nil
}

func (g *Generator) refresher(ctx context.Context) {
	defer g.wg.Done()
	for {
		d := g.cfg.RefreshInterval
		if g.storeErr.Load() != nil {
			d = min(d, storeProbe)
		}
		select {
		case <-ctx.Done():
			return
		case <-g.cfg.after(d):
		}
		rctx, cancel := context.WithTimeout(ctx, g.cfg.LoadTimeout)
		_, err := g.refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			g.log.Warn("segment: tag refresh failed", zap.Error(err))
		}
	}
}

// markLister is implemented by Marks that can list the tags they hold, most recently raised
// first (*MarkFile, *BoltStore): the tags this instance served before a restart.
type markLister interface {
	RecentTags(n int) ([]string, error)
}

// warmList returns the tags to warm: those this instance raised a mark for most recently that
// the store still lists, at most Config.WarmTags and what Config.MaxTags leaves.
func (g *Generator) warmList(listed map[string]struct{}) []string {
	ml, ok := g.marks.(markLister)
	if !ok {
		return nil
	}
	recent, err := ml.RecentTags(g.cfg.WarmTags)
	if err != nil {
		g.log.Warn("segment: warm start: cannot list marks", zap.Error(err))
		return nil
	}
	out := recent[:0]
	for _, t := range recent {
		if _, ok := listed[t]; ok {
			out = append(out, t)
		}
	}
	return out
}

// warm loads the first segment of each tag, one load at a time (so that a restart does not
// flood the store), and closes warmDone when done or cancelled.
func (g *Generator) warm(ctx context.Context, tags []string) {
	defer g.wg.Done()
	defer close(g.warmDone)
	g.log.Info("segment: warm start", zap.Int("tags", len(tags)))
	for _, t := range tags {
		if ctx.Err() != nil {
			return
		}
		b, err := g.buffer(t)
		if err != nil {
			if errors.Is(err, ErrLimit) {
				return
			}
			continue
		}
		b.mu.Lock()
		if b.loading || b.next != nil || b.cur.Load() != nil || b.dead || b.lastErr != nil {
			b.mu.Unlock()
			continue
		}
		g.startLoadLocked(b)
		done := b.done
		b.mu.Unlock()
		g.submit(b)
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
		b.mu.Lock()
		ok := b.next != nil || b.cur.Load() != nil
		b.mu.Unlock()
		if ok {
			g.stats.warmLoads.Add(1)
		}
	}
}
