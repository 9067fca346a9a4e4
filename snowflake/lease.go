package snowflake

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// awaitLease runs without g.mu: the candidate millisecond is not covered by the lease. Wait for
// the background extension, at most MaxWait in total, unless there is no worker or the last
// extension failed and no new attempt is in flight: an attempt in flight is waited for even
// after a failure, since a transient error (a dropped connection) is often gone on the retry.
// It only decides whether to try again: nextLocked alone checks the millisecond against the
// published lease, which is never beyond what the source persisted.
func (g *Generator) awaitLease(waited *time.Duration) error {
	g.mu.Lock()
	ok := g.haveWorker && !g.closed
	g.extendPending = true
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
	if !ok {
		return g.noWorkerErr()
	}
	for {
		// extending is read first: an attempt that ended before this read has published its
		// outcome (lease and status) before clearing it, so the reads below see that outcome.
		inFlight := g.extending.Load()
		if g.nowMs() < g.lease.Load() {
			return nil
		}
		st := g.status.Load()
		if st != nil && !inFlight {
			return *st
		}
		if *waited >= g.cfg.MaxWait {
			if st != nil {
				return *st
			}
			return fmt.Errorf("%w: lease not extended within %v", ErrNoWorker, g.cfg.MaxWait)
		}
		d := time.Millisecond
		g.cfg.Clock.Sleep(d)
		*waited += d
	}
}

func (g *Generator) noWorkerErr() error {
	if st := g.status.Load(); st != nil {
		return *st
	}
	return fmt.Errorf("%w: no lease", ErrNoWorker)
}

// run is the background goroutine: acquire when there is no worker yet, then keep the lease
// ahead of the clock.
func (g *Generator) run(ctx context.Context) {
	defer g.wg.Done()
	if w := g.pending; w != nil {
		g.pending = nil
		err := g.waitPast(ctx, *w)
		if err == nil {
			err = g.begin(ctx, *w)
		}
		if err != nil && ctx.Err() == nil {
			g.log.Warn("snowflake: starting after the bound failed; acquiring again", zap.Error(err))
			g.setStatus(err)
		}
	}
	for {
		if !g.acquireLoop(ctx) || !g.leaseLoop(ctx) {
			return
		}
		// The id was lost (leaseLoop dropped it): acquire again, as a new start.
	}
}

// The kinds of the background retries' failures (quietlog): a failure that repeats every
// RetryInterval logs once, then a summary at most every 10 s.
const (
	msgAcquireFailed = "snowflake: acquiring worker id; retrying"
	msgExtendFailed  = "snowflake: lease extension failed; retrying"
)

// acquireLoop acquires until the generator has a worker; false when it is closing.
func (g *Generator) acquireLoop(ctx context.Context) bool {
	for !g.hasWorker() {
		if err := g.start(ctx); err != nil {
			if ctx.Err() != nil {
				return false
			}
			g.quiet.Fail(zapcore.WarnLevel, msgAcquireFailed, err)
			g.setStatus(err)
			if !g.pause(ctx, g.cfg.RetryInterval, false) {
				return false
			}
		}
	}
	g.quiet.OK(msgAcquireFailed, "snowflake: acquiring worker id succeeded")
	return true
}

// leaseLoop keeps the lease ahead of the clock; it returns true when the worker id was lost
// (the generator has no worker any more), false when the generator is closing.
func (g *Generator) leaseLoop(ctx context.Context) bool {
	window := g.cfg.LeaseWindow.Milliseconds()
	for {
		g.evals.Add(1)
		now := g.nowMs()
		lease := g.lease.Load()
		if lease-now <= g.extendAhead {
			if g.extend(ctx, now+window) {
				return true
			}
			if ctx.Err() != nil {
				return false
			}
			// After a failure, pace the retries: callers at the bound keep kicking.
			if g.status.Load() != nil && !g.pause(ctx, g.cfg.RetryInterval, false) {
				return false
			}
			continue
		}
		// Sleep until two thirds of the window are left; wake early on a kick. Real timers
		// only pace the loop: the decision above always uses the injected clock.
		d := time.Duration(lease-now-g.extendAhead) * time.Millisecond
		if !g.pause(ctx, min(d, g.cfg.LeaseWindow/4), true) {
			return false
		}
	}
}

func (g *Generator) hasWorker() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.haveWorker
}

// pause waits d (real time), or until a kick if onKick; false when the generator is closing.
func (g *Generator) pause(ctx context.Context, d time.Duration, onKick bool) bool {
	t := g.cfg.Clock.NewTimer(max(d, time.Millisecond))
	defer t.Stop()
	kick := g.kick
	if !onKick {
		kick = nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-kick:
	case <-t.C():
	}
	return true
}

// extend persists a later reserved_until, with no lock held, and publishes it on success.
// While it runs, g.extending is set; it is cleared only after the outcome (lease or status) is
// published. It returns true when the source said the id is lost (ErrWorkerLost): the worker
// is then dropped, and nothing is issued until the next acquisition.
func (g *Generator) extend(ctx context.Context, until int64) (lost bool) {
	g.mu.Lock()
	g.extendPending = false
	g.mu.Unlock()
	if until <= g.lease.Load() {
		return false
	}
	g.extending.Store(true)
	defer g.extending.Store(false) // runs after the deferred g.mu.Unlock below
	ectx, cancel := context.WithTimeout(ctx, g.cfg.ExtendTimeout)
	err := g.src.Extend(ectx, time.UnixMilli(until))
	cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.extendFails++
		if errors.Is(err, ErrWorkerLost) && !g.closed {
			// Stop at once (the IDs issued so far are below the lease the successor started
			// above), then acquire again above every bound, like a new start.
			if errors.Is(err, ErrLeaseLapsed) {
				g.log.Warn("snowflake: worker id lease lapsed (nobody took it over); acquiring it again", zap.Int64("worker_id", g.workerID), zap.Error(err))
			} else {
				g.log.Error("snowflake: worker id lost; acquiring a worker id again", zap.Int64("worker_id", g.workerID), zap.Error(err))
			}
			g.haveWorker, g.workerID = false, -1
			g.lease.Store(0)
			g.setStatus(fmt.Errorf("%w; acquiring a worker id again", err))
			return true
		}
		if ctx.Err() == nil {
			g.quiet.Fail(zapcore.WarnLevel, msgExtendFailed, err, zap.Time("reserved_until", time.UnixMilli(g.lease.Load())))
			g.setStatus(fmt.Errorf("extending lease: %w", err))
		}
		return false
	}
	g.extensions++
	if g.closed {
		return false
	}
	if until > g.lease.Load() {
		g.lease.Store(until)
	}
	if g.status.Swap(nil) != nil && !g.quiet.OK(msgExtendFailed, "snowflake: lease extension recovered", zap.Time("reserved_until", time.UnixMilli(until))) {
		g.log.Info("snowflake: lease extension recovered", zap.Time("reserved_until", time.UnixMilli(until)))
	}
	return false
}
