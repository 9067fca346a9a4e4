package segment

import (
	"errors"
)

// Health is what readiness is decided from.
type Health struct {
	// StoreOK: the latest store call (tag list or lease) was answered, and the latest read or
	// raise of a regression mark succeeded (a range whose mark cannot be raised is never
	// used, so a failing marks file stops new segments as surely as a failing store). Errors
	// of one tag (unknown, regression) count as answers.
	StoreOK bool
	// StoreError is the error of the latest store call, or of the marks file, when it failed.
	StoreError string
	// Serving is the number of held tags that can serve now (IDs left in the current
	// segment, or the next one loaded). Counted only when the store does not answer.
	Serving int
	// Warming: the warm start is still loading first segments.
	Warming bool
}

// Ready reports whether the instance can serve: the store answers (any tag can then be
// loaded on its first request), or, while it does not, at least one held tag still has IDs.
func (h Health) Ready() bool { return h.StoreOK || h.Serving > 0 }

// Health returns the readiness inputs (/readyz). While the store answers it costs nothing;
// otherwise one pass over the held tags.
func (g *Generator) Health() Health {
	h := Health{StoreOK: true}
	select {
	case <-g.warmDone:
	default:
		h.Warming = true
	}
	e := g.storeErr.Load()
	if m := g.marksErr.Load(); m != nil {
		e = m
	}
	if e != nil {
		h.StoreOK, h.StoreError = false, *e
		g.tags.each(func(b *buffer) bool {
			if b.canServe() {
				h.Serving++
			}
			return true
		})
	}
	return h
}

// WarmDone is closed when the warm start has ended.
func (g *Generator) WarmDone() <-chan struct{} { return g.warmDone }

// marksAnswered records the outcome of a read or raise of a mark for Health.
func (g *Generator) marksAnswered(err error) {
	if err == nil {
		if g.marksErr.Load() != nil {
			g.marksErr.Store(nil)
		}
		return
	}
	msg := "regression marks: " + err.Error()
	g.marksErr.Store(&msg)
}

// storeAnswered records the outcome of a store call for Health: err is nil or an error of
// the call; errors of one tag mean the store answered.
func (g *Generator) storeAnswered(err error) {
	switch {
	case err == nil, errors.Is(err, ErrUnknownTag), errors.Is(err, ErrRegression),
		errors.Is(err, ErrLimit), errors.Is(err, ErrTagExists), errors.Is(err, ErrInvalidTag),
		errors.Is(err, ErrNotAdopted):
		if g.storeErr.Load() != nil {
			g.storeErr.Store(nil)
		}
	case errors.Is(err, errRejected), errors.Is(err, errClosed), errors.Is(err, errStale):
	default:
		msg := err.Error()
		g.storeErr.Store(&msg)
	}
}
