package segment

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/leafd/leafd/internal/storeerr"
)

// refresh drops the held buffers of tags the store no longer lists (buffers created on first
// use while the list was being read are kept) and returns the listed tags. It creates no
// buffer: a tag is held only once it is requested or warmed.
func (g *Generator) refresh(ctx context.Context) (map[string]struct{}, error) {
	g.mu.Lock()
	g.gen++
	gen := g.gen
	g.mu.Unlock()
	names, err := g.store.Tags(ctx)
	g.storeAnswered(err)
	if err != nil {
		return nil, fmt.Errorf("segment: list tags: %w", err)
	}
	want := make(map[string]struct{}, len(names))
	// MySQL's default collations compare biz_tag case-insensitively: the store serves "Foo"
	// from row "foo" but lists "foo". Keep such buffers (tags are ASCII); a buffer whose row
	// is really gone is dropped by its next load (ErrUnknownTag).
	folded := make(map[string]struct{}, len(names))
	for _, n := range names {
		if err := ValidateTag(n); err != nil {
			g.log.Warn("segment: store has a tag that cannot be served", zap.Error(err))
			continue
		}
		want[n] = struct{}{}
		folded[strings.ToLower(n)] = struct{}{}
	}
	var dropped []*buffer
	g.tags.each(func(b *buffer) bool {
		if _, ok := folded[strings.ToLower(b.tag)]; !ok {
			g.mu.Lock()
			old := b.gen < gen
			g.mu.Unlock()
			if old {
				dropped = append(dropped, b)
			}
		}
		return true
	})
	for _, b := range dropped {
		g.drop(b)
		g.log.Info("segment: tag no longer in the store; dropped", zap.String("tag", b.tag))
	}
	return want, nil
}

// msgRefreshFailed is the kind (quietlog) of a failed tag refresh, retried every second
// while the store fails.
const msgRefreshFailed = "segment: tag refresh failed"

func (g *Generator) refresher(ctx context.Context) {
	defer g.wg.Done()
	for {
		d := g.cfg.RefreshInterval
		if g.storeErr.Load() != nil {
			d = min(d, storeProbe)
		}
		select {
		case <-ctx.Done():
			return
		case <-g.cfg.Clock.After(d):
		}
		rctx, cancel := context.WithTimeout(ctx, g.cfg.LoadTimeout)
		listed, err := g.refresh(rctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			g.quiet.Fail(zapcore.WarnLevel, msgRefreshFailed, err, zap.String("cause", storeerr.Classify(err).String()))
		}
		if err == nil {
			g.quiet.OK(msgRefreshFailed, "segment: tag refresh works again")
			g.startWarm(ctx, listed) // a start during a store outage warms now
		}
	}
}

// warmList returns the tags to warm: those this instance raised a mark for most recently that
// the store still lists, at most Config.WarmTags and what Config.MaxTags leaves.
func (g *Generator) warmList(listed map[string]struct{}) []string {
	recent, err := g.marks.RecentTags(g.cfg.WarmTags)
	if errors.Is(err, ErrNotSupported) {
		return nil
	}
	if err != nil {
		g.log.Warn("segment: warm start: cannot list marks", zap.Error(err))
		return nil
	}
	out := recent[:0]
	for _, t := range recent {
		if _, ok := listed[t]; ok {
			out = append(out, t)
		}
	}
	return out
}

// startWarm starts the warm start once, from the first tag list that succeeded (at New, or
// later when the store was unreachable at start); a later call does nothing.
func (g *Generator) startWarm(ctx context.Context, listed map[string]struct{}) {
	if !g.warmStarted.CompareAndSwap(false, true) {
		return
	}
	var warm []string
	if !g.cfg.NoWarmStart {
		warm = g.warmList(listed)
	}
	if len(warm) == 0 {
		close(g.warmDone)
		return
	}
	g.wg.Add(1)
	go g.warm(ctx, warm)
}

// warm loads the first segment of each tag, one load at a time (so that a restart does not
// flood the store), and closes warmDone when done or cancelled.
func (g *Generator) warm(ctx context.Context, tags []string) {
	defer g.wg.Done()
	defer close(g.warmDone)
	g.log.Info("segment: warm start", zap.Int("tags", len(tags)))
	for _, t := range tags {
		if ctx.Err() != nil {
			return
		}
		if g.counterRow(ctx, t) {
			continue
		}
		b, err := g.buffer(t)
		if err != nil {
			if errors.Is(err, ErrLimit) {
				return
			}
			continue
		}
		b.mu.Lock()
		if b.loading || b.next != nil || b.cur.Load() != nil || b.dead || b.lastErr != nil {
			b.mu.Unlock()
			continue
		}
		g.startLoadLocked(b)
		done := b.done
		b.mu.Unlock()
		g.submit(b)
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
		b.mu.Lock()
		ok := b.next != nil || b.cur.Load() != nil
		b.mu.Unlock()
		if ok {
			g.stats.warmLoads.Add(1)
		}
	}
}

// counterRow reports whether tag is a counter row tag@period of a shaped tag (see Shapes).
// The warm start skips those: which period is current is the shaped tag's to say, and a
// past period's row would be leased again and held for nothing at every restart; the
// current one loads with its tag's first request (or was resumed from the remainder file).
func (g *Generator) counterRow(ctx context.Context, tag string) bool {
	i := strings.IndexByte(tag, '@')
	if i <= 0 {
		return false
	}
	_, err := g.store.LoadShape(ctx, tag[:i])
	if errors.Is(err, ErrNotSupported) {
		return false
	}
	return err == nil || !errors.Is(err, ErrUnknownTag) // unknown: not warmed either
}
