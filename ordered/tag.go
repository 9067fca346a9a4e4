package ordered

import (
	"sort"
	"sync/atomic"
	"time"
)

// Tag is one ordered tag as this instance sees it.
type Tag struct {
	Name  string
	lease *Lease // nil when Local
	m     *Manager
	// active is the local term whose held segments were dropped: the tag is served only in
	// it (Serving), never in a term whose drop has not finished.
	active atomic.Int64
	// Counters of this tag.
	Forwarded, ForwardErrors atomic.Int64

	stepped chan struct{} // closed after the tag's first lease call (Route may wait for it)
	// the manager goroutine's
	next    time.Time
	lastErr atomic.Pointer[string]
}

// Serving reports whether this instance may issue IDs of the tag now, and in which local
// term: its lease is valid and the tag's held segments were dropped at the start of that
// term. Callers check it before and after taking IDs, with the same term both times. No
// lock, no allocation.
func (t *Tag) Serving() (term int64, ok bool) {
	if t.lease == nil {
		return 0, true // Local
	}
	term, ok = t.lease.Valid()
	return term, ok && term == t.active.Load()
}

// Held is Serving without the clock (Lease.Held): the check before a take and the route's
// hint (forwarded or not). A take it lets through is sent only if Serving, checked after the
// take, answers the same term.
func (t *Tag) Held() (term int64, ok bool) {
	if t.lease == nil {
		return 0, true // Local
	}
	term, ok = t.lease.Held()
	return term, ok && term == t.active.Load()
}

// Route is where a request for the tag goes when this instance does not serve it.
type Route struct {
	// Leader is the holder's advertised address ("" when no lease is valid anywhere, as far
	// as this instance knows: the old one is running out, or nobody has campaigned yet).
	Leader string
	// Wait: without Leader, how long until the lease seen can have run out (0: unknown,
	// or now); with the lease ours but not yet serving (settling), until it serves.
	Wait time.Duration
	// Here: the lease is this instance's; it serves after Wait.
	Here bool
}

// Route returns where to send a request this instance does not serve now.
func (t *Tag) Route() Route {
	if t.lease == nil {
		return Route{Here: true}
	}
	now := t.m.cfg.Clock.Now()
	s := t.lease.State()
	if s.Leader {
		r := Route{Here: true}
		if s.From.After(now) {
			r.Wait = s.From.Sub(now)
		}
		return r
	}
	if s.Holder != "" && s.Holder != t.m.self && now.Before(s.HolderUntil) {
		return Route{Leader: HolderAddr(s.Holder)}
	}
	var r Route
	if s.HolderUntil.After(now) {
		r.Wait = s.HolderUntil.Sub(now)
	}
	return r
}

// Status is one ordered tag for IDS.INFO and /status.json.
type Status struct {
	Tag                      string
	Leader                   string        // the holder seen ("" none)
	Here                     bool          // this instance serves it now
	Epoch                    int64         // the lease's term in the store (while held here)
	Remaining                time.Duration // of the lease (held here: to the local deadline; else the holder's, as seen)
	Forwarded, ForwardErrors int64
	LastError                string
}

// Status of one tag.
func (t *Tag) Status() Status {
	st := Status{Tag: t.Name, Forwarded: t.Forwarded.Load(), ForwardErrors: t.ForwardErrors.Load()}
	if p := t.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	if t.lease == nil {
		st.Here = true
		st.Leader = t.m.cfg.Holder
		return st
	}
	now := t.m.cfg.Clock.Now()
	s := t.lease.State()
	_, st.Here = t.Serving()
	st.Leader = HolderAddr(s.Holder)
	st.Epoch = s.Epoch
	if s.Leader {
		st.Remaining = max(0, s.Until.Sub(now))
	} else if s.HolderUntil.After(now) {
		st.Remaining = s.HolderUntil.Sub(now)
	}
	return st
}

// Statuses of every known ordered tag, by name.
func (m *Manager) Statuses() []Status {
	tags := *m.tags.Load()
	out := make([]Status, 0, len(tags))
	for _, t := range tags {
		out = append(out, t.Status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out
}

// run is the lease goroutine: each tag's next renewal or campaign when due, the list of
// ordered tags every Length.
func (t *Tag) markStepped() {
	select {
	case <-t.stepped:
	default:
		close(t.stepped)
	}
}

// Stepped reports whether WaitFirst returns at once: the tag's first lease call here is made
// (or none is: Local, Manual).
func (t *Tag) Stepped() bool {
	if t.lease == nil || t.m.cfg.Manual {
		return true
	}
	select {
	case <-t.stepped:
		return true
	default:
		return false
	}
}

// WaitFirst waits, up to d, for the tag's first lease call here (a tag just learned of has
// no route yet); it returns at once after that call.
func (t *Tag) WaitFirst(d time.Duration) {
	if t.lease == nil || t.m.cfg.Manual { // Manual: no goroutine makes the call
		return
	}
	select {
	case <-t.stepped:
		return
	default:
	}
	tm := t.m.cfg.Clock.NewTimer(d)
	defer tm.Stop()
	select {
	case <-t.stepped:
	case <-tm.C():
	}
}
