package segment

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// waiter bounds the total wait of one request.
type waiter struct {
	deadline <-chan time.Time
	waited   bool // waited for a load that has ended
	counted  bool // counted in stats.waits
}

// advance is called after a take from s (b's current segment when read, or nil) failed or did
// not fit, so s is nil or about to be given up. It makes sure the next segment of b is loaded
// (starting a load or waiting for the running one, bounded by WaitTimeout) and returns it;
// with doSwitch it also makes it current. It returns (nil, nil) when b's current segment is
// no longer s, errStale when b was dropped, and the request's error when no segment can be
// had.
func (g *Generator) advance(b *buffer, s *seg, w *waiter, doSwitch bool) (*seg, error) {
	for {
		b.mu.Lock()
		if b.cur.Load() != s {
			b.mu.Unlock()
			w.waited = false
			return nil, nil
		}
		if nx := b.next; nx != nil { // never set on a dead buffer
			if doSwitch {
				if s != nil {
					b.retired += s.used()
				}
				b.cur.Store(nx)
				b.next = nil
				b.since = g.cfg.Clock.Now()
				b.setFlagsLocked()
			}
			b.mu.Unlock()
			w.waited = false
			return nx, nil
		}
		if b.loading {
			done, wait := b.done, g.waitBoundLocked(b)
			b.mu.Unlock()
			if w.deadline == nil {
				w.deadline = g.cfg.Clock.After(wait)
			}
			if !w.counted {
				w.counted = true
				g.stats.waits.Add(1)
			}
			select {
			case <-done:
				w.waited = true
				continue
			case <-w.deadline:
				b.mu.Lock()
				err := g.failureLocked(b, "no segment ready within the wait timeout")
				if te, ok := err.(*TagError); ok && errors.Is(te, ErrUnavailable) && b.loading {
					// The truth of the wait: its load never left the queue, or it ran at
					// the store for the whole wait.
					if b.runStarted {
						te.Waited = fmt.Sprintf("waited %v for the store: its load is running there", wait.Round(time.Millisecond))
					} else {
						te.Waited = fmt.Sprintf("waited %v for a free loader: its load is still queued, %d loads in the queues", wait.Round(time.Millisecond), g.queued())
					}
				}
				b.mu.Unlock()
				return nil, err
			}
		}
		// No segment and no load. A load we waited for has failed, or one failed recently:
		// report it rather than hit the store again before RetryBackoff.
		if b.dead && (!w.waited || b.lastErr == nil) && !g.closed.Load() {
			b.mu.Unlock()
			w.waited = false // the next buffer of the tag starts afresh
			return nil, errStale
		}
		if w.waited || (b.lastErr != nil && int64(g.mono.since()) < b.retryAt.Load()) || g.closed.Load() {
			err := g.failureLocked(b, "no segment ready")
			b.mu.Unlock()
			return nil, err
		}
		g.startLoadLocked(b)
		b.mu.Unlock()
		g.submit(b)
	}
}

// failureLocked builds the error of a request that found no segment (b.mu held).
func (g *Generator) failureLocked(b *buffer, what string) error {
	err := b.lastErr
	if g.closed.Load() {
		err = errClosed
	}
	return g.requestError(b.tag, err, what)
}

// requestError turns the error of a load into the error of a request.
func (g *Generator) requestError(tag string, err error, what string) error {
	var te *TagError
	switch {
	case errors.Is(err, ErrUnknownTag):
		g.stats.unknown.Add(1)
		detail := "no such tag in the store"
		if !g.cfg.AutoCreate {
			detail += " (auto-create is off)"
		}
		return &TagError{Tag: strings.Clone(tag), Err: ErrUnknownTag, Detail: detail}
	case errors.Is(err, ErrRegression) && errors.As(err, &te):
		return te
	case errors.Is(err, ErrLimit) && errors.As(err, &te):
		return te
	case errors.Is(err, ErrNotAdopted) && errors.As(err, &te):
		return te
	case errors.Is(err, ErrShaped):
		return &TagError{Tag: strings.Clone(tag), Err: ErrShaped, Detail: "the tag has an ID shape: use IDS.NEXT"}
	case errors.Is(err, ErrNotAdmitted):
		return &TagError{Tag: strings.Clone(tag), Err: err, Detail: "not served by this instance now"}
	}
	g.stats.unavailable.Add(1)
	waited := ""
	switch {
	case errors.Is(err, errRejected):
		waited = "did not wait: the loader queue is full"
	case errors.Is(err, errClosed):
		waited = "did not wait: the server is shutting down"
	}
	if err != nil {
		what += "; last load: " + err.Error()
	}
	return &TagError{Tag: strings.Clone(tag), Err: ErrUnavailable, Detail: what, Waited: waited, Cause: err}
}

// waitBoundLocked is how long a request waits for b's running load (b.mu held).
//
// WaitTimeout, except when the loads of the tag are known to take longer: a load is slow, not
// stuck, while it takes no more than twice the fastest of the tag's recent successful loads
// (the load log, in this process), so the wait is at least that, within WaitTimeout +
// LoadTimeout. The fastest, not the latest: one slow commit of a near database does not
// stretch the bound; a far database, where every load is slow, does. The first load of a tag
// (its auto-creation, the first lease after a restart) has nothing preloaded before it and,
// through a far database, takes many round trips: its waiters wait for its outcome, up to
// WaitTimeout + LoadTimeout (the load itself ends at LoadTimeout; WaitTimeout covers the wait
// for a free loader).
func (g *Generator) waitBoundLocked(b *buffer) time.Duration {
	limit := g.cfg.WaitTimeout + g.cfg.LoadTimeout
	if !b.initOK {
		return limit
	}
	fastest := time.Duration(-1)
	for i := range min(b.loads.n, loadLogSize) {
		if r := b.loads.recs[i]; r.Error == "" && (fastest < 0 || r.Duration < fastest) {
			fastest = r.Duration
		}
	}
	return min(max(g.cfg.WaitTimeout, 2*fastest), limit)
}
