package zk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// Acquire claims this instance's worker id: its own node's (by ip:port), a taken-over one
// (Reuse), or a new sequential node's. With ZooKeeper unreachable it falls back to the local
// state within the outage tolerance, or fails with ErrSourceUnavailable. A worker id held by
// another live process is an ErrWorkerHeld error.
func (s *Source) Acquire(ctx context.Context) (snowflake.Worker, error) {
	s.zkMu.Lock()
	defer s.zkMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return snowflake.Worker{}, errors.New("snowflake: source closed")
	}
	cache, _, err := s.cache.Read()
	if err != nil {
		return snowflake.Worker{}, err
	}
	s.cache.Lock()
	err = s.cache.CheckLayout(cache)
	s.cache.Unlock()
	if err != nil {
		return snowflake.Worker{}, err
	}
	dirBound := cache.ReservedUntilMs // the data dir's, whichever source wrote it
	usable := cache.Source == "zookeeper" && cache.Name == s.cfg.Name && cache.Addr == s.cfg.Addr
	if cache.Source == "zookeeper" && !usable {
		s.log.Warn("snowflake: local state is for another identity; keeping only its time bound",
			zap.String("cache_name", cache.Name), zap.String("cache_addr", cache.Addr))
	}
	w, err := s.acquireZK(ctx, cache, dirBound)
	if err == nil || !unavailable(err) {
		return w, err
	}
	tol := min(s.tolerance, cache.ToleranceMs)
	now := s.cfg.Clock.Now().UnixMilli()
	switch {
	case !usable:
		return snowflake.Worker{}, fmt.Errorf("%w: zookeeper unreachable (%v) and no local state of this identity", snowflake.ErrSourceUnavailable, err)
	case tol <= 0:
		return snowflake.Worker{}, fmt.Errorf("%w: zookeeper unreachable (%v); with no outage tolerance the worker id needs ZooKeeper's confirmation", snowflake.ErrSourceUnavailable, err)
	case now >= cache.ZKConfirmedMs+tol:
		return snowflake.Worker{}, fmt.Errorf("%w: zookeeper unreachable (%v) and the outage tolerance past the last confirmed bound %v is used up",
			snowflake.ErrSourceUnavailable, err, msTime(cache.ZKConfirmedMs))
	case cache.WorkerID > s.cfg.MaxWorkerID:
		return snowflake.Worker{}, fmt.Errorf("snowflake: cached worker id %d above the layout's maximum %d", cache.WorkerID, s.cfg.MaxWorkerID)
	}
	s.log.Warn("snowflake: zookeeper unreachable; starting from the local state within the outage tolerance", zap.Error(err),
		zap.Int64("worker_id", cache.WorkerID), zap.Time("until", msTime(cache.ZKConfirmedMs+tol)))
	s.id, s.node, s.acquired, s.dirty, s.cacheHigh = cache.WorkerID, "", true, true, dirBound
	s.zkUntil, s.tolerance = cache.ZKConfirmedMs, tol
	return snowflake.Worker{ID: cache.WorkerID, Bound: msTime(dirBound), Source: "zookeeper (local cache)"}, nil
}

func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func (s *Source) acquireZK(ctx context.Context, cache statefile.State, dirBound int64) (snowflake.Worker, error) {
	if err := s.ensurePaths(ctx); err != nil {
		return snowflake.Worker{}, err
	}
	if err := s.checkZKLayout(ctx); err != nil {
		return snowflake.Worker{}, err
	}
	kids, err := s.children(ctx)
	if err != nil {
		return snowflake.Worker{}, err
	}
	var own *foreverChild
	for i := range kids {
		if kids[i].addr == s.cfg.Addr {
			own = &kids[i]
			break
		}
	}
	var c *claim   // the id whose live node this process holds
	s.reported = 0 // set from the nodes below
	if own != nil {
		err := s.claimLive(ctx, own.id)
		switch {
		case err == nil:
			c = &claim{id: own.id, path: s.forever() + "/" + own.name, how: "own node"}
		case errors.Is(err, snowflake.ErrWorkerHeld):
			l, _, lerr := s.readLive(ctx, own.id)
			if !s.cfg.Reuse || lerr != nil || l.Holder == s.cfg.Addr {
				if msg := err.Error(); msg != s.lastHeld { // once per holder: the retries run every 100ms
					s.lastHeld = msg
					s.log.Warn("snowflake: worker id held by another live process; not serving it", zap.Error(err))
				}
				return snowflake.Worker{}, err
			}
			// Taken over by another identity (worker reuse): look for another id.
			s.log.Warn("snowflake: our worker id is held by another live instance", zap.Int64("worker_id", own.id),
				zap.String("holder", l.Holder))
		default:
			return snowflake.Worker{}, err
		}
	}
	if c == nil && s.cfg.Reuse {
		if c, err = s.takeOver(ctx, kids); err != nil {
			return snowflake.Worker{}, err
		}
	}
	if c == nil {
		if c, err = s.createNode(ctx); err != nil {
			return snowflake.Worker{}, err
		}
		if err := s.claimLive(ctx, c.id); err != nil {
			return snowflake.Worker{}, fmt.Errorf("snowflake: live node of new worker id %d: %w", c.id, err)
		}
	}
	if c.id > s.cfg.MaxWorkerID {
		return snowflake.Worker{}, fmt.Errorf("snowflake: worker id %d (node %s) is above the layout's maximum %d: "+
			"the worker ids of /snowflake/%s are exhausted (use a new --name, more worker bits, or --worker-reuse)",
			c.id, c.path, s.cfg.MaxWorkerID, s.cfg.Name)
	}
	var fv foreverData
	if !c.fresh {
		if fv, err = s.getForever(ctx, c.path); err != nil {
			return snowflake.Worker{}, err
		}
	}
	if err := s.fence(ctx, c, fv, dirBound); err != nil {
		return snowflake.Worker{}, err
	}
	s.id, s.node, s.version, s.acquired, s.dirty = c.id, c.path, c.ver, true, false
	s.session = s.conn.SessionID()
	s.zkUntil, s.cacheHigh = c.bound, c.bound
	if err := s.cache.Write(s.localState(c.bound)); err != nil {
		return snowflake.Worker{}, err
	}
	s.log.Info("snowflake: worker id from zookeeper", zap.Int64("worker_id", c.id), zap.String("node", c.path),
		zap.String("how", c.how), zap.Time("bound", msTime(c.bound)), zap.String("previous_holder", c.prev.Holder))
	return snowflake.Worker{ID: c.id, Bound: msTime(c.bound), Source: "zookeeper"}, nil
}

// localState is what the data dir records for bound until.
func (s *Source) localState(until int64) statefile.State {
	return statefile.State{WorkerID: s.id, ReservedUntilMs: until, Source: "zookeeper", Addr: s.cfg.Addr, Name: s.cfg.Name,
		Reuse: s.cfg.Reuse, ZKConfirmedMs: s.zkUntil, ToleranceMs: s.tolerance}
}

// takeOver claims the live node of an id whose holder ran with reuse and is gone. It returns
// nil when there is none. The caller fences the state node.
func (s *Source) takeOver(ctx context.Context, kids []foreverChild) (*claim, error) {
	for _, k := range kids {
		if k.id > s.cfg.MaxWorkerID || k.addr == s.cfg.Addr {
			continue
		}
		st, _, ok, err := s.readState(ctx, k.id)
		if err != nil {
			if unavailable(err) {
				return nil, err
			}
			continue
		}
		if !ok || !st.Reuse {
			continue // its holder may serve beyond what ZooKeeper knows, or is Leaf: never reuse
		}
		if err := s.claimLive(ctx, k.id); err != nil {
			if errors.Is(err, snowflake.ErrWorkerHeld) {
				continue // live, and not ours
			}
			return nil, err
		}
		s.log.Warn("snowflake: taking over the worker id of a dead instance", zap.Int64("worker_id", k.id),
			zap.String("previous_holder", st.Holder))
		return &claim{id: k.id, path: s.forever() + "/" + k.name, how: "taken over"}, nil
	}
	return nil, nil
}
