package zk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/leafd/leafd/snowflake"
)

// The exclusive claim and leafd's own state in ZooKeeper.
//
// Leaf reads only /snowflake/<name>/forever; leafd keeps everything else in two nodes per
// worker id beside it, which Leaf never reads:
//
//	/snowflake/<name>/live/<id>    ephemeral: the claim. {"holder","instance","token"}
//	/snowflake/<name>/state/<id>   persistent: the fence. {"holder","instance","token",
//	                                "reserved_until","reuse","tolerance_ms"}
//
// An instance issues IDs of a worker id only after it has created the live node (ZooKeeper
// makes the create atomic: one winner) and then rewritten the state node with a version check
// (which makes every later write of an earlier holder fail). A live node left by another data
// dir is never replaced: that process may be alive (two processes with the same --advertise-addr
// on different data dirs, or a paused one). A live node left by this data dir is replaced: its
// process is dead, since this one holds the data dir's lock.

// testHookFence, when set by a test, runs in fence between reading the state node and writing
// it back.
var testHookFence func(id int64)

// testHookLowering, when set by a test, runs in Extend just before a write that announces
// tolerance 0 (a lowering write) is sent.
var testHookLowering func()

// claim is a worker id whose live node this process has claimed (claimLive), and, once fence
// has run, the state node it wrote.
type claim struct {
	id    int64
	path  string // the forever node
	how   string // "own node", "taken over" or "new node", for the log
	fresh bool   // the forever node was just created: nothing to read from it

	// Set by fence.
	bound int64   // the start bound: this process issues only in milliseconds above it
	ver   int32   // the state node's version after our write
	prev  zkState // the state node before our write (its previous holder)
	cause string  // what bound is made of (snowflake.Worker.BoundCause)
}

// zkLive is the data of a live (ephemeral) node.
type zkLive struct {
	Holder   string `json:"holder"`   // ip:port
	Instance string `json:"instance"` // the holder's data dir
	Token    string `json:"token"`    // the holder's process
}

// zkState is the data of a state node.
type zkState struct {
	Holder   string `json:"holder"`
	Instance string `json:"instance"`
	Token    string `json:"token"`
	// ReservedUntil (Unix ms): the holder issues only below it, plus ToleranceMs when it has
	// lost ZooKeeper.
	ReservedUntil int64 `json:"reserved_until"`
	// Reuse: the holder runs with worker reuse, so another identity may take the id over once
	// the live node is gone.
	Reuse bool `json:"reuse"`
	// ToleranceMs: how far past ReservedUntil the holder may issue without ZooKeeper (its
	// Config.OutageTolerance). A successor from another data dir starts above
	// ReservedUntil+ToleranceMs.
	ToleranceMs int64 `json:"tolerance_ms"`
	// Reported: the forever node's timestamp as leafd last wrote it. A larger timestamp there
	// was written by someone else (Leaf), who may have issued up to 3s past it.
	Reported int64 `json:"reported"`
}

func (s *Source) livePath(id int64) string  { return s.root + "/live/" + strconv.FormatInt(id, 10) }
func (s *Source) statePath(id int64) string { return s.root + "/state/" + strconv.FormatInt(id, 10) }

func (s *Source) readLive(ctx context.Context, id int64) (zkLive, *gozk.Stat, error) {
	type got struct {
		l  zkLive
		st *gozk.Stat
	}
	g, err := call(s, ctx, func() (got, error) {
		b, st, err := s.conn.Get(s.livePath(id))
		if err != nil {
			return got{}, err
		}
		var l zkLive
		if err := json.Unmarshal(b, &l); err != nil {
			return got{}, fmt.Errorf("snowflake: live node %s: bad JSON: %w", s.livePath(id), err)
		}
		return got{l, st}, nil
	})
	return g.l, g.st, err
}

// claimLive creates the live node of id for this process. It returns an ErrWorkerHeld error
// naming the holder when another data dir holds it. A node of this data dir's dead predecessor
// is replaced.
func (s *Source) claimLive(ctx context.Context, id int64) error {
	p := s.livePath(id)
	b, _ := json.Marshal(zkLive{Holder: s.cfg.Addr, Instance: s.instance, Token: s.token})
	for range 3 {
		_, err := call(s, ctx, func() (string, error) {
			return s.conn.Create(p, b, gozk.FlagEphemeral, gozk.WorldACL(gozk.PermAll))
		})
		if err == nil {
			return nil
		}
		if !errors.Is(err, gozk.ErrNodeExists) {
			return err
		}
		l, st, err := s.readLive(ctx, id)
		if errors.Is(err, gozk.ErrNoNode) {
			continue
		}
		if err != nil {
			return err
		}
		if l.Token == s.token {
			return nil
		}
		if l.Instance != s.instance {
			return fmt.Errorf("%w: worker id %d is held by %s (data dir instance %s); this process (%s, instance %s) will not serve it "+
				"while that one lives", snowflake.ErrWorkerHeld, id, l.Holder, l.Instance, s.cfg.Addr, s.instance)
		}
		// Our data dir's earlier process: dead (we hold the data dir's lock), its session not
		// yet expired.
		_, err = call(s, ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(p, st.Version) })
		if err != nil && !errors.Is(err, gozk.ErrNoNode) && !errors.Is(err, gozk.ErrBadVersion) {
			return err
		}
	}
	return fmt.Errorf("%w: live node %s keeps changing", snowflake.ErrWorkerHeld, p)
}

// readState returns the state node of id; ok is false when there is none.
func (s *Source) readState(ctx context.Context, id int64) (st zkState, ver int32, ok bool, err error) {
	type got struct {
		st  zkState
		ver int32
	}
	g, err := call(s, ctx, func() (got, error) {
		b, stat, err := s.conn.Get(s.statePath(id))
		if err != nil {
			return got{}, err
		}
		var st zkState
		if err := json.Unmarshal(b, &st); err != nil {
			return got{}, fmt.Errorf("snowflake: state node %s: bad JSON: %w", s.statePath(id), err)
		}
		return got{st, stat.Version}, nil
	})
	if errors.Is(err, gozk.ErrNoNode) {
		return zkState{}, -1, false, nil
	}
	return g.st, g.ver, err == nil, err
}

// myState is the state node content of this process with the given bound and tolerance.
func (s *Source) myState(until, tol int64) zkState {
	return zkState{Holder: s.cfg.Addr, Instance: s.instance, Token: s.token, ReservedUntil: until,
		Reuse: s.cfg.Reuse, ToleranceMs: tol, Reported: s.reported}
}

// putState writes the state node: a version-checked set of version ver, or a create when ver
// is -1 (no node). It returns the new version; gozk.ErrBadVersion / gozk.ErrNodeExists mean someone
// else wrote first.
func (s *Source) putState(ctx context.Context, id int64, ver int32, st zkState) (int32, error) {
	b, _ := json.Marshal(st)
	if ver < 0 {
		_, err := call(s, ctx, func() (string, error) {
			return s.conn.Create(s.statePath(id), b, 0, gozk.WorldACL(gozk.PermAll))
		})
		return 0, err
	}
	stat, err := call(s, ctx, func() (*gozk.Stat, error) { return s.conn.Set(s.statePath(id), b, ver) })
	if err != nil {
		return 0, err
	}
	return stat.Version, nil
}

// fence makes this process the state node's holder of id, once it holds the live node: it
// reads the state, computes the bound this process must start above, and writes the state back
// with a version check, retrying when another write came in between (its bound then counts).
// fv is the forever node (zero for a node just created); dirBound the data dir's bound. It sets
// c.bound, c.ver and c.prev.
func (s *Source) fence(ctx context.Context, c *claim, fv foreverData, dirBound int64) error {
	id, path := c.id, c.path
	for range 5 {
		st, v, ok, err := s.readState(ctx, id)
		if err != nil {
			return err
		}
		bound := max(dirBound, fv.LegacyReservedUntil, fv.Timestamp)
		cause := "the data dir's reserved_until"
		if bound > dirBound {
			cause = "the forever node's timestamp"
		}
		if fv.Timestamp > 0 && (!ok || fv.Timestamp > st.Reported) {
			// Written by Leaf (no state node, or a timestamp leafd did not write): Leaf may
			// have issued up to a report period past it.
			if b := fv.Timestamp + leafReportMs; b > bound {
				bound, cause = b, "the forever node's timestamp plus Leaf's 3s report period"
			}
		}
		if ok {
			if st.Reuse && !s.cfg.Reuse && st.Holder != s.cfg.Addr {
				return fmt.Errorf("snowflake: worker id %d (node %s) was taken over by %s (worker reuse); "+
					"start this instance with --worker-reuse too, or with a new identity", id, path, st.Holder)
			}
			b := st.ReservedUntil
			if st.Token != s.token {
				// Another process held it and may still run: it may have issued up to its
				// tolerance past the bound it wrote, without telling ZooKeeper. That holds for
				// this data dir's own earlier process too: a copy of the data dir has the same
				// instance, while the original, cut off from ZooKeeper, keeps issuing. A
				// graceful Close announced tolerance 0 (Extend), so a clean restart waits for
				// nothing; only a restart after a crash waits the tolerance.
				b += max(st.ToleranceMs, 0)
			}
			if b > bound {
				bound, cause = b, fmt.Sprintf("the state node's reserved_until %v written by %s plus its outage tolerance %v",
					msTime(st.ReservedUntil), st.Holder, time.Duration(b-st.ReservedUntil)*time.Millisecond)
			}
		}
		s.reported = max(s.reported, st.Reported, fv.Timestamp)
		// The claim announces tolerance 0 (below), which lets a later claimant start at bound.
		// The write may be applied though its reply is lost, so it counts as applied before it
		// is sent: a data dir that still allows an outage start on this id (this process
		// re-claiming its own id after a loss, its token still in the state node) withdraws
		// that tolerance first, as the stop's lowering write does
		// (TestZKReclaimOwnIDWithdrawsOutagePermit).
		if err := s.dropOutagePermit(id); err != nil {
			return err
		}
		if testHookFence != nil {
			testHookFence(id)
		}
		// Tolerance 0 until this process has issued: the claim alone raises nothing, so a start
		// that never issues (killed while it waits for the bound) leaves the next start the
		// same bound instead of pushing it out by another tolerance (a ratchet:
		// TestZKNeverIssuedStartKeepsBound). The first extension, before the first ID,
		// announces the tolerance.
		nv, err := s.putState(ctx, id, v, s.myState(bound, 0))
		if errors.Is(err, gozk.ErrBadVersion) || errors.Is(err, gozk.ErrNodeExists) {
			continue
		}
		if err != nil {
			return err
		}
		c.bound, c.ver, c.prev, c.cause = bound, nv, st, cause
		s.tolerance = 0 // what the state node now says (see writeStateLocked)
		return nil
	}
	return fmt.Errorf("snowflake: state node %s keeps changing", s.statePath(id))
}

// writeStateLocked writes reserved_until and the tolerance to our state node with a version
// check; on success s.zkUntil and s.tolerance are what the node says, the limit this process
// may issue below without ZooKeeper. A write that fails may still have been applied: the
// caller counts it as applied when that lowers the limit (Extend). A conflict not explained by
// a write of ours (a reply we missed) means the id was taken: s.lost is set.
func (s *Source) writeStateLocked(ctx context.Context, until, tol int64) error {
	if err := s.lostErr(); err != nil {
		return err
	}
	for range 3 {
		v, err := s.putState(ctx, s.id, s.version, s.myState(until, tol))
		if err == nil {
			s.version, s.zkUntil, s.tolerance = v, until, tol
			return nil
		}
		if errors.Is(err, gozk.ErrNoNode) {
			return s.stateDeleted()
		}
		if !errors.Is(err, gozk.ErrBadVersion) {
			return fmt.Errorf("%w: %w", snowflake.ErrSourceUnavailable, err)
		}
		cur, ver, ok, err := s.readState(ctx, s.id)
		if err != nil {
			return fmt.Errorf("%w: %w", snowflake.ErrSourceUnavailable, err)
		}
		if !ok {
			return s.stateDeleted()
		}
		if cur.Token != s.token {
			err := s.setLost(fmt.Errorf("%w: worker id %d was taken over by %s (instance %s)", snowflake.ErrWorkerLost, s.id, cur.Holder, cur.Instance))
			s.log.Error("snowflake: worker id lost", zap.Error(err))
			return err
		}
		s.version = ver // an earlier write of ours whose reply we missed
	}
	return fmt.Errorf("%w: state node %s keeps changing", snowflake.ErrSourceUnavailable, s.statePath(s.id))
}

// stateDeleted (zkMu held) marks the id lost because its state node was deleted by hand, and
// schedules the release of the live node past every millisecond this process may issue in.
func (s *Source) stateDeleted() error {
	s.releaseAt = max(s.zkUntil, s.cacheHigh) + max(s.tolerance, 0)
	err := s.setLost(fmt.Errorf("%w: worker id %d: state node %s was deleted; the live node is released after %v",
		snowflake.ErrNoWorker, s.id, s.statePath(s.id), msTime(s.releaseAt)))
	s.log.Error("snowflake: worker id lost", zap.Error(err))
	return err
}

// dropOutagePermit records tolerance 0 in the data dir when it caches worker id id with an
// outage tolerance, before a claim of id announces tolerance 0 in ZooKeeper: an outage start
// from the data dir can then serve only below the bound ZooKeeper confirmed, which is at or
// below the bound the claim writes.
func (s *Source) dropOutagePermit(id int64) error {
	st, ok, err := s.cache.Read()
	if err != nil || !ok || st.WorkerID != id || st.Source != "zookeeper" || st.ToleranceMs <= 0 {
		return err
	}
	st.ToleranceMs = 0
	return s.cache.Write(st)
}
