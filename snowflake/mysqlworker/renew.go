package mysqlworker

// The held worker id's lease: Extend persists the time bound, the renewal loop keeps the row's
// lease alive and takes the row back after an unknown outcome. Taking and releasing the id is
// in source.go.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// Extend persists reserved_until in the row (with a lease renewal, fenced on token and epoch)
// and in the data dir. It succeeds only for an until within the lease of the last confirmed
// renewal, counted from when that renewal was SENT (so a generator never issues past the
// moment any other instance can see the lease expired), and never while the lease has run out
// by this process's own clock (a pause, a long outage): then it re-acquires its row first and
// waits out Lease+Margin, like a taker.
func (s *Source) Extend(ctx context.Context, until time.Time) error {
	s.ioMu.Lock()
	defer s.ioMu.Unlock()
	s.mu.Lock()
	closed, held, lost := s.closed, s.held, s.lost
	s.mu.Unlock()
	switch {
	case closed:
		return errors.New("snowflake: source closed")
	case !held:
		return errors.New("snowflake: Extend before Acquire")
	case lost != nil:
		return lost
	case s.rebound:
		return s.reboundErr(s.waitingErr())
	}
	u := until.UnixMilli()
	if u <= s.accepted && s.gate.IsZero() {
		// Lowering the bound (the generator's Close, after it stopped issuing): the row keeps
		// its higher one; the data dir records the lower one, which is exact.
		return s.writeFile(u)
	}
	now := s.cfg.Clock.Now()
	if s.unsure || !now.Before(s.deadline) {
		return s.reboundErr(s.retakeLocked(ctx, now))
	}
	if !s.gate.IsZero() {
		if now.Before(s.gate) || now.UnixMilli() <= s.gateMs {
			return s.setErr(s.waitingErr())
		}
		s.mu.Lock()
		s.gate, s.gateMs = time.Time{}, 0
		s.mu.Unlock()
	}
	ok, err := s.st.Renew(ctx, s.id, s.epoch, s.token, u, s.cfg.Lease)
	switch {
	case err == nil && !ok:
		return s.reboundErr(s.retakeLocked(ctx, now)) // taken over, released or lost by a failover
	case err == nil:
		s.renewedLocked(now)
		if u > now.UnixMilli()+s.cfg.Lease.Milliseconds() {
			return s.setErr(fmt.Errorf("snowflake: reserved_until %v is beyond the worker lease %v", until.UTC(), s.cfg.Lease))
		}
	default:
		// Unknown outcome: counted as applied for the row (its bound may now be u), and as not
		// applied for the lease (the deadline stays that of the last confirmed send). Within
		// that lease, the data dir alone records u; a taker's wait covers it.
		s.mu.Lock()
		s.stats.RenewalFailures++
		s.mu.Unlock()
		if u > s.sent.UnixMilli()+s.cfg.Lease.Milliseconds() {
			return s.setErr(unavailable(fmt.Sprintf("renewing worker id %d (reserved_until %v beyond the confirmed lease)", s.id, until.UTC()), err))
		}
	}
	if err := s.writeFile(u); err != nil {
		return err
	}
	s.mu.Lock()
	s.until, s.accepted = max(s.until, u), max(s.accepted, u)
	s.mu.Unlock()
	return nil
}

// writeFile durably records u as the data dir's bound.
func (s *Source) writeFile(u int64) error {
	s.file.Lock()
	defer s.file.Unlock()
	return s.file.Write(statefile.State{WorkerID: s.id, Source: SourceName, ReservedUntilMs: u})
}

// renewedLocked records a confirmed lease write sent at sent.
func (s *Source) renewedLocked(sent time.Time) {
	s.mu.Lock()
	if sent.After(s.sent) {
		s.sent, s.deadline = sent, sent.Add(s.cfg.Lease)
	}
	s.stats.Renewals++
	s.lastErr = ""
	s.mu.Unlock()
}

// reboundErr turns err into ErrLeaseLapsed (an ErrWorkerLost, still an ErrWorkerHeld) once after a re-take: the
// generator then acquires again and gets the re-taken id with the gate as its Bound.
func (s *Source) reboundErr(err error) error {
	if !s.rebound || err == nil {
		return err
	}
	s.rebound = false
	return fmt.Errorf("%w (%w): acquiring it again so that IDs start above %v",
		snowflake.ErrLeaseLapsed, err, time.UnixMilli(s.gateMs).UTC())
}

func (s *Source) waitingErr() error {
	return fmt.Errorf("%w: worker id %d; issuing from %v (lease %v + margin %v)",
		snowflake.ErrRetakeWait, s.id, time.UnixMilli(s.gateMs).UTC(), s.cfg.Lease, s.cfg.Margin)
}

// retakeLocked re-acquires this process's worker id when its lease may be void: the lease ran
// out by this process's clock (measured from the send of its last confirmed renewal: a SIGSTOP,
// a long outage), a fenced write matched no row (taken over, released, or lost by a failover),
// or a write's outcome is unknown. It reads the row: still ours → Reclaim (epoch+1); missing
// → INSERT; free → Take (compare-and-set on version); held by another → lost (ErrWorkerLost; the generator acquires again). After a
// re-acquisition it is a taker like any other: Extend refuses until Lease+Margin have passed
// and the clock is above the row's reserved_until, so the generator issues nothing meanwhile.
// An unknown outcome counts as applied: the row is read back first on the next call.
func (s *Source) retakeLocked(ctx context.Context, now time.Time) error {
	if !now.Before(s.deadline) && !s.fenced {
		s.mu.Lock()
		s.stats.SelfFences++
		s.fenced = true
		s.mu.Unlock()
		s.log.Warn("snowflake: mysql worker lease ran out before it was renewed; re-acquiring",
			zap.Int64("worker_id", s.id), zap.Time("last_renewal_sent", s.sent), zap.Duration("lease", s.cfg.Lease))
	}
	r, ok, err := s.st.Get(ctx, s.id)
	if err != nil {
		s.unsure = true
		return s.setErr(unavailable(fmt.Sprintf("reading worker id %d to re-acquire it", s.id), err))
	}
	cl := claim{Holder: s.cfg.Holder, Instance: s.instance, Token: s.token, Layout: s.layoutString(), Lease: s.cfg.Lease}
	var wrote bool
	epoch := r.Epoch + 1
	switch {
	case ok && r.Token == s.token:
		wrote, err = s.st.Reclaim(ctx, s.id, r.Epoch, s.token, s.cfg.Lease)
	case !ok:
		wrote, err = s.st.Insert(ctx, s.id, cl)
		epoch = 1
	case r.Free:
		wrote, err = s.st.Take(ctx, s.id, r.Version, cl)
	default:
		// ErrWorkerLost: the generator stops issuing and calls Acquire again, which takes
		// another free id above every bound (the taker's wait).
		return s.setLost(fmt.Errorf("%w: worker id %d is held by %s (instance %s) since this process's lease may have run out",
			snowflake.ErrWorkerLost, s.id, r.Holder, r.Instance))
	}
	if err != nil || !wrote {
		s.unsure = true // maybe applied, or raced: read the row back next time
		if err == nil {
			err = errors.New("the row changed meanwhile")
		}
		return s.setErr(unavailable(fmt.Sprintf("re-acquiring worker id %d", s.id), err))
	}
	ack := s.cfg.Clock.Now()
	s.mu.Lock()
	s.epoch, s.unsure, s.fenced = epoch, false, false
	s.sent, s.deadline = now, now.Add(s.cfg.Lease)
	s.gate = ack.Add(s.cfg.TakerWait())
	s.gateMs = max(ack.UnixMilli()+s.cfg.TakerWait().Milliseconds(), r.ReservedUntil+1)
	s.until = max(s.until, r.ReservedUntil)
	if gb := time.UnixMilli(s.gateMs).UTC(); gb.After(s.bound) {
		s.bound = gb
	}
	s.rebound = true
	s.stats.Acquisitions++
	s.mu.Unlock()
	s.log.Warn("snowflake: mysql worker id re-acquired; issuing again after the taker's wait",
		zap.Int64("worker_id", s.id), zap.Int64("epoch", epoch), zap.Time("issuing_from", time.UnixMilli(s.gateMs)))
	return s.setErr(s.waitingErr())
}

// renewOnce renews the lease when a third of it has passed since the last confirmed send
// (the renewal goroutine's step; Extend renews too).
func (s *Source) renewOnce(ctx context.Context) {
	s.ioMu.Lock()
	defer s.ioMu.Unlock()
	s.mu.Lock()
	skip := s.closed || !s.held || s.lost != nil
	s.mu.Unlock()
	if skip {
		return
	}
	now := s.cfg.Clock.Now()
	if now.Sub(s.sent) < s.cfg.Lease/3 {
		return
	}
	if s.unsure || !now.Before(s.deadline) {
		_ = s.retakeLocked(ctx, now)
		return
	}
	ok, err := s.st.Renew(ctx, s.id, s.epoch, s.token, s.until, s.cfg.Lease)
	switch {
	case err != nil:
		s.mu.Lock()
		s.stats.RenewalFailures++
		s.lastErr = err.Error()
		s.mu.Unlock()
		s.log.Debug("snowflake: mysql worker lease renewal failed", zap.Error(err))
	case !ok:
		_ = s.retakeLocked(ctx, now)
	default:
		s.renewedLocked(now)
	}
}

func (s *Source) renewLoop() {
	defer s.wg.Done()
	step := max(s.cfg.Lease/6, 10*time.Millisecond)
	for {
		t := s.cfg.Clock.NewTimer(step)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.QueryTimeout)
		s.renewOnce(ctx)
		cancel()
	}
}
