package segment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/leafd/leafd/internal/storeerr"
)

// A load's life cycle, top to bottom in this file: startLoadLocked marks a buffer loading,
// submit queues the load (pool.go runs the loaders), load runs it, fetch leases and checks
// the range under the tag's guard (the store's side is lease.go), finish publishes it or
// records the failure, remembering a refusal (remember) and dropping a buffer that never
// served (drop); the tag's guard (acquireGuard, releaseGuard) outlives the tag's buffers.
//
// The loading state of a buffer is set by startLoadLocked and cleared exactly once by finish:
// by the loader when the load ends, or by the submitter when the pool rejects the job (the job
// never runs, so nobody else would). Waiters never clear it, so a waiter that gives up cannot
// let a second load of the same buffer start while one runs.

// startLoadLocked marks b as loading (b.mu held); the caller must then call submit.
func (g *Generator) startLoadLocked(b *buffer) {
	b.loading = true
	b.done = make(chan struct{})
	b.refill = b.initOK
	b.runStarted = false
	b.setFlagsLocked()
}

// submit queues b's load, a refill or a first load (startLoadLocked decided which); when the
// queue is full or the generator closed, it clears the loading state itself.
func (g *Generator) submit(b *buffer) {
	b.mu.Lock()
	q := g.firsts
	if b.refill {
		q = g.refills
	}
	b.mu.Unlock()
	g.poolMu.RLock()
	ok := false
	if !g.closed.Load() {
		select {
		case q <- b:
			ok = true
		default:
		}
	}
	g.poolMu.RUnlock()
	if !ok {
		err := errRejected
		if g.closed.Load() {
			err = errClosed
		}
		g.finish(b, nil, err)
	}
}

// preload starts a background load of b's next segment if none is ready or running and no
// recent failure asks to back off. Called from the hot path once the threshold is passed.
func (g *Generator) preload(b *buffer) {
	if ra := b.retryAt.Load(); ra != 0 && int64(g.mono.since()) < ra {
		return
	}
	b.mu.Lock()
	if b.loading || b.next != nil || b.dead || g.closed.Load() {
		b.mu.Unlock()
		return
	}
	g.startLoadLocked(b)
	b.mu.Unlock()
	g.submit(b)
}

// load runs one load of b and ends it with finish, whatever happens: a panic in the store or
// the marks becomes a failed load (logged, counted; the tag retries after the back-off), not
// a dead process or a buffer stuck "loading".
func (g *Generator) load(ctx context.Context, b *buffer) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.LoadTimeout)
	defer cancel()
	var (
		s   *seg
		err error
	)
	start := g.cfg.Clock.Now()
	b.mu.Lock()
	b.runStarted = true
	b.mu.Unlock()
	func() {
		defer func() {
			if r := recover(); r != nil {
				g.stats.loadsPanicked.Add(1)
				g.log.Error("segment: load panicked", zap.String("tag", b.tag), zap.Any("panic", r), zap.Stack("stack"))
				s, err = nil, fmt.Errorf("load panicked: %v", r)
			}
		}()
		s, err = g.fetch(ctx, b)
	}()
	g.recordLoad(b, start, s, err)
	g.finish(b, s, err)
}

// fetch leases the next range of b from the store, checks it against the regression mark,
// raises the mark durably and only then returns the segment to publish.
//
// The tag's guard is held throughout, so the mark read, the lease, the check and the raise
// are one step with respect to every other buffer of the tag: a buffer dropped by a refresh
// and its replacement can never both accept a range, nor accept ranges out of order.
func (g *Generator) fetch(ctx context.Context, b *buffer) (*seg, error) {
	gd := b.guard
	gd.mu.Lock()
	defer gd.mu.Unlock()

	b.mu.Lock()
	first, step, minStep, last, dead, fixed := !b.initOK, b.step, b.minStep, b.lastRefill, b.dead, b.fixed
	rate, took := b.rate, b.loadTook
	if cur := b.cur.Load(); cur != nil && !b.since.IsZero() {
		// The demand now: what was taken from the current segment since it became current.
		if r := demandRate(cur.used(), g.cfg.Clock.Now().Sub(b.since)); r > 0 {
			rate = r
		}
	}
	b.mu.Unlock()
	if dead {
		return nil, errStale // a replacement buffer serves the tag; never lease into this one
	}
	// The first load of this buffer starts from what the tag's latest load recorded beside its
	// mark (its step, demand and load time, typically before a restart), not from the stored
	// step: see Hint.
	var hint Hint
	if first {
		switch h, err := g.marks.Hint(b.tag); {
		case errors.Is(err, ErrNotSupported):
		case err != nil:
			g.log.Warn("segment: cannot read the tag's remembered step; starting from the stored step", zap.String("tag", b.tag), zap.Error(err))
		default:
			hint = h
			rate = max(rate, h.Rate)
			took = max(took, h.Load)
		}
	}

	// Read the durable mark on every load: the guard may be new (its tag was not held) while
	// the file holds the mark of an earlier life of the tag.
	m, err := g.marks.Mark(b.tag)
	if err != nil {
		g.marksAnswered(err)
		return nil, fmt.Errorf("read mark: %w", err)
	}
	gd.mark = max(gd.mark, m)
	mark := gd.mark
	b.mu.Lock()
	b.mark = max(b.mark, mark)
	b.mu.Unlock()

	// After a regression, look before leasing: each refused Allocate still pushes max_id up
	// by a step, so retries alone would walk the table back up to this instance's mark and
	// then lease ranges that other instances were granted before the failover. The state
	// stays until max_id is back at or above the mark, whatever other error happens
	// meanwhile (an error here returns with gd.regressed still set).
	if gd.regressed {
		if cur, err := g.store.MaxID(ctx, b.tag); !errors.Is(err, ErrNotSupported) {
			g.storeAnswered(err)
			if err != nil {
				return nil, fmt.Errorf("after a regression, read max_id: %w", err)
			}
			if cur < mark {
				return nil, &TagError{Tag: b.tag, Err: ErrRegression,
					Detail: fmt.Sprintf("store max_id %d is still below the mark %d of ranges already granted", cur, mark)}
			}
		}
	}

	if fixed == 0 {
		// A shaped tag's counter row keeps its stored step: its width holds a few failover
		// gaps of that step (docs/SHAPES.md), not of --max-step. Asked once per buffer.
		fixed = -1
		if g.counterRow(ctx, b.tag) {
			fixed = 1
		}
		b.mu.Lock()
		b.fixed = fixed
		b.mu.Unlock()
	}
	now := g.cfg.Clock.Now()
	var req int64 // 0: the stored step (a first load with nothing remembered, like Leaf)
	switch {
	case fixed > 0:
	case !first:
		req = nextStep(step, minStep, g.cfg.MaxStep, now.Sub(last), g.cfg.SegmentDuration)
	case hint.Step > 0:
		req = min(hint.Step, g.cfg.MaxStep)
	}
	// The demand raises the step at once to what outlasts the next load, rather than doubling
	// towards it one load at a time (each too short to hide the following load). Only with a
	// size to start from: a first load with nothing remembered leases the stored step.
	d, capped := demandStep(rate, took, g.cfg.PreloadRatio, g.cfg.MaxStep)
	if req > 0 && d > req {
		req = d
	}
	if capped && fixed < 0 {
		g.stepCapped(b.tag, rate, took)
	}
	started := now
	lr := LeaseRequest{Tag: b.tag, Step: req, Floor: mark}
	t := Tag{Name: b.tag, MaxID: max(1, mark), Step: g.cfg.DefaultStep}
	if first && g.cfg.AutoCreate {
		lr.Create = &t // one shared commit for the creation and the first range (group commit)
	}
	l, err := g.lessor.Lease(ctx, lr)
	if lr.Create == nil && errors.Is(err, ErrUnknownTag) && g.cfg.AutoCreate {
		// A tag this instance served before (retired, or its row deleted) restarts above its
		// mark, so a re-creation never reissues its IDs.
		cerr := g.store.Create(ctx, t)
		if cerr != nil && !errors.Is(cerr, ErrTagExists) {
			g.storeAnswered(cerr)
			return nil, fmt.Errorf("auto-create: %w", cerr)
		}
		l, err = g.lessor.Lease(ctx, lr)
		l.Created = cerr == nil
	}
	if l.Created {
		g.log.Info("segment: tag auto-created", zap.String("tag", b.tag), zap.Int64("start", t.MaxID), zap.Int64("step", t.Step))
	}
	a := l.Alloc
	g.storeAnswered(err)
	if err != nil {
		return nil, err
	}
	size := req
	if size <= 0 {
		size = a.Step
	}
	if a.MaxID > maxRangeEnd && size > 0 {
		// The store answered, but the range passes the largest ID served: retrying cannot
		// help, and UNAVAILABLE ("store unreachable or slow") would mislead.
		return nil, &TagError{Tag: b.tag, Err: ErrLimit, Detail: fmt.Sprintf(
			"the tag has reached the largest ID leafd serves (%d): the store leased [%d, %d)", maxRangeEnd-1, a.MaxID-size, a.MaxID)}
	}
	if size <= 0 || a.MaxID-size < 0 {
		return nil, fmt.Errorf("store returned an invalid range: max_id %d, step %d", a.MaxID, size)
	}
	start, end := a.MaxID-size, a.MaxID
	if start < mark {
		gd.regressed = true
		g.stats.regressions.Add(1)
		g.log.Error("segment: REGRESSION: the store leased a range below one already granted; refusing it (restored backup or failed-over database?)",
			zap.String("tag", b.tag), zap.Int64("start", start), zap.Int64("end", end), zap.Int64("mark", mark))
		return nil, &TagError{Tag: b.tag, Err: ErrRegression,
			Detail: fmt.Sprintf("store leased [%d, %d) below the mark %d of ranges already granted", start, end, mark)}
	}
	// Durable before publication: after a crash the restarted instance refuses this range.
	loadTook := g.cfg.Clock.Now().Sub(started)
	err = g.marks.RaiseHint(b.tag, end, Hint{Step: size, Rate: rate, Load: loadTook})
	if errors.Is(err, ErrNotSupported) {
		err = g.marks.Raise(b.tag, end)
	}
	g.marksAnswered(err)
	if err != nil {
		return nil, fmt.Errorf("raise mark to %d: %w", end, err)
	}
	gd.mark = end
	gd.regressed = false
	if start < 1 {
		start = 1 // IDs are positive; values below 1 of a leased range are skipped
	}
	if start >= end {
		return nil, fmt.Errorf("store leased an empty range [%d, %d)", start, end)
	}
	if first && g.cfg.Admit != nil {
		if err := g.cfg.Admit(ctx, b.tag); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotAdmitted, err)
		}
	}
	b.mu.Lock()
	b.mark = end
	b.step = size
	b.minStep = a.Step
	b.lastRefill = now
	b.initOK = true
	b.rate = rate
	b.loadTook = max(loadTook, 0)
	b.mu.Unlock()
	g.log.Debug("segment: loaded", zap.String("tag", b.tag), zap.Int64("start", start), zap.Int64("end", end),
		zap.Int64("step", size), zap.Int64("rate", rate), zap.Duration("took", loadTook))
	// When the demand would use up the segment's part after the ratio threshold in less than
	// twice a load, its preload starts earlier (preload timing only, one load per segment).
	return newSegLead(start, end, g.cfg.PreloadRatio, demandLead(rate, max(loadTook, took), g.cfg.MaxStep)), nil
}

// finish ends a load (or a rejected submission): publishes s as the next segment, or records
// err and backs off; clears the loading state and wakes the waiters. A buffer whose load
// failed before it ever held a segment is not kept (a failed or unknown tag is not held):
// the tag is remembered as refused for the back-off (NegativeTTL when unknown), then dropped.
func (g *Generator) finish(b *buffer, s *seg, err error) {
	if err != nil && err != errStale {
		b.mu.Lock()
		never := b.cur.Load() == nil && b.next == nil
		b.mu.Unlock()
		switch {
		case errors.Is(err, ErrNotAdmitted) && never:
			g.drop(b) // not remembered: the tag may be served here as soon as Admit says so
		case errors.Is(err, ErrUnknownTag):
			// Before the waiters wake, so that what they do next (Create, retry) sees it.
			g.remember(b.tag, err, g.cfg.NegativeTTL)
			g.drop(b)
		case never && !errors.Is(err, errClosed):
			g.remember(b.tag, err, g.cfg.RetryBackoff)
			g.drop(b)
		}
	}
	b.mu.Lock()
	step := b.step
	b.loading = false
	switch {
	case err == nil && !b.dead:
		g.firstLoadEndedLocked(b)
		b.next = s
		b.lastErr = nil
		b.retryAt.Store(0)
		g.stats.loadsOK.Add(1)
	case err == nil, err == errStale: // a dead buffer never publishes: the range is a gap
	default:
		b.lastErr = err
		b.retryAt.Store(int64(g.mono.since() + g.cfg.RetryBackoff))
		if errors.Is(err, errRejected) || errors.Is(err, errClosed) {
			g.stats.loadsRejected.Add(1)
		} else {
			g.stats.loadsFailed.Add(1)
		}
	}
	if b.dead {
		g.releaseGuardLocked(b)
	}
	b.setFlagsLocked()
	if b.done != nil {
		close(b.done)
		b.done = nil
	}
	b.mu.Unlock()

	switch {
	case err == nil:
		if g.quiet.Failing(msgLoadFailed) {
			g.quiet.OK(msgLoadFailed, "segment: loads succeed again", zap.String("tag", b.tag))
		}
	case err == errStale:
	case errors.Is(err, ErrUnknownTag), errors.Is(err, ErrNotAdmitted):
		g.log.Debug("segment: tag refused", zap.String("tag", b.tag), zap.Error(err))
	case errors.Is(err, ErrRegression):
		// logged loudly by fetch
	case errors.Is(err, errClosed):
	default:
		// One line per kind of failure, then a summary per 10 s: an outage fails every
		// held tag's loads at once.
		g.quiet.Fail(zapcore.WarnLevel, msgLoadFailed, err, zap.String("tag", b.tag), zap.Int64("step", step),
			zap.String("cause", storeerr.Classify(err).String()))
	}
}

// msgLoadFailed is the kind (quietlog) of a failed load of any tag.
const msgLoadFailed = "segment: load failed"

// remember refuses tag (an owned string) for ttl with err, within MaxNegative.
func (g *Generator) remember(tag string, err error, ttl time.Duration) {
	now := g.mono.since()
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
	g.neg[tag] = negEntry{until: now + ttl, err: err}
}

// negative returns the remembered refusal of tag, if any.
func (g *Generator) negative(tag string) error {
	g.negMu.Lock()
	e, ok := g.neg[tag]
	if ok && g.mono.since() >= e.until {
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
		g.firstLoadEndedLocked(b)
		b.next = nil
		b.setFlagsLocked()
		if !b.loading {
			g.releaseGuardLocked(b)
		}
	}
	if g.tags.remove(b) {
		g.ntags.Add(-1)
	}
	b.mu.Unlock()
	g.mu.Unlock()
	if !wasDead {
		g.stats.droppedIDs.Add(b.issued())
	}
}

// firstLoadEndedLocked takes b out of the count of buffers loading their first segment
// (b.mu held): its first segment was published, or b was dropped.
func (g *Generator) firstLoadEndedLocked(b *buffer) {
	if b.firstPending {
		b.firstPending = false
		g.firstLoads.Add(-1)
	}
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
	g.releaseGuard(b.tag, b.guard)
}

// releaseGuard drops one reference on gd, the guard of tag (see releaseGuardLocked).
func (g *Generator) releaseGuard(tag string, gd *tagGuard) {
	g.guardMu.Lock()
	defer g.guardMu.Unlock()
	gd.refs--
	if gd.refs == 0 && g.guards[tag] == gd {
		gd.mu.Lock() // no lease runs: refs was > 0 during each
		regressed := gd.regressed
		gd.mu.Unlock()
		if !regressed {
			delete(g.guards, tag)
		}
	}
}
