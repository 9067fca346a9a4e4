package segment

import (
	"context"
	"errors"
	"slices"
)

// CanLoad reports whether a load of tag, held or not, could lease a range now, without
// loading anything (/readyz?tag= of a tag this instance does not hold): nil when the store
// has the tag (and, with the MySQL fence, it is adopted) or auto-create would create it;
// otherwise ErrUnknownTag, ErrNotAdopted, ErrInvalidTag or the store's error. One store read,
// within LoadTimeout.
func (g *Generator) CanLoad(ctx context.Context, tag string) error {
	if err := ValidateTag(tag); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.LoadTimeout)
	defer cancel()
	err := g.store.CheckTag(ctx, tag)
	if errors.Is(err, ErrNotSupported) {
		_, err = g.store.MaxID(ctx, tag)
	}
	if errors.Is(err, ErrNotSupported) {
		var tags []string
		if tags, err = g.store.Tags(ctx); err == nil && !slices.Contains(tags, tag) {
			err = tagError(tag, ErrUnknownTag, "no such tag in the store")
		}
	}
	g.storeAnswered(err)
	if errors.Is(err, ErrUnknownTag) && g.cfg.AutoCreate {
		return nil // created on first use
	}
	return err
}
