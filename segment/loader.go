package segment

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
)

// The loading state of a buffer is set by startLoadLocked and cleared exactly once by finish:
// by the loader when the load ends, or by the submitter when the pool rejects the job (the job
// never runs, so nobody else would). Waiters never clear it, so a waiter that gives up cannot
// let a second load of the same buffer start while one runs.

// startLoadLocked marks b as loading (b.mu held); the caller must then call submit.
func (g *Generator) startLoadLocked(b *buffer) {
	b.loading = true
	b.done = make(chan struct{})
	b.setFlagsLocked()
}

// submit queues b's load; when the queue is full or the generator closed, it clears the
// loading state itself.
func (g *Generator) submit(b *buffer) {
	g.poolMu.RLock()
	ok := false
	if !g.closed.Load() {
		select {
		case g.jobs <- b:
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
	if ra := b.retryAt.Load(); ra != 0 && g.cfg.Now().UnixNano() < ra {
		return
	}
	b.mu.Lock()
	if b.loading || b.next != nil || g.closed.Load() {
		b.mu.Unlock()
		return
	}
	g.startLoadLocked(b)
	b.mu.Unlock()
	g.submit(b)
}

func (g *Generator) worker(ctx context.Context) {
	defer g.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-g.jobs:
			g.load(ctx, b)
		}
	}
}

func (g *Generator) load(ctx context.Context, b *buffer) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.LoadTimeout)
	defer cancel()
	start := g.cfg.Now()
	s, err := g.fetch(ctx, b)
	g.recordLoad(b, start, s, err)
	g.finish(b, s, err)
}

// maxIDReader is implemented by stores that can read a tag's max_id (the start of the range
// the next Allocate would lease) without allocating: *MySQLStore.
type maxIDReader interface {
	MaxID(ctx context.Context, tag string) (int64, error)
}

// fetch leases the next range of b from the store, checks it against the regression mark,
// raises the mark durably and only then returns the segment to publish.
func (g *Generator) fetch(ctx context.Context, b *buffer) (*seg, error) {
	b.mu.Lock()
	first, step, minStep, last := !b.initOK, b.step, b.minStep, b.lastRefill
	mark := b.mark
	regressed := errors.Is(b.lastErr, ErrRegression)
	b.mu.Unlock()

	// Read the durable mark on every load, not once per buffer: another buffer of this tag
	// (a buffer dropped by a refresh while requests still hold it, and its replacement) may
	// have raised it since.
	m, err := g.marks.Mark(b.tag)
	if err != nil {
		return nil, fmt.Errorf("read mark: %w", err)
	}
	mark = max(mark, m)
	b.mu.Lock()
	b.mark = max(b.mark, mark)
	b.mu.Unlock()

	// After a regression, look before leasing: each refused Allocate still pushes max_id up
	// by a step, so retries alone would walk the table back up to this instance's mark and
	// then lease ranges that other instances were granted before the failover.
	if r, ok := g.store.(maxIDReader); ok && regressed {
		cur, err := r.MaxID(ctx, b.tag)
		if err != nil {
			return nil, err
		}
		if cur < mark {
			return nil, &TagError{Tag: b.tag, Err: ErrRegression,
				Detail: fmt.Sprintf("store max_id %d is still below the mark %d of ranges already granted", cur, mark)}
		}
	}

	now := g.cfg.Now()
	var req int64 // 0: the stored step (first load, like Leaf)
	if !first {
		req = nextStep(step, minStep, g.cfg.MaxStep, now.Sub(last), g.cfg.SegmentDuration)
	}
	started := now
	a, err := allocate(ctx, g.store, b.tag, req, mark)
	if errors.Is(err, ErrUnknownTag) && g.cfg.AutoCreate {
		t := Tag{Name: b.tag, MaxID: 1, Step: g.cfg.DefaultStep}
		if cerr := g.store.Create(ctx, t); cerr != nil && !errors.Is(cerr, ErrTagExists) {
			return nil, fmt.Errorf("auto-create: %w", cerr)
		} else if cerr == nil {
			g.log.Info("segment: tag auto-created", zap.String("tag", b.tag), zap.Int64("step", t.Step))
		}
		a, err = allocate(ctx, g.store, b.tag, req, mark)
	}
	if err != nil {
		return nil, err
	}
	size := req
	if size <= 0 {
		size = a.Step
	}
	if size <= 0 || a.MaxID > maxRangeEnd || a.MaxID-size < 0 {
		return nil, fmt.Errorf("store returned an invalid range: max_id %d, step %d", a.MaxID, size)
	}
	start, end := a.MaxID-size, a.MaxID
	if start < mark {
		g.stats.regressions.Add(1)
		g.log.Error("segment: REGRESSION: the store leased a range below one already granted; refusing it (restored backup or failed-over database?)",
			zap.String("tag", b.tag), zap.Int64("start", start), zap.Int64("end", end), zap.Int64("mark", mark))
		return nil, &TagError{Tag: b.tag, Err: ErrRegression,
			Detail: fmt.Sprintf("store leased [%d, %d) below the mark %d of ranges already granted", start, end, mark)}
	}
	if err := g.marks.Raise(b.tag, end); err != nil {
		return nil, fmt.Errorf("raise mark to %d: %w", end, err)
	}
	if start < 1 {
		start = 1 // IDs are positive; values below 1 of a leased range are skipped
	}
	if start >= end {
		return nil, fmt.Errorf("store leased an empty range [%d, %d)", start, end)
	}
	b.mu.Lock()
	b.mark = end
	b.step = size
	b.minStep = a.Step
	b.lastRefill = now
	b.initOK = true
	b.mu.Unlock()
	g.log.Debug("segment: loaded", zap.String("tag", b.tag), zap.Int64("start", start), zap.Int64("end", end),
		zap.Int64("step", size), zap.Duration("took", g.cfg.Now().Sub(started)))
	return newSeg(start, end, g.cfg.PreloadRatio), nil
}

// finish ends a load (or a rejected submission): publishes s as the next segment, or records
// err and backs off; clears the loading state and wakes the waiters.
func (g *Generator) finish(b *buffer, s *seg, err error) {
	now := g.cfg.Now()
	if errors.Is(err, ErrUnknownTag) {
		// Forget the buffer and remember the tag as unknown for NegativeTTL, before the
		// waiters wake, so that what they do next (Create, retry) sees it.
		g.remember(b.tag)
		g.drop(b)
	}
	b.mu.Lock()
	step := b.step
	b.loading = false
	if err == nil {
		b.next = s
		b.lastErr = nil
		b.retryAt.Store(0)
		g.stats.loadsOK.Add(1)
	} else {
		b.lastErr = err
		b.retryAt.Store(now.Add(g.cfg.RetryBackoff).UnixNano())
		if errors.Is(err, errRejected) || errors.Is(err, errClosed) {
			g.stats.loadsRejected.Add(1)
		} else {
			g.stats.loadsFailed.Add(1)
		}
	}
	b.setFlagsLocked()
	if b.done != nil {
		close(b.done)
		b.done = nil
	}
	b.mu.Unlock()

	switch {
	case err == nil:
	case errors.Is(err, ErrUnknownTag):
		g.log.Debug("segment: unknown tag", zap.String("tag", b.tag))
	case errors.Is(err, ErrRegression):
		// logged loudly by fetch
	case errors.Is(err, errClosed):
	default:
		g.log.Warn("segment: load failed", zap.String("tag", b.tag), zap.Int64("step", step), zap.Error(err))
	}
}
