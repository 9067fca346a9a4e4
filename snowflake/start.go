package snowflake

// The generator's life cycle: taking a worker id and the first lease at start, waiting out a
// persisted bound, and giving the lease back on close. Issuing IDs is in generator.go.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/quietlog"
)

// New acquires a worker id from src. When the clock is already past the bound persisted by the
// previous run, it extends the lease and returns a ready generator; when the bound is ahead (at
// most MaxStartWait, else it refuses), it returns at once and the background goroutine waits
// and then takes the first lease (Next answers ErrNoWorker until then). If src reports
// ErrSourceUnavailable or ErrWorkerHeld, New returns a generator in the no-worker state that
// keeps acquiring in the background. New takes ownership of src: Close closes it, and so does New
// when it fails.
func New(cfg Config, src WorkerSource, log *zap.Logger) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		src.Close()
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	l := cfg.Layout
	if lu, ok := src.(LayoutUser); ok {
		lu.UseLayout(l) // Acquire refuses a data dir or domain used with another layout
	}
	g := &Generator{
		cfg:         cfg,
		log:         log,
		quiet:       quietlog.New(log, quietlog.DefaultEvery, cfg.Clock.Now),
		src:         src,
		epochMs:     l.EpochMs(),
		timeShift:   uint(l.WorkerBits + l.SeqBits),
		workerShift: uint(l.SeqBits),
		maxSeq:      l.MaxSequence(),
		maxT:        1<<l.TimeBits - 1,
		seqSpan:     uint64(min(100, l.MaxSequence()+1)),
		freshSeqs:   l.MaxSequence() + 1,
		extendAhead: max(cfg.LeaseWindow.Milliseconds()*2/3, 1),
		maxBackMs:   cfg.MaxBackward.Milliseconds(),
		workerID:    -1,
		kick:        make(chan struct{}, 1),
	}
	if !cfg.SequenceStartZero {
		g.freshSeqs -= int64(g.seqSpan) - 1 // a random start is below seqSpan
	}
	g.setStatus(errors.New("acquiring worker id"))

	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	fail := func(err error) (*Generator, error) {
		cancel()
		src.Close()
		return nil, err
	}
	// A source that is unavailable for a moment (a ZooKeeper connection dropped while the
	// machine is loaded) is retried within ExtendTimeout before New settles for the no-worker
	// state, so that a healthy start does not answer ErrNoWorker. The number of tries is
	// bounded too, so that a clock that does not move (a frozen clock.Fake) cannot hold New.
	deadline := cfg.Clock.Now().Add(cfg.ExtendTimeout)
	maxTries := int(cfg.ExtendTimeout/cfg.RetryInterval) + 1
	w, err := g.acquire(ctx, deadline)
	for try := 1; errors.Is(err, ErrSourceUnavailable) && try <= maxTries; try++ {
		left := clock.Until(cfg.Clock, deadline)
		if left <= cfg.RetryInterval {
			break
		}
		if try == 1 {
			log.Info("snowflake: worker source unavailable; retrying", zap.Error(err), zap.Duration("for", left))
		}
		cfg.Clock.Sleep(cfg.RetryInterval)
		w, err = g.acquire(ctx, deadline)
	}
	switch {
	case err == nil:
		// The clock must pass the previous run's bound; New does not wait for it (the
		// server listens meanwhile, and segment IDs do not depend on it): the background
		// goroutine does, and Next answers ErrNoWorker until then. A bound further than
		// MaxStartWait refuses the start.
		boundMs := w.boundMs()
		if wait := time.Duration(boundMs-g.nowMs()+1) * time.Millisecond; wait > cfg.MaxStartWait {
			return fail(g.tooFarErr(g.nowMs(), w))
		}
		if g.nowMs() > boundMs {
			if err = g.begin(ctx, w); err != nil && !retryable(err) {
				return fail(err)
			}
			if err != nil {
				log.Warn("snowflake: first lease extension failed; retrying in the background", zap.Error(err))
				g.setStatus(err)
			}
		} else {
			g.pending = &w
			g.setStatus(fmt.Errorf("%w: worker id %d acquired; waiting for the clock to pass the bound %v persisted by an earlier run",
				errWaitBound, w.ID, w.Bound))
			log.Info("snowflake: waiting for the clock to pass the start bound before issuing", zap.Int64("worker_id", w.ID),
				zap.Time("start_bound", w.Bound))
		}
	case retryable(err):
		log.Warn("snowflake: no worker id yet; acquiring in the background", zap.Error(err))
		g.setStatus(err)
	default:
		return fail(err)
	}
	g.wg.Add(1)
	go g.run(ctx)
	return g, nil
}

// start acquires, waits out the start bound and takes the first lease (the background
// acquisition).
func (g *Generator) start(ctx context.Context) error {
	w, err := g.acquire(ctx, time.Time{})
	if err != nil {
		return err
	}
	if err := g.waitPast(ctx, w); err != nil {
		return err
	}
	return g.begin(ctx, w)
}

// acquire calls the source, bounded by ExtendTimeout and by deadline when it is not zero.
func (g *Generator) acquire(ctx context.Context, deadline time.Time) (Worker, error) {
	timeout := g.cfg.ExtendTimeout
	if !deadline.IsZero() {
		timeout = min(timeout, max(clock.Until(g.cfg.Clock, deadline), time.Millisecond))
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	w, err := g.src.Acquire(actx)
	cancel()
	if err != nil {
		return Worker{}, wrap("acquire worker id", err)
	}
	if w.ID < 0 || w.ID > g.cfg.Layout.MaxWorkerID() {
		return Worker{}, fmt.Errorf("snowflake: worker id %d out of range [0, %d] for %d worker bits", w.ID, g.cfg.Layout.MaxWorkerID(), g.cfg.Layout.WorkerBits)
	}
	return w, nil
}

// begin takes the first lease of w, once the clock is past its bound, and starts issuing.
func (g *Generator) begin(ctx context.Context, w Worker) error {
	boundMs := w.boundMs()
	now := g.nowMs()
	if now <= boundMs {
		return fmt.Errorf("%w: clock %v not past the start bound %v", ErrClockBack, time.UnixMilli(now).UTC(), w.Bound)
	}
	until := now + g.cfg.LeaseWindow.Milliseconds()
	ectx, cancel := context.WithTimeout(ctx, g.cfg.ExtendTimeout)
	err := g.src.Extend(ectx, time.UnixMilli(until))
	cancel()
	if err != nil {
		return wrap("first lease extension", err)
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errors.New("snowflake: closed")
	}
	// Issue only in milliseconds > boundMs (the previous run used < boundMs; the extra
	// millisecond costs nothing and tolerates an inclusive reading of the bound).
	// After a lost id (a second begin in this process), also above every millisecond issued
	// before: the IDs of one instance stay strictly increasing whatever id it holds now.
	g.lastMs = max(boundMs, g.lastMs, g.epochMs-1)
	g.seq = g.maxSeq // so a clock still at lastMs waits for the next millisecond
	g.workerPart = w.ID << g.workerShift
	g.workerID = w.ID
	g.source = w.Source
	g.startBound = w.Bound
	g.haveWorker = true
	g.extensions++
	g.publishLocked()
	g.mu.Unlock()
	g.status.Store(nil) // before the lease: a request served under it never sees the old status
	g.lease.Store(until)
	g.log.Info("snowflake: worker acquired", zap.Int64("worker_id", w.ID), zap.String("source", w.Source),
		zap.Time("start_bound", w.Bound), zap.Time("reserved_until", time.UnixMilli(until)))
	return nil
}

// tooFarErr is the refusal of a start bound more than MaxStartWait ahead of the clock. It
// names the bound and what it is made of, not a clock step back: the clock need not have
// moved (the bound may be a crashed run's lease plus its outage tolerance: BoundCause).
func (g *Generator) tooFarErr(now int64, w Worker) error {
	return &BoundAheadError{Clock: time.UnixMilli(now), Bound: time.UnixMilli(w.boundMs()), Cause: w.BoundCause,
		MaxStartWait: g.cfg.MaxStartWait}
}

// waitPast waits until the clock is past w's bound, or refuses when that is more than
// MaxStartWait away.
func (g *Generator) waitPast(ctx context.Context, w Worker) error {
	boundMs := w.boundMs()
	var waited time.Duration
	for {
		now := g.nowMs()
		if now > boundMs {
			return nil
		}
		d := time.Duration(boundMs-now+1) * time.Millisecond
		if waited+d > g.cfg.MaxStartWait {
			return g.tooFarErr(now, w)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		g.cfg.Clock.Sleep(min(d, 100*time.Millisecond))
		waited += min(d, 100*time.Millisecond)
	}
}

func (g *Generator) setStatus(err error) {
	var e error = newStatus(err)
	g.status.Store(&e)
}

// Close stops issuing, stops the background goroutine and waits for it, lowers the persisted
// bound to the last millisecond used (so a restart need not wait out the whole window) and
// closes the source. It is idempotent.
func (g *Generator) Close() error {
	g.closeMu.Lock()
	defer g.closeMu.Unlock()
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()

	g.mu.Lock()
	had := g.haveWorker
	last := g.lastMs
	g.lease.Store(0)
	g.setStatus(errClosed)
	g.mu.Unlock()

	var errs []error
	if had {
		// Nothing is issued any more (lease 0 was stored under g.mu), so the bound may come
		// down to just past the last millisecond used.
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ExtendTimeout)
		if err := g.src.Extend(ctx, time.UnixMilli(last+1)); err != nil {
			g.log.Warn("snowflake: lowering the lease on close", zap.Error(err))
		}
		cancel()
	}
	if err := g.src.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
