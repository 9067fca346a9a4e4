package zk

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	if p := s.lost.Load(); p != nil {
		if !errors.Is(*p, snowflake.ErrWorkerLost) {
			return snowflake.Worker{}, *p // the state node was deleted: stopped for good
		}
		// The id was lost to another process: acquire as a new start would, above every bound
		// (the data dir's is above every ID this process issued).
		s.lost.Store(nil)
		s.acquired, s.node, s.dirty, s.releaseAt = false, "", false, 0
	}
	w, err := s.acquireZK(ctx, cache, dirBound)
	if err == nil || !unavailable(err) {
		return w, err
	}
	if why := s.outageRefusal(cache); why != "" {
		return snowflake.Worker{}, fmt.Errorf("%w: zookeeper unreachable (%v) and %s; waiting for ZooKeeper", snowflake.ErrSourceUnavailable, err, why)
	}
	tol := min(s.cfg.OutageTolerance.Milliseconds(), cache.ToleranceMs)
	s.log.Warn("snowflake: zookeeper unreachable; starting from the local state within the outage tolerance", zap.Error(err),
		zap.Int64("worker_id", cache.WorkerID), zap.Time("until", msTime(cache.ZKConfirmedMs+tol)))
	s.id, s.node, s.acquired, s.dirty, s.cacheHigh = cache.WorkerID, "", true, true, dirBound
	s.zkUntil, s.tolerance = cache.ZKConfirmedMs, tol
	return snowflake.Worker{ID: cache.WorkerID, Bound: msTime(dirBound), Source: "zookeeper (local cache)",
		BoundCause: "the data dir's reserved_until"}, nil
}

// outageRefusal says why the data dir's cached worker id may not serve while ZooKeeper is
// unreachable, or "" when it may. The rule (docs/SNOWFLAKE.md, "The outage start"): the cache
// must prove that no other process can hold the id in this domain. It does when
//
//   - it was written by this identity in this worker-id domain (servers, chroot, name);
//   - by this data dir's own instance in this boot and directory: the data dir's lock then
//     proves that process dead, and a copy elsewhere is another instance (statefile drops
//     the fields below when it renews the instance);
//   - with an outage tolerance that ZooKeeper holds for the id: every other process that
//     claims the id through ZooKeeper starts above confirmed + tolerance, and a write that
//     may have lowered it (the stop's, even when its reply was lost) counts as applied, so the
//     tolerance is then 0;
//   - and the clock is still before confirmed + tolerance.
func (s *Source) outageRefusal(cache statefile.State) string {
	tol := min(s.cfg.OutageTolerance.Milliseconds(), cache.ToleranceMs)
	now := s.cfg.Clock.Now().UnixMilli()
	switch {
	case cache.Source != "zookeeper" || cache.Name != s.cfg.Name || cache.Addr != s.cfg.Addr:
		return "no local state of this identity"
	case cache.Chroot != s.cfg.Chroot || !slices.Equal(cache.Servers, sortedServers(s.cfg.Servers)):
		return fmt.Sprintf("the local state is of another worker-id domain (servers %v, chroot %q; this start: %v, %q)",
			cache.Servers, cache.Chroot, sortedServers(s.cfg.Servers), s.cfg.Chroot)
	case s.cache.Renewed() != "":
		return "the data dir was copied, restored or moved, or the host rebooted (" + s.cache.Renewed() +
			"): nothing proves that the process whose state it holds is not running"
	case tol <= 0:
		return "the local state holds no outage tolerance confirmed by ZooKeeper (none configured, a graceful stop announced 0, " +
			"a write whose outcome is unknown counted as applied, or the data dir is a copy)"
	case now >= cache.ZKConfirmedMs+tol:
		return fmt.Sprintf("the outage tolerance past the last confirmed bound %v is used up", msTime(cache.ZKConfirmedMs))
	case cache.WorkerID > s.cfg.MaxWorkerID:
		return fmt.Sprintf("the cached worker id %d is above the layout's maximum %d", cache.WorkerID, s.cfg.MaxWorkerID)
	}
	return ""
}

func sortedServers(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return out
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
	var c *claim   // the id whose live node this process holds
	s.reported = 0 // set from the nodes below
	// Our own nodes, lowest id first. Without reuse an identity has one (Leaf's model); with
	// reuse, a node of ours may be held by another identity that took it over while we were
	// down, and then we may have made another: every free one of ours is used before a new
	// node is created, so that restarts do not leak ids.
	for i := range kids {
		own := kids[i]
		if own.addr != s.cfg.Addr {
			continue
		}
		err := s.claimLive(ctx, own.id)
		if err == nil {
			c = &claim{id: own.id, path: s.forever() + "/" + own.name, how: "own node"}
			break
		}
		if !errors.Is(err, snowflake.ErrWorkerHeld) {
			return snowflake.Worker{}, err
		}
		l, _, lerr := s.readLive(ctx, own.id)
		if !s.cfg.Reuse || lerr != nil || l.Holder == s.cfg.Addr {
			if msg := err.Error(); msg != s.lastHeld { // once per holder: the retries run every 100ms
				s.lastHeld = msg
				s.log.Warn("snowflake: worker id held by another live process; not serving it", zap.Error(err))
			}
			return snowflake.Worker{}, err
		}
		// Taken over by another identity (worker reuse): look for another id.
		s.log.Info("snowflake: our worker id is held by another live instance", zap.Int64("worker_id", own.id),
			zap.String("holder", l.Holder))
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
	return snowflake.Worker{ID: c.id, Bound: msTime(c.bound), Source: "zookeeper", BoundCause: c.cause}, nil
}

// localState is what the data dir records for bound until.
func (s *Source) localState(until int64) statefile.State {
	return statefile.State{WorkerID: s.id, ReservedUntilMs: until, Source: "zookeeper", Addr: s.cfg.Addr, Name: s.cfg.Name,
		Servers: sortedServers(s.cfg.Servers), Chroot: s.cfg.Chroot, Reuse: s.cfg.Reuse, ZKConfirmedMs: s.zkUntil, ToleranceMs: s.tolerance}
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
