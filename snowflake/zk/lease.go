package zk

import (
	"context"
	"errors"
	"fmt"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/snowflake"
)

// Extend persists reserved_until: first in the state node (version-checked: the fence), then in
// the data dir. When ZooKeeper cannot be reached, the data dir alone is enough while until stays
// within the outage tolerance past the last bound ZooKeeper confirmed; the state node is updated
// in the background when ZooKeeper returns.
func (s *Source) Extend(ctx context.Context, until time.Time) error {
	s.zkMu.Lock()
	defer s.zkMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("snowflake: source closed")
	}
	if !s.acquired {
		return errors.New("snowflake: Extend before Acquire")
	}
	if err := s.lostErr(); err != nil {
		return err
	}
	u := until.UnixMilli()
	var zkErr error
	switch {
	case s.node == "":
		zkErr = errors.New("worker id not yet confirmed by zookeeper")
	case s.conn.State() != gozk.StateHasSession:
		zkErr = fmt.Errorf("zookeeper %v", s.conn.State())
	default:
		zctx := ctx
		if s.cfg.OutageTolerance > 0 {
			// With a tolerance to fall back on, do not let a hung ZooKeeper eat the lease.
			var cancel context.CancelFunc
			zctx, cancel = context.WithTimeout(ctx, time.Second)
			defer cancel()
		}
		tol := s.cfg.OutageTolerance.Milliseconds()
		if u < s.zkUntil {
			// Lowering the bound: the generator's Close, after it has stopped issuing.
			// Announce tolerance 0, so that a successor (a clean restart) need not wait it.
			// A successor may start just above u once this write is applied, and it may be
			// applied though its reply is lost (a timeout): so it counts as applied before
			// it is sent, in memory and in the data dir, and a restart during an outage
			// cannot serve on the tolerance this write withdraws.
			tol = 0
			s.zkUntil, s.tolerance = u, 0
			if err := s.cache.Write(s.localState(s.cacheHigh)); err != nil {
				return err
			}
		}
		if testHookLowering != nil && tol == 0 {
			testHookLowering()
		}
		zkErr = s.writeStateLocked(zctx, u, tol)
		if zkErr == nil {
			if err := s.cache.Write(s.localState(u)); err != nil {
				return err
			}
			s.cacheHigh, s.dirty = u, false
			return nil
		}
		if s.lostErr() != nil {
			return zkErr
		}
	}
	if u > s.zkUntil+s.tolerance {
		return fmt.Errorf("%w: %v; %v is beyond the outage tolerance (%dms) past the bound zookeeper confirmed (%v)",
			snowflake.ErrSourceUnavailable, zkErr, msTime(u), s.tolerance, msTime(s.zkUntil))
	}
	if err := s.cache.Write(s.localState(u)); err != nil {
		return err
	}
	s.cacheHigh, s.dirty = u, true
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// maintain owns the background work: drain session events, re-claim the live node after a
// session expiry, copy a local bound to ZooKeeper, report the timestamp. It ends when the
// connection's event channel is closed (after Close), which also means the client's own
// goroutines have ended.
func (s *Source) maintain(events <-chan gozk.Event) {
	defer s.wg.Done()
	// The report timer, re-armed at each tick.
	var (
		timer clock.Timer
		tick  <-chan time.Time
	)
	arm := func() {
		if s.cfg.ReportInterval > 0 {
			timer = s.cfg.Clock.NewTimer(s.cfg.ReportInterval)
			tick = timer.C()
		}
	}
	arm()
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			switch ev.State {
			case gozk.StateExpired:
				s.log.Warn("snowflake: zookeeper session expired")
			case gozk.StateHasSession:
				s.refresh()
			}
		case <-tick:
			arm() // before the refresh, like a ticker: a slow refresh does not delay the next
			s.refresh()
		case <-s.kick:
			s.refresh()
		}
	}
}

// refresh confirms an id taken from the local state, re-claims the live node in a new session,
// copies a bound kept only locally to the state node, and reports the timestamp.
func (s *Source) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), min(s.cfg.SessionTimeout, 2*time.Second))
	defer cancel()
	s.zkMu.Lock()
	defer s.zkMu.Unlock()
	if !s.acquired || s.closed || s.conn.State() != gozk.StateHasSession {
		return
	}
	if s.lostErr() != nil {
		s.releaseLiveLocked(ctx)
		return
	}
	s.mu.Lock()
	cacheHigh, dirty := s.cacheHigh, s.dirty
	s.mu.Unlock()
	if s.node == "" {
		if err := s.resolveLocked(ctx); err != nil {
			return
		}
	} else if sid := s.conn.SessionID(); sid != s.session {
		if err := s.claimLive(ctx, s.id); err != nil {
			if errors.Is(err, snowflake.ErrWorkerHeld) {
				err := s.setLost(fmt.Errorf("%w: %w", snowflake.ErrWorkerLost, err))
				s.log.Error("snowflake: worker id lost", zap.Error(err))
			}
			return
		}
		s.session = sid
	}
	if dirty {
		until := max(s.zkUntil, cacheHigh)
		if err := s.writeStateLocked(ctx, until, s.cfg.OutageTolerance.Milliseconds()); err != nil {
			return
		}
		s.mu.Lock()
		if s.cacheHigh <= until { // else an Extend ran meanwhile: still dirty
			s.dirty = false
		}
		_ = s.cache.Write(s.localState(s.cacheHigh))
		s.mu.Unlock()
	}
	if err := s.reportLocked(ctx); err != nil {
		s.log.Debug("snowflake: zookeeper report failed", zap.Error(err))
	}
}

// resolveLocked confirms, once ZooKeeper is back, an id taken from the local state during an
// outage: the node must still exist, the live node must be ours to claim, and the state must
// not have been rewritten by another data dir.
func (s *Source) resolveLocked(ctx context.Context) error {
	kids, err := s.children(ctx)
	if err != nil {
		return err
	}
	path := ""
	for _, k := range kids {
		if k.addr == s.cfg.Addr && k.id == s.id {
			path = s.forever() + "/" + k.name
		}
	}
	if path == "" {
		err := s.setLost(fmt.Errorf("%w: zookeeper has no node %s-%010d for the cached worker id (was its data lost?)", snowflake.ErrWorkerLost, s.cfg.Addr, s.id))
		s.log.Error("snowflake: cached worker id not confirmed", zap.Error(err))
		return err
	}
	if err := s.claimLive(ctx, s.id); err != nil {
		if errors.Is(err, snowflake.ErrWorkerHeld) {
			err = s.setLost(fmt.Errorf("%w: %w", snowflake.ErrWorkerLost, err))
			s.log.Error("snowflake: cached worker id not confirmed", zap.Error(err))
		}
		return err
	}
	st, ver, ok, err := s.readState(ctx, s.id)
	if err != nil {
		return err
	}
	if ok && st.Instance != s.instance {
		err := s.setLost(fmt.Errorf("%w: worker id %d was claimed by %s (instance %s) during the outage", snowflake.ErrWorkerLost, s.id, st.Holder, st.Instance))
		s.log.Error("snowflake: cached worker id not confirmed", zap.Error(err))
		return err
	}
	s.node, s.version, s.session = path, ver, s.conn.SessionID()
	if ok {
		s.zkUntil = max(s.zkUntil, st.ReservedUntil)
	}
	s.log.Info("snowflake: zookeeper back; cached worker id confirmed", zap.Int64("worker_id", s.id))
	return nil
}

// releaseLiveLocked deletes our live node once the clock is past releaseAt (set when our state
// node was found deleted), so that a standby of this identity can take the id over instead of
// waiting for this process to restart. Not before: the generator may issue up to the lease it
// last extended, and the successor, with no state node, starts only above the forever node's
// report + 3 s (docs/SNOWFLAKE.md, "Never delete state/ or live/ by hand").
func (s *Source) releaseLiveLocked(ctx context.Context) {
	if s.releaseAt <= 0 || s.cfg.Clock.Now().UnixMilli() <= s.releaseAt {
		return
	}
	l, st, err := s.readLive(ctx, s.id)
	if err == nil && l.Token == s.token {
		_, err = call(s, ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(s.livePath(s.id), st.Version) })
	}
	if err == nil || errors.Is(err, gozk.ErrNoNode) || errors.Is(err, gozk.ErrBadVersion) {
		s.log.Warn("snowflake: state node deleted; live node released", zap.Int64("worker_id", s.id))
		s.releaseAt = 0
	}
}
