package segment

import (
	"context"
	"errors"
)

// Prefetch loads tag's first segment into this instance without taking an ID, and waits for
// the load (or ctx). Nothing is done when the tag is held with a segment or a load running. A
// shaped tag's next period row is prefetched shortly before the period starts, so that at the
// boundary every periodic tag serves from memory (the target: 10,000 tags within 1 s); the
// range it leases belongs to that row only, and is served only once its period has begun.
func (g *Generator) Prefetch(ctx context.Context, tag string) error {
	b, err := g.buffer(tag)
	if err != nil {
		return err
	}
	b.mu.Lock()
	if b.next != nil || b.cur.Load() != nil || b.dead {
		b.mu.Unlock()
		return nil
	}
	if !b.loading {
		g.startLoadLocked(b)
		b.mu.Unlock()
		g.submit(b)
		b.mu.Lock()
	}
	done := b.done
	b.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == nil && b.cur.Load() == nil {
		if b.lastErr != nil {
			return b.lastErr
		}
		return errors.New("segment: prefetch: no segment loaded")
	}
	return nil
}
