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
// It owns a bounded pool of loader goroutines and a tag-refresh goroutine; Close stops and
// waits for them.
type Generator struct {
	cfg   Config
	store Store
	marks Marks
	log   *zap.Logger

	// tags is copy-on-write: readers load the map and index it without locks or allocation;
	// writers (mu) copy it.
	tags atomic.Pointer[map[string]*buffer]
	mu   sync.Mutex
	gen  uint64 // refresh generation, under mu

	negMu sync.Mutex
	neg   map[string]int64 // unknown tag -> expiry (unix ns of Config.Now)

	jobs      chan *buffer
	poolMu    sync.RWMutex // submit (R) vs Close (W): nothing is queued after the drain
	closed    atomic.Bool
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	stats struct {
		loadsOK, loadsFailed, loadsRejected atomic.Int64
		regressions, unavailable, unknown   atomic.Int64
		droppedIDs                          atomic.Int64 // IDs issued by buffers since dropped
	}
	loadHist loadHist
}

var (
	errRejected = errors.New("segment: loader queue full")
	errClosed   = errors.New("segment: generator closed")
)

// New starts a Generator: it lists the store's tags once (a failure is logged, not fatal:
// tags are then found on first use and requests fail with ErrUnavailable until the store
// answers), then starts the loaders and the periodic tag refresh.
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
		cfg:   cfg,
		store: store,
		marks: marks,
		log:   log,
		neg:   make(map[string]int64),
		jobs:  make(chan *buffer, cfg.MaxPending),
	}
	empty := map[string]*buffer{}
	g.tags.Store(&empty)
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel

	rctx, rcancel := context.WithTimeout(ctx, cfg.LoadTimeout)
	if err := g.refresh(rctx); err != nil {
		log.Warn("segment: initial tag list failed; tags will be loaded on first use", zap.Error(err))
	}
	rcancel()

	g.wg.Add(cfg.MaxLoaders + 1)
	for range cfg.MaxLoaders {
		go g.worker(ctx)
	}
	go g.refresher(ctx)
	return g, nil
}

// Next returns the next ID of tag (INCR). It allocates nothing when tag is held and its
// current segment has IDs left.
func (g *Generator) Next(tag string) (int64, error) {
	b := (*g.tags.Load())[tag]
	if b == nil {
		var err error
		if b, err = g.lookupSlow(tag); err != nil {
			return 0, err
		}
	}
	// The per-buffer hot path (buffer.take, inlined): an atomic pointer load, an atomic add,
	// a comparison with the bound; past the preload threshold one atomic load of the flags.
	if v, st := b.take(); st == taken {
		return v, nil
	} else {
		return g.nextMiss(b, v, st)
	}
}

// nextMiss handles what the inlined fast path does not: a preload to start after a
// successful take, or no value at all.
func (g *Generator) nextMiss(b *buffer, v int64, st takeState) (int64, error) {
	if st == takenPreload {
		g.preload(b)
		return v, nil
	}
	return g.nextSlow(b)
}

func (g *Generator) nextSlow(b *buffer) (int64, error) {
	var w waiter
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
		if err := g.advance(b, s, &w); err != nil {
			return 0, err
		}
	}
}

// NextN reserves n contiguous IDs of tag from one segment and returns the highest; the caller
// owns [r-n+1, r] (INCRBY). If the current segment cannot hold n, its remainder is abandoned
// and the next segment is used. n must be in [1, size of the current segment], else ErrLimit
// (the message gives the maximum).
func (g *Generator) NextN(tag string, n int64) (int64, error) {
	if n < 1 {
		return 0, tagError(tag, ErrLimit, fmt.Sprintf("count %d: must be at least 1", n))
	}
	b, err := g.buffer(tag)
	if err != nil {
		return 0, err
	}
	var w waiter
	for {
		s := b.cur.Load()
		if s != nil {
			if size := s.end - s.start; n > size {
				return 0, tagError(tag, ErrLimit,
					fmt.Sprintf("count %d exceeds what one segment holds (max %d)", n, size))
			}
			// CAS, not Add: a failed Add(n) would push the cursor n past the end each time,
			// and repeated INCRBY calls while no segment can be loaded would wrap it.
			// c < end <= maxRangeEnd and n <= size, so c+n cannot overflow.
			for c := s.cursor.Load(); c < s.end; c = s.cursor.Load() {
				if c+n <= s.end {
					if !s.cursor.CompareAndSwap(c, c+n) {
						continue
					}
					last := c + n - 1
					if last >= s.threshold && b.flags.Load() == 0 {
						g.preload(b)
					}
					return last, nil
				}
				if s.cursor.CompareAndSwap(c, s.end) { // the rest does not fit: abandon it
					b.mu.Lock()
					b.abandoned += s.end - c
					b.mu.Unlock()
					break
				}
			}
		}
		if err := g.advance(b, s, &w); err != nil {
			return 0, err
		}
	}
}

// AppendIDs appends n strictly increasing IDs of tag to dst (IDS.SEGMENT); they may span
// segments. n must be in [0, Config.MaxBatch], else ErrLimit. On error dst is returned
// unchanged (IDs already taken are lost: a gap).
func (g *Generator) AppendIDs(dst []int64, tag string, n int) ([]int64, error) {
	if n < 0 || n > g.cfg.MaxBatch {
		return dst, tagError(tag, ErrLimit, fmt.Sprintf("count %d: must be between 0 and %d", n, g.cfg.MaxBatch))
	}
	b, err := g.buffer(tag)
	if err != nil {
		return dst, err
	}
	base := len(dst)
	dst = slices.Grow(dst, n)
	var w waiter
	for left := int64(n); left > 0; {
		s := b.cur.Load()
		// The Load keeps failed calls from pushing an exhausted cursor further (see NextN).
		if s != nil && s.cursor.Load() < s.end {
			if v0 := s.cursor.Add(left) - left; v0 < s.end {
				m := min(left, s.end-v0)
				for v := v0; v < v0+m; v++ {
					dst = append(dst, v)
				}
				left -= m
				if v0+m-1 >= s.threshold && b.flags.Load() == 0 {
					g.preload(b)
				}
				continue
			}
		}
		if err := g.advance(b, s, &w); err != nil {
			return dst[:base], err
		}
	}
	return dst, nil
}

// buffer returns the buffer of tag, creating it if needed.
func (g *Generator) buffer(tag string) (*buffer, error) {
	if b := (*g.tags.Load())[tag]; b != nil {
		return b, nil
	}
	return g.lookupSlow(tag)
}

// lookupSlow handles a tag that is not held: validate, consult the negative cache, then
// create its buffer (loaded by the caller's slow path).
func (g *Generator) lookupSlow(tag string) (*buffer, error) {
	if err := ValidateTag(tag); err != nil {
		return nil, err
	}
	if g.isNegative(tag) {
		g.stats.unknown.Add(1)
		return nil, tagError(tag, ErrUnknownTag, "no such tag in the store")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := *g.tags.Load()
	if b := old[tag]; b != nil {
		return b, nil
	}
	if len(old) >= g.cfg.MaxTags {
		return nil, tagError(tag, ErrLimit, fmt.Sprintf("too many tags (max %d)", g.cfg.MaxTags))
	}
	b := newBuffer(strings.Clone(tag))
	b.gen = g.gen
	m := make(map[string]*buffer, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[b.tag] = b
	g.tags.Store(&m)
	return b, nil
}

// waiter bounds the total wait of one request.
type waiter struct {
	deadline <-chan time.Time
	waited   bool // waited for a load that has ended
}

// advance is called after a take from s (b's current segment when read, or nil) failed, so s
// is nil or exhausted. It returns nil once b's current segment is no longer s (switched to
// the next segment, or first loaded); otherwise it makes sure a load runs and waits for it,
// bounded by WaitTimeout, and returns the error when none can be had.
func (g *Generator) advance(b *buffer, s *seg, w *waiter) error {
	for {
		b.mu.Lock()
		if b.cur.Load() != s {
			b.mu.Unlock()
			w.waited = false
			return nil
		}
		if b.next != nil {
			if s != nil {
				b.retired += s.used()
			}
			b.cur.Store(b.next)
			b.next = nil
			b.setFlagsLocked()
			b.mu.Unlock()
			w.waited = false
			return nil
		}
		if b.loading {
			done := b.done
			b.mu.Unlock()
			if w.deadline == nil {
				w.deadline = g.cfg.after(g.cfg.WaitTimeout)
			}
			select {
			case <-done:
				w.waited = true
				continue
			case <-w.deadline:
				b.mu.Lock()
				err := g.failureLocked(b, "no segment ready within the wait timeout")
				b.mu.Unlock()
				return err
			}
		}
		// No segment and no load. A load we waited for has failed, or one failed recently:
		// report it rather than hit the store again before RetryBackoff.
		if w.waited || (b.lastErr != nil && g.cfg.Now().UnixNano() < b.retryAt.Load()) || g.closed.Load() {
			err := g.failureLocked(b, "no segment ready")
			b.mu.Unlock()
			return err
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
	var te *TagError
	switch {
	case errors.Is(err, ErrUnknownTag):
		g.stats.unknown.Add(1)
		detail := "no such tag in the store"
		if !g.cfg.AutoCreate {
			detail += " (auto-create is off)"
		}
		return &TagError{Tag: b.tag, Err: ErrUnknownTag, Detail: detail}
	case errors.Is(err, ErrRegression) && errors.As(err, &te):
		return te
	}
	g.stats.unavailable.Add(1)
	if err != nil {
		what += "; last load: " + err.Error()
	}
	return &TagError{Tag: b.tag, Err: ErrUnavailable, Detail: what}
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
	b := (*g.tags.Load())[tag]
	if b == nil {
		if err := ValidateTag(tag); err != nil {
			return Info{}, err
		}
		return Info{}, tagError(tag, ErrUnknownTag, "tag not held by this instance")
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
	return in, nil
}

// Tags returns the held tags, sorted (IDS.TAGS).
func (g *Generator) Tags() []string {
	m := *g.tags.Load()
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Create inserts tag t into the store (IDS.CREATE). A zero Step means Config.DefaultStep, a
// zero MaxID means 1. ErrTagExists when it exists, ErrInvalidTag for a bad name.
func (g *Generator) Create(ctx context.Context, t Tag) error {
	if err := ValidateTag(t.Name); err != nil {
		return err
	}
	t.Name = strings.Clone(t.Name)
	if t.Step == 0 {
		t.Step = g.cfg.DefaultStep
	}
	if t.MaxID == 0 {
		t.MaxID = 1
	}
	if t.Step < 0 || t.MaxID < 0 || t.MaxID >= maxRangeEnd {
		return &TagError{Tag: t.Name, Err: ErrLimit, Detail: fmt.Sprintf("step %d, start %d: must be positive", t.Step, t.MaxID)}
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

// Stats are counters since New.
type Stats struct {
	IDs           int64 // IDs handed out (an estimate: NextN remainders are subtracted, dropped tags kept)
	LoadsOK       int64
	LoadsFailed   int64
	LoadsRejected int64 // loads refused by the full loader queue or a closed generator
	Regressions   int64 // ranges refused by the regression guard
	Unavailable   int64 // requests failed with ErrUnavailable
	UnknownTag    int64 // requests failed with ErrUnknownTag
	Tags          int   // tags held
	LoadSeconds   LoadHistogram
}

// Stats returns the counters (INFO segment). It costs one pass over the held tags.
func (g *Generator) Stats() Stats {
	m := *g.tags.Load()
	st := Stats{
		IDs:           g.stats.droppedIDs.Load(),
		LoadsOK:       g.stats.loadsOK.Load(),
		LoadsFailed:   g.stats.loadsFailed.Load(),
		LoadsRejected: g.stats.loadsRejected.Load(),
		Regressions:   g.stats.regressions.Load(),
		Unavailable:   g.stats.unavailable.Load(),
		UnknownTag:    g.stats.unknown.Load(),
		Tags:          len(m),
		LoadSeconds:   g.loadHist.snapshot(),
	}
	for _, b := range m {
		st.IDs += b.issued()
	}
	return st
}

// Close stops the loaders and the refresh, cancelling running loads, and waits for them. It
// is idempotent. Segments already held keep being served; anything needing a load fails with
// ErrUnavailable.
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

// isNegative reports whether tag is remembered as unknown.
func (g *Generator) isNegative(tag string) bool {
	g.negMu.Lock()
	defer g.negMu.Unlock()
	exp, ok := g.neg[tag]
	if !ok {
		return false
	}
	if g.cfg.Now().UnixNano() < exp {
		return true
	}
	delete(g.neg, tag)
	return false
}

// remember records tag (an owned string) as unknown for NegativeTTL, within MaxNegative.
func (g *Generator) remember(tag string) {
	now := g.cfg.Now().UnixNano()
	g.negMu.Lock()
	defer g.negMu.Unlock()
	if len(g.neg) >= g.cfg.MaxNegative {
		for k, exp := range g.neg {
			if exp <= now {
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
	g.neg[tag] = now + int64(g.cfg.NegativeTTL)
}

func (g *Generator) unforget(tag string) {
	g.negMu.Lock()
	delete(g.neg, tag)
	g.negMu.Unlock()
}

// drop removes b from the tag map if it is still the buffer of its tag.
func (g *Generator) drop(b *buffer) {
	g.mu.Lock()
	old := *g.tags.Load()
	if old[b.tag] != b {
		g.mu.Unlock()
		return
	}
	m := make(map[string]*buffer, len(old))
	for k, v := range old {
		if v != b {
			m[k] = v
		}
	}
	g.tags.Store(&m)
	g.mu.Unlock()
	g.stats.droppedIDs.Add(b.issued())
}

// refresh makes the held tags those of the store: new tags get a buffer (loaded on first
// use), buffers of vanished tags are dropped. Buffers created on first use while the list was
// being read are kept.
func (g *Generator) refresh(ctx context.Context) error {
	g.mu.Lock()
	g.gen++
	gen := g.gen
	g.mu.Unlock()
	names, err := g.store.Tags(ctx)
	if err != nil {
		return fmt.Errorf("segment: list tags: %w", err)
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
	g.mu.Lock()
	old := *g.tags.Load()
	m := make(map[string]*buffer, len(want))
	var dropped []*buffer
	for k, b := range old {
		_, ok := folded[strings.ToLower(k)]
		if ok || b.gen >= gen {
			m[k] = b
		} else {
			dropped = append(dropped, b)
		}
	}
	var added []string
	for k := range want {
		if m[k] == nil {
			b := newBuffer(strings.Clone(k))
			b.gen = gen
			m[b.tag] = b
			added = append(added, b.tag)
		}
	}
	g.tags.Store(&m)
	g.mu.Unlock()
	for _, k := range added {
		g.unforget(k)
	}
	for _, b := range dropped {
		g.stats.droppedIDs.Add(b.issued())
		g.log.Info("segment: tag no longer in the store; dropped", zap.String("tag", b.tag))
	}
	if len(added) > 0 {
		g.log.Debug("segment: tags added", zap.Int("count", len(added)))
	}
	return nil
}

func (g *Generator) refresher(ctx context.Context) {
	defer g.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.cfg.after(g.cfg.RefreshInterval):
		}
		rctx, cancel := context.WithTimeout(ctx, g.cfg.LoadTimeout)
		err := g.refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			g.log.Warn("segment: tag refresh failed", zap.Error(err))
		}
	}
}
