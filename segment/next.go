package segment

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Next returns the next ID of tag (INCR). It allocates nothing when tag is held and its
// current segment has IDs left.
func (g *Generator) Next(tag string) (int64, error) {
	if b := g.tags.load(tag); b != nil {
		// The per-buffer hot path (buffer.take, inlined): an atomic pointer load, an atomic
		// add, a comparison with the bound; past the preload threshold one atomic load of the
		// flags.
		if v, st := b.take(); st == taken {
			return v, nil
		} else {
			return g.nextMiss(b, v, st)
		}
	}
	return g.nextSlow(tag)
}

// Serves reports whether n values of tag can come from the segment in memory without waiting
// for a load: the tag is held and its current segment has n values left. It takes nothing and
// does not start a load; a racing taker may use the values first (that request then waits as
// usual). The event-loop server asks it (through handlers' MayBlock) to run a request that
// would wait off its loop instead of stalling the loop's other connections.
func (g *Generator) Serves(tag string, n int64) bool {
	b := g.tags.load(tag)
	if b == nil {
		return false
	}
	s := b.cur.Load()
	return s != nil && n >= 1 && s.cursor.Load() <= s.end-n
}

// nextMiss handles what the inlined fast path does not on a held tag: a preload to start
// after a successful take, or no value at all.
func (g *Generator) nextMiss(b *buffer, v int64, st takeState) (int64, error) {
	if st == takenPreload {
		g.preload(b)
		return v, nil
	}
	return g.nextSlow(b.tag)
}

// nextSlow handles what the inlined fast path does not: a tag not held, or no value in its
// current segment. A buffer dropped meanwhile (errStale) is never loaded again: the tag is
// looked up anew, so every later value comes from a buffer whose ranges lie above it.
func (g *Generator) nextSlow(tag string) (int64, error) {
	var w waiter
	for {
		b, err := g.buffer(tag)
		if err != nil {
			return 0, err
		}
		v, err := g.nextFrom(b, &w)
		if err != errStale {
			return v, err
		}
	}
}

func (g *Generator) nextFrom(b *buffer, w *waiter) (int64, error) {
	for {
		s := b.cur.Load()
		if s != nil {
			if v, ok := s.take(); ok {
				if v >= s.threshold && b.flags.Load() == 0 {
					g.preload(b)
				}
				return v, nil
			}
		}
		if _, err := g.advance(b, s, w, true); err != nil {
			return 0, err
		}
	}
}

// NextN reserves n contiguous IDs of tag from one segment and returns the highest; the caller
// owns [r-n+1, r] (INCRBY). When the rest of the current segment cannot hold n, the next
// segment is loaded (or awaited) first and n checked against its size: only when it fits is
// the rest abandoned (a gap) and the next segment used; otherwise ErrLimit, with nothing
// abandoned. A tag this instance does not hold is never created by a count that the first
// segment of a new tag (Config.DefaultStep) cannot hold.
func (g *Generator) NextN(tag string, n int64) (int64, error) {
	if n < 1 {
		return 0, tagError(tag, ErrLimit, fmt.Sprintf("count %d: must be at least 1", n))
	}
	if err := g.checkNewTagCount(tag, n); err != nil {
		return 0, err
	}
	var w waiter
	for {
		b, err := g.buffer(tag)
		if err != nil {
			return 0, err
		}
		v, err := g.nextNFrom(b, n, &w)
		if err != errStale {
			return v, err
		}
	}
}

func (g *Generator) nextNFrom(b *buffer, n int64, w *waiter) (int64, error) {
	for {
		s := b.cur.Load()
		if s != nil {
			// CAS, not Add: a failed Add(n) would push the cursor n past the end each time,
			// and repeated INCRBY calls while no segment can be loaded would wrap it.
			for c := s.cursor.Load(); c < s.end; c = s.cursor.Load() {
				if n <= s.end-c {
					if !s.cursor.CompareAndSwap(c, c+n) {
						continue
					}
					last := c + n - 1
					if last >= s.threshold && b.flags.Load() == 0 {
						g.preload(b)
					}
					return last, nil
				}
				// The rest does not fit. Abandon it only for a next segment that holds n.
				nx, err := g.advance(b, s, w, false)
				if err != nil {
					return 0, err
				}
				if nx == nil {
					break // s was switched out meanwhile
				}
				if size := nx.end - nx.start; n > size {
					return 0, tagError(b.tag, ErrLimit, fmt.Sprintf(
						"count %d exceeds what a segment holds now (max %d)", n, max(size, s.end-s.cursor.Load())))
				}
				if s.cursor.CompareAndSwap(c, s.end) {
					b.mu.Lock()
					b.abandoned += s.end - c
					b.mu.Unlock()
					break
				}
			}
		}
		if _, err := g.advance(b, s, w, true); err != nil {
			return 0, err
		}
	}
}

// checkNewTagCount refuses, without creating anything, an INCRBY of a tag that is neither
// held nor in the store when auto-create would give it segments smaller than n.
func (g *Generator) checkNewTagCount(tag string, n int64) error {
	if !g.cfg.AutoCreate || n <= g.cfg.DefaultStep {
		return nil
	}
	if g.tags.load(tag) != nil {
		return nil
	}
	if err := ValidateTag(tag); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.WaitTimeout)
	defer cancel()
	if _, err := g.store.MaxID(ctx, tag); errors.Is(err, ErrUnknownTag) {
		return tagError(tag, ErrLimit, fmt.Sprintf(
			"count %d exceeds the first segment of a new tag (max %d); the tag was not created", n, g.cfg.DefaultStep))
	}
	return nil // other errors show again, as the real error, on the load
}

// AppendIDs appends n strictly increasing IDs of tag to dst (IDS.SEGMENT); they may span
// segments. n must be in [0, Config.MaxBatch], else ErrLimit. On error dst is returned
// unchanged (IDs already taken are lost: a gap).
func (g *Generator) AppendIDs(dst []int64, tag string, n int) ([]int64, error) {
	if n < 0 || n > g.cfg.MaxBatch {
		return dst, tagError(tag, ErrLimit, fmt.Sprintf("count %d: must be between 0 and %d", n, g.cfg.MaxBatch))
	}
	base := len(dst)
	dst = slices.Grow(dst, n)
	var w waiter
	left := int64(n)
	for {
		b, err := g.buffer(tag)
		if err != nil {
			return dst[:base], err
		}
		if dst, err = g.appendFrom(dst, b, &left, &w); err != errStale {
			if err != nil {
				return dst[:base], err
			}
			return dst, nil
		}
	}
}

func (g *Generator) appendFrom(dst []int64, b *buffer, left *int64, w *waiter) ([]int64, error) {
	for *left > 0 {
		s := b.cur.Load()
		// The Load keeps failed calls from pushing an exhausted cursor further (see NextN).
		if s != nil && s.cursor.Load() < s.end {
			if v0 := s.cursor.Add(*left) - *left; v0 < s.end {
				m := min(*left, s.end-v0)
				for v := v0; v < v0+m; v++ {
					dst = append(dst, v)
				}
				*left -= m
				if v0+m-1 >= s.threshold && b.flags.Load() == 0 {
					g.preload(b)
				}
				continue
			}
		}
		if _, err := g.advance(b, s, w, true); err != nil {
			return dst, err
		}
	}
	return dst, nil
}
