// Package ordered serves ORDERED tags (issue 20, part 2; docs/SEGMENT.md, "Ordered tags"):
// one instance at a time serves such a tag, its leader, chosen by a fenced row of leafd_leader
// on the database's clock (Lease, MySQLLeases); one Manager goroutine keeps the lease of every
// ordered tag an instance has seen, and the Forwarder carries the other instances' requests of
// the tag to the leader over pooled, pipelined RESP connections.
package ordered

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafd/leafd/internal/clock"
)

// Grant is what one acquire-or-renew statement answered.
type Grant struct {
	Granted bool   // the caller holds the lease now
	Epoch   int64  // the lease's term: grows by one at each change of holder (or lapse)
	Holder  string // who holds it (the caller when Granted)
	// Remaining is how long the holder's lease still runs on the store's clock (refused
	// grants: when a campaign may succeed).
	Remaining time.Duration
	// Settle: the row was last granted on another database server (a failover since): the
	// old holder's lease, judged by the old server, may still run for up to a lease length,
	// so the new holder serves only after one lease length from its grant.
	Settle bool
}

// Store runs the acquire-or-renew of a tag's lease on the database clock (*MySQLLeases).
type Store interface {
	// Acquire grants the lease to holder for length (on the store's clock, from the moment the
	// statement runs) when it is free, lapsed, or already holder's and live; ErrNotOrdered when
	// the tag has no lease row.
	Acquire(ctx context.Context, tag, holder string, length time.Duration) (Grant, error)
}

// ErrNotOrdered: the tag is not an ORDERED tag (no row in leafd_leader).
var ErrNotOrdered = errors.New("ordered: the tag is not ordered")

// Config of one Lease.
type Config struct {
	Tag    string
	Holder string        // this instance (unique among the instances; e.g. its advertised RESP address)
	Length time.Duration // the lease written on the database clock. Default 3s.
	// Margin is taken off the local deadline: the drift between this host's monotonic clock
	// and the database's clock over one Length, plus scheduling. Default Length/10; must be
	// below Length.
	Margin time.Duration
	Clock  clock.Clock // the monotonic clock of the deadline; default clock.Real
}

// Lease is this instance's view of one tag's lease. Renew is called by one goroutine (the
// renewer); Valid and State by any.
type Lease struct {
	cfg   Config
	store Store

	mu    sync.Mutex
	until time.Time // local deadline (monotonic); zero when not leader
	epoch int64     // term of the latest grant to us (0: none)
	other string    // holder seen by the latest refused renewal
	oend  time.Time // when other's lease runs out, estimated from the refusal (local clock)
	oepo  int64     // other's epoch, seen by the refusal
	from  time.Time // serving starts here (a settling grant), else zero
	term  int64     // local count of the terms begun here: never reused, unlike epochs after a failover

	// view is what Valid reads without the lock: one pointer, so that the epoch and the
	// deadline of one grant are always seen together.
	view atomic.Pointer[leaseView]
	// base: the offsets of the view count from here (New's Clock.Now), so that Valid reads
	// the monotonic clock alone (clock.Since), not the wall clock too: Valid runs two or three
	// times per request of an ordered tag.
	base time.Time
}

// leaseView is one grant as Valid sees it: [from, until) as offsets from Lease.base.
type leaseView struct {
	term        int64
	from, until time.Duration
}

// viewLocked publishes the grant held now.
func (l *Lease) viewLocked() {
	v := &leaseView{term: l.term, until: l.until.Sub(l.base)}
	if !l.from.IsZero() {
		v.from = l.from.Sub(l.base)
	}
	l.view.Store(v)
}

// New returns a Lease that holds nothing until its first Renew.
func New(cfg Config, st Store) (*Lease, error) {
	if cfg.Length == 0 {
		cfg.Length = 3 * time.Second
	}
	if cfg.Margin == 0 {
		cfg.Margin = cfg.Length / 10
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Tag == "" || cfg.Holder == "" || st == nil {
		return nil, errors.New("ordered: a lease needs a tag, a holder and a store")
	}
	if cfg.Length < 0 || cfg.Margin < 0 || cfg.Margin >= cfg.Length {
		return nil, fmt.Errorf("ordered: lease length %v, margin %v: need 0 <= margin < length", cfg.Length, cfg.Margin)
	}
	return &Lease{cfg: cfg, store: st, base: cfg.Clock.Now()}, nil
}

// State is a Lease at one moment.
type State struct {
	Leader bool
	Epoch  int64     // the lease's term in the store: ours while Leader, else the holder's as seen
	Term   int64     // local term (Valid's), while Leader
	Until  time.Time // local deadline while Leader
	From   time.Time // a settling grant serves from here (zero: at once)
	Holder string    // the holder seen (this instance when Leader)
	// HolderUntil: when another holder's lease runs out as last seen (a refused renewal: its
	// send time + the remaining lease on the store's clock). Zero when Leader or unknown.
	HolderUntil time.Time
	NewTerm     bool // Renew: this grant began a term (the caller must start above every range of earlier terms)
}

// Renew runs one acquire-or-renew. The deadline counts from the moment the statement was
// SENT, not from its reply: the database set its expiry at or after that moment, so this
// instance stops serving before any other instance can see the lease lapse (given Margin
// covers the clocks' drift). A failed or ambiguous call leaves the deadline where it was (it
// runs out by itself); a refusal ends leadership at once.
func (l *Lease) Renew(ctx context.Context) (State, error) {
	sent := l.cfg.Clock.Now()
	g, err := l.store.Acquire(ctx, l.cfg.Tag, l.cfg.Holder, l.cfg.Length)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		return l.stateLocked(), err
	}
	if !g.Granted {
		l.until, l.epoch, l.other, l.from = time.Time{}, 0, g.Holder, time.Time{}
		l.oend, l.oepo = sent.Add(g.Remaining), g.Epoch
		l.view.Store(nil)
		return l.stateLocked(), nil
	}
	// A grant that must settle is a new term even at an epoch seen before (a failover to a
	// replica that missed some renewals can repeat an epoch).
	newTerm := g.Epoch != l.epoch || g.Settle
	if newTerm {
		l.term++
		l.from = time.Time{}
		if g.Settle {
			// Counted from the reply: the old server may have renewed the old holder until
			// the moment the new one answered.
			l.from = l.cfg.Clock.Now().Add(l.cfg.Length)
		}
	}
	l.epoch, l.other, l.oend = g.Epoch, "", time.Time{}
	l.until = sent.Add(l.cfg.Length - l.cfg.Margin)
	l.viewLocked()
	st := l.stateLocked()
	st.NewTerm = newTerm
	return st, nil
}

// Drop ends leadership at once (a shutdown, or a renewal the caller gave up on).
func (l *Lease) Drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until, l.epoch, l.from = time.Time{}, 0, time.Time{}
	l.view.Store(nil)
}

// Valid reports whether this instance may serve the tag now, and the local term it serves in
// (State.Term: a count of the terms begun here, never reused). It takes no lock and
// allocates nothing (one atomic load and the clock).
func (l *Lease) Valid() (term int64, ok bool) {
	v := l.view.Load()
	if v == nil {
		return 0, false
	}
	el := clock.Since(l.cfg.Clock, l.base)
	if el < v.until && el >= v.from {
		return v.term, true
	}
	return 0, false
}

// Held is Valid without reading the clock while the grant serves at once (no settle): the
// grant published, whatever its deadline. It is the check BEFORE a take, which only has to
// see that the term began (its drop is done); the check after the take is Valid, on the
// clock, with the same term: an ID taken once the deadline passed is never sent. A settling
// grant is judged by Valid.
func (l *Lease) Held() (term int64, ok bool) {
	v := l.view.Load()
	if v == nil {
		return 0, false
	}
	if v.from != 0 {
		return l.Valid()
	}
	return v.term, true
}

// State returns the lease now (IDS.INFO).
func (l *Lease) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stateLocked()
}

func (l *Lease) stateLocked() State {
	if l.epoch != 0 && l.cfg.Clock.Now().Before(l.until) {
		return State{Leader: true, Epoch: l.epoch, Term: l.term, Until: l.until, From: l.from, Holder: l.cfg.Holder}
	}
	return State{Holder: l.other, HolderUntil: l.oend, Epoch: l.oepo}
}
