package segment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// buffer returns the live buffer of tag, creating it if needed.
func (g *Generator) buffer(tag string) (*buffer, error) {
	if b := g.tags.load(tag); b != nil {
		return b, nil
	}
	return g.lookupSlow(tag)
}

// lookupSlow handles a tag that is not held: validate, consult the negative cache, then
// create its buffer (loaded by the caller's slow path). Nothing is created when it fails.
func (g *Generator) lookupSlow(tag string) (*buffer, error) {
	if err := ValidateTag(tag); err != nil {
		return nil, err
	}
	if err := g.negative(tag); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addLocked(tag)
}

// addLocked creates the buffer of tag unless one is held (g.mu held). O(1).
func (g *Generator) addLocked(tag string) (*buffer, error) {
	if b := g.tags.load(tag); b != nil {
		return b, nil
	}
	if g.ntags.Load() >= int64(g.cfg.MaxTags) {
		return nil, g.tagsFull(tag)
	}
	b := newBuffer(tag)
	b.firstPending = true
	g.firstLoads.Add(1)
	b.gen = g.gen
	b.guard = g.acquireGuard(b.tag)
	b.guardRef = true
	g.tags.store(b)
	g.ntags.Add(1)
	return b, nil
}

// tagsFull is the refusal of a new tag when MaxTags tags are held. While some of them are
// still loading their first segment it is ErrUnavailable, not ErrLimit: a first load that
// fails (a store outage) drops its tag, so the limit may free itself and a retry succeed.
func (g *Generator) tagsFull(tag string) error {
	if n := g.firstLoads.Load(); n > 0 {
		te := tagError(tag, ErrUnavailable, fmt.Sprintf(
			"too many tags held by this instance (max %d), %d of them still loading their first segment; retry", g.cfg.MaxTags, n))
		te.Waited = fmt.Sprintf("did not wait: too many tags held, %d still loading their first segment", n)
		return te
	}
	return tagError(tag, ErrLimit, fmt.Sprintf("too many tags held by this instance (max %d)", g.cfg.MaxTags))
}

// Tags returns the held tags, sorted (IDS.TAGS).
func (g *Generator) Tags() []string {
	out := make([]string, 0, g.ntags.Load())
	g.tags.each(func(b *buffer) bool {
		out = append(out, b.tag)
		return true
	})
	slices.Sort(out)
	return out
}

// Create inserts tag t into the store (IDS.CREATE). A zero Step means Config.DefaultStep; a
// zero MaxID means 1, or this instance's mark of the tag when it issued IDs of it before (a
// tag retired or deleted and created again continues above them). A START below that mark is
// refused with ErrLimit. ErrTagExists when it exists, ErrInvalidTag for a bad name, ErrLimit
// when this instance holds Config.MaxTags tags.
func (g *Generator) Create(ctx context.Context, t Tag) error {
	if err := ValidateTag(t.Name); err != nil {
		return err
	}
	t.Name = strings.Clone(t.Name)
	if t.Step == 0 {
		t.Step = g.cfg.DefaultStep
	}
	if t.Step < 0 || t.MaxID < 0 || t.MaxID >= maxRangeEnd {
		return &TagError{Tag: t.Name, Err: ErrLimit, Detail: fmt.Sprintf("step %d, start %d: must be positive", t.Step, t.MaxID)}
	}
	if held := g.tags.load(t.Name) != nil; !held && g.ntags.Load() >= int64(g.cfg.MaxTags) {
		return g.tagsFull(t.Name)
	}
	// Under the tag's guard, like a load: a load of the tag running now (its row deleted
	// meanwhile) has raised the mark before Create reads it, so the new row starts above the
	// range that load leased.
	gd := g.acquireGuard(t.Name)
	defer g.releaseGuard(t.Name, gd)
	gd.mu.Lock()
	defer gd.mu.Unlock()
	mark, err := g.marks.Mark(t.Name)
	g.marksAnswered(err)
	if err != nil {
		return fmt.Errorf("segment: create tag %q: read mark: %w", t.Name, err)
	}
	mark = max(mark, gd.mark)
	switch {
	case t.MaxID == 0:
		t.MaxID = max(1, mark)
	case t.MaxID < mark:
		return &TagError{Tag: t.Name, Err: ErrLimit, Detail: fmt.Sprintf(
			"start %d is below %d: this instance already issued IDs of this tag up to there", t.MaxID, mark)}
	}
	if err := g.store.Create(ctx, t); err != nil {
		if errors.Is(err, ErrTagExists) {
			return &TagError{Tag: t.Name, Err: ErrTagExists, Detail: "tag already exists"}
		}
		if errors.Is(err, ErrShaped) {
			return &TagError{Tag: t.Name, Err: ErrShaped, Detail: "the tag has an ID shape"}
		}
		return fmt.Errorf("segment: create tag %q: %w", t.Name, err)
	}
	g.unforget(t.Name)
	g.log.Info("segment: tag created", zap.String("tag", t.Name), zap.Int64("start", t.MaxID), zap.Int64("step", t.Step))
	return nil
}

// Retire stops serving tag from this instance: its buffer is dropped (the rest of its
// segments is a gap). Its durable mark stays, so a later re-creation of the tag, here or by
// auto-create, can never reissue its IDs (Create starts above the mark; a lower range is
// refused as a regression). It reports whether the tag was held.
func (g *Generator) Retire(tag string) bool {
	b := g.tags.load(tag)
	if b == nil {
		return false
	}
	g.drop(b)
	g.log.Info("segment: tag retired", zap.String("tag", tag))
	return true
}

// DefaultStep is the step of a tag created without one (Config.DefaultStep).
func (g *Generator) DefaultStep() int64 { return g.cfg.DefaultStep }
