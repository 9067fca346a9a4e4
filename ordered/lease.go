// Package ordered serves ORDERED tags (docs/SEGMENT.md, "Ordered tags"):
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

// Row is a tag's row of leafd_leader as one statement read or wrote it. No field is on the
// database's clock: who may take the row is judged on the taker's own monotonic clock
// (Lease.Renew), so a step of the database host's clock changes nothing.
type Row struct {
	Holder  string // "" while free: never granted, or given back by a holder that stopped
	Epoch   int64  // the store's term: grows by one at each take
	Version int64  // grows by one at each write of the row; a take compares it
	// Server is the identity of the database server that wrote the row last (0: unknown, a
	// row from before it was recorded); At that of the server that answered. They differ
	// after a failover: the row may miss the other server's latest writes.
	Server, At int64
	// Longest is the longest lease any grant of the row had: how long a holder whose
	// writes this server missed may still count itself leader.
	Longest time.Duration
	// Expires is the row's expires as the database wrote it (on its clock): never read as a
	// time, only compared, so that a renewal by a leafd that does not count versions (an
	// older one, during an upgrade) still shows as a change of the row. Empty when unknown.
	Expires string
}

// Store reads and writes the lease rows (*MySQLLeases). Each call is one statement.
type Store interface {
	// Read returns the tag's row; ErrNotOrdered when it has none.
	Read(ctx context.Context, tag string) (Row, error)
	// Write replaces old by a row held by holder for length (the epoch one higher when take),
	// if the row is still old (same version and server) and the server answering is old.At;
	// ok false (and no change) otherwise. It returns the row written.
	Write(ctx context.Context, tag string, old Row, holder string, take bool, length time.Duration) (r Row, ok bool, err error)
}

// written is the row that Write(old, holder, take, length) leaves when it succeeds.
func written(old Row, holder string, take bool, length time.Duration) Row {
	r := Row{Holder: holder, Epoch: old.Epoch, Version: old.Version + 1, Server: old.At, At: old.At, Longest: max(old.Longest, length)}
	if take {
		r.Epoch++
	}
	return r
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
	// watch is the servers answered as the instance saw them (shared by its leases); nil:
	// the lease's own.
	watch *serverWatch
}

// Lease is this instance's view of one tag's lease. Renew is called by one goroutine (the
// renewer); Valid and State by any.
//
// The rules, all on this host's monotonic clock (see docs/SEGMENT.md, "What the order rests
// on"): a holder serves until the send time of its latest successful write plus Length less
// Margin; a taker takes a row held by another only after it has read the very same row
// (version, server) for W, the longest lease the row or this instance ever granted, and
// then serves at once; a row written last by
// another server, or a free row while this instance has not seen the server answering for
// W, is taken at once but served only W after the take's reply (the settle).
type Lease struct {
	cfg   Config
	store Store

	mu    sync.Mutex
	mine  *Row      // the row as our latest successful write left it; nil when not holding
	until time.Time // local deadline (monotonic); zero when not leader
	from  time.Time // serving starts here (a settling grant), else zero
	term  int64     // local count of the terms begun here: never reused, unlike epochs after a failover
	// The observation of another's row: obs as first read at seen (a reply time);
	// longest: the longest lease seen in any row (at least Length).
	obs     *Row
	seen    time.Time
	longest time.Duration

	// view is what Valid reads without the lock: one pointer, so that the term and the
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
	if cfg.watch == nil {
		cfg.watch = &serverWatch{}
	}
	return &Lease{cfg: cfg, store: st, base: cfg.Clock.Now(), longest: cfg.Length}, nil
}

// State is a Lease at one moment.
type State struct {
	Leader bool
	Epoch  int64     // the lease's term in the store: ours while Leader, else the holder's as seen
	Term   int64     // local term (Valid's), while Leader
	Until  time.Time // local deadline while Leader
	From   time.Time // a settling grant serves from here (zero: at once)
	Holder string    // the holder seen (this instance when Leader)
	// HolderUntil: when this instance would take another holder's row if it stays unchanged
	// (its first read of the row + W): until then the holder counts as live. Zero when
	// Leader or unknown.
	HolderUntil time.Time
	NewTerm     bool // Renew: this grant began a term (the caller must start above every range of earlier terms)
}

// Renew runs one renewal, or one look at the row and perhaps a take: one statement when the
// renewal succeeds, at most three otherwise. A deadline counts from the moment its write was
// SENT: the holder's own row cannot have been taken before that moment. A failed or
// ambiguous call leaves the deadline where it was (it runs out by itself); a refused renewal
// ends leadership at once.
func (l *Lease) Renew(ctx context.Context) (State, error) {
	l.mu.Lock()
	mine := l.mine
	l.mu.Unlock()
	if mine != nil {
		sent := l.cfg.Clock.Now()
		r, ok, err := l.store.Write(ctx, l.cfg.Tag, *mine, l.cfg.Holder, false, l.cfg.Length)
		l.mu.Lock()
		if err != nil {
			defer l.mu.Unlock()
			return l.stateLocked(), err
		}
		if ok {
			defer l.mu.Unlock()
			// Past its deadline the holder stopped serving: the next ID starts a new term.
			return l.grantLocked(r, sent, !sent.Before(l.until), 0), nil
		}
		l.dropLocked() // another wrote the row, or another server answers: stop at once
		l.mu.Unlock()
	}
	row, err := l.store.Read(ctx, l.cfg.Tag)
	if err != nil {
		return l.State(), err
	}
	got := l.cfg.Clock.Now()
	l.mu.Lock()
	settle, take := l.judgeLocked(row, got)
	if !take {
		defer l.mu.Unlock()
		return l.stateLocked(), nil
	}
	l.mu.Unlock()
	sent := l.cfg.Clock.Now()
	r, ok, err := l.store.Write(ctx, l.cfg.Tag, row, l.cfg.Holder, true, l.cfg.Length)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil || !ok {
		// Changed meanwhile (the next look starts again), or unknown: a take applied
		// without our knowing shows as a row of ours we did not write, waited out like any.
		return l.stateLocked(), err
	}
	if settle > 0 {
		// Counted from the reply: a holder this server's row does not know of may have
		// renewed on the other server until the moment this take committed.
		settle += l.cfg.Clock.Now().Sub(sent)
	}
	return l.grantLocked(r, sent, true, settle), nil
}

// judgeLocked records a read of the row at got (its reply) and decides: take it (serving at
// once, or settle after the take's reply), or wait.
func (l *Lease) judgeLocked(row Row, got time.Time) (settle time.Duration, take bool) {
	stable := l.cfg.watch.observe(row.At, got)
	if l.obs == nil || *l.obs != row {
		l.obs, l.seen = &row, got
	}
	l.longest = max(l.longest, row.Longest)
	w := l.longest
	switch {
	case row.Server != row.At:
		// Written last by another server (a failover; a never-granted row counts alike):
		// its holders are not refused here, and their leases run up to W from now.
		return w, true
	case row.Holder == "":
		// Given back (its holder stopped first) or never granted, on this server. Served
		// at once unless this instance saw another server answer within W: then it may be
		// a failback to a server that lost the grants made on the other.
		if stable(w) {
			return 0, true
		}
		return w, true
	case got.Sub(l.seen) >= w:
		// The holder's latest write was before our first read of it, so its deadline
		// (that write's send + its lease, at most W) has passed on any clock that runs at
		// our rate.
		return 0, true
	}
	return 0, false
}

// grantLocked records a successful write sent at sent.
func (l *Lease) grantLocked(r Row, sent time.Time, newTerm bool, settle time.Duration) State {
	if newTerm {
		l.term++
		// A settle still running is kept: a renewal after the deadline must not cut it.
		if !l.from.After(sent) {
			l.from = time.Time{}
		}
		if from := sent.Add(settle); settle > 0 && from.After(l.from) {
			l.from = from
		}
	}
	l.mine, l.obs = &r, nil
	l.until = sent.Add(l.cfg.Length - l.cfg.Margin)
	l.cfg.watch.observe(r.At, l.cfg.Clock.Now())
	l.viewLocked()
	st := l.stateLocked()
	st.NewTerm = newTerm
	return st
}

func (l *Lease) dropLocked() {
	l.mine, l.until, l.from = nil, time.Time{}, time.Time{}
	l.view.Store(nil)
}

// Drop ends leadership at once (a shutdown, or a renewal the caller gave up on).
func (l *Lease) Drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked()
}

// Release ends leadership here, then gives the row back through rel when it was serving: the
// others may take it at once instead of waiting it out.
func (l *Lease) Release(ctx context.Context, rel Releaser) error {
	_, was := l.Valid()
	l.mu.Lock()
	mine := l.mine
	l.dropLocked()
	l.mu.Unlock()
	if !was || mine == nil || rel == nil {
		return nil
	}
	return rel.Release(ctx, l.cfg.Tag, *mine)
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
	if l.mine != nil && l.cfg.Clock.Now().Before(l.until) {
		return State{Leader: true, Epoch: l.mine.Epoch, Term: l.term, Until: l.until, From: l.from, Holder: l.cfg.Holder}
	}
	if l.obs == nil {
		return State{}
	}
	return State{Holder: l.obs.Holder, HolderUntil: l.seen.Add(l.longest), Epoch: l.obs.Epoch}
}

// serverWatch is which database server an instance's lease statements reached last, and
// when that changed: for W after a change, a free row may be a failback to a server that
// lost the grants made on the other, so it settles.
type serverWatch struct {
	mu      sync.Mutex
	at      int64     // the server that answered last (0: none yet)
	changed time.Time // when another server than the one before answered (zero: never)
}

// observe records that server at answered at now, and returns whether no other server has
// answered for a given length (as of now).
func (w *serverWatch) observe(at int64, now time.Time) func(time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.at != 0 && at != w.at {
		w.changed = now
	}
	w.at = at
	changed := w.changed
	return func(d time.Duration) bool { return changed.IsZero() || now.Sub(changed) >= d }
}
