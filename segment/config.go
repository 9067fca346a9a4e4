package segment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/limits"
)

// Config tunes a Generator. A zero field means the default given in its comment (see
// DefaultConfig); negative values are invalid.
type Config struct {
	// PreloadRatio: the next segment is loaded in the background once more than this fraction
	// of the current one has been consumed. Default 0.1 (Leaf's 10%). Must be in (0, 1).
	PreloadRatio float64
	// WaitTimeout bounds how long a request waits for a running load when no segment is
	// ready; then it fails with ErrUnavailable. Default 500ms. The waiters of a tag's first
	// load in this Generator (nothing could be preloaded before it: a new tag's creation, the
	// first lease after a restart) wait up to WaitTimeout + LoadTimeout for it, and those of a
	// later load at least twice the fastest of the tag's recent loads, within the same bound.
	WaitTimeout time.Duration
	// MaxLoaders is the number of concurrent loads across all tags (loader goroutines).
	// Default 8.
	MaxLoaders int
	// FirstLoaders is how many first loads (a tag's first segment: a new tag, the first
	// lease after a restart) may run at once when the store commits concurrent writes
	// together (the embedded store and MySQL: group commit), so that a burst of new tags
	// shares commits instead of queuing for one fsync each. They run on loaders of their own
	// beside the MaxLoaders (which keep taking refills first). With any other store, first
	// loads run on half of the MaxLoaders. Default 32.
	FirstLoaders int
	// MaxPending is how many loads may queue for a free loader; a load submitted beyond that
	// is rejected (the tag stays retryable). Default 1024.
	MaxPending int
	// LoadTimeout is the context timeout of one load (Marks + Allocate [+ Create]). Default 3s.
	LoadTimeout time.Duration
	// RetryBackoff: after a failed or rejected load of a tag, no new load of that tag starts
	// before this much time has passed (requests fail fast meanwhile). Default 100ms.
	RetryBackoff time.Duration
	// SegmentDuration is the target lifetime of one segment for the dynamic step. Default 15m.
	SegmentDuration time.Duration
	// MaxStep caps the doubling of the dynamic step. Default 1,000,000.
	MaxStep int64
	// AutoCreate creates an unknown tag on first use (Tag{MaxID: 1, Step: DefaultStep}).
	AutoCreate bool
	// DefaultStep is the step of tags created by AutoCreate or by Create without a step.
	// Default 1000.
	DefaultStep int64
	// RefreshInterval is the period of the tag list refresh from the store. Default 60s.
	RefreshInterval time.Duration
	// NegativeTTL is how long a tag the store does not know is remembered as unknown (so junk
	// tags do not hit the store on every request, and a hand-inserted row is served soon).
	// Default 1s.
	NegativeTTL time.Duration
	// MaxNegative bounds the number of remembered unknown tags. Default 10,000.
	MaxNegative int
	// MaxTags bounds the number of tags held (buffers created on first use or by the warm
	// start); beyond it a new tag fails with ErrLimit, and so does Create. Default 100,000.
	MaxTags int
	// WarmTags bounds the warm start: at New, the first segment of at most this many tags is
	// loaded, those this instance raised a mark for most recently (the tags it served before a
	// restart) that the store still lists, one load at a time. Default 1,000.
	WarmTags int
	// NoWarmStart disables the warm start.
	NoWarmStart bool
	// MaxBatch is the largest count of AppendIDs. Default limits.MaxBatch (1000).
	MaxBatch int
	// RemainderFile is where SaveRemainder writes the unissued rest of every held tag on a
	// graceful shutdown and New resumes it from (typically <data-dir>/remainder.json). Empty:
	// no remainder file (held ranges are a gap at each restart).
	RemainderFile string
	// Admit, when set, is asked after a tag's first range in this Generator was leased and
	// before it is served (ORDERED tags: is this instance the tag's leader now?). An error
	// fails the load (the range is a gap) and reaches the requests wrapped in ErrNotAdmitted;
	// the tag is not remembered as refused. The tag's guard is held: it may do I/O, briefly.
	Admit func(ctx context.Context, tag string) error
	// Ordered, when set, lists the ORDERED tags (a graceful-restart remainder of one is
	// discarded: such a tag is served only by its leader's new term, from a fresh range). An
	// error keeps the remainder file for the next start, none of it served.
	Ordered func(ctx context.Context) ([]string, error)
	// Clock gives the time (the dynamic step, the negative cache, retry backoff) and the waits
	// (a request's WaitTimeout, the refresh period). Default clock.Real; tests use clock.Fake.
	Clock clock.Clock
}

// DefaultConfig returns the defaults (AutoCreate off).
func DefaultConfig() Config {
	return Config{
		PreloadRatio:    0.1,
		WaitTimeout:     500 * time.Millisecond,
		MaxLoaders:      8,
		FirstLoaders:    32,
		MaxPending:      1024,
		LoadTimeout:     3 * time.Second,
		RetryBackoff:    100 * time.Millisecond,
		SegmentDuration: 15 * time.Minute,
		MaxStep:         1_000_000,
		DefaultStep:     1000,
		RefreshInterval: 60 * time.Second,
		NegativeTTL:     time.Second,
		MaxNegative:     10_000,
		MaxTags:         100_000,
		WarmTags:        1000,
		MaxBatch:        limits.MaxBatch,
		Clock:           clock.Real{},
	}
}

// Validate reports every invalid field, joined into one error. Zero fields are valid (they
// mean the default).
func (c Config) Validate() error {
	var errs []error
	if c.PreloadRatio < 0 || c.PreloadRatio >= 1 {
		errs = append(errs, fmt.Errorf("PreloadRatio %v: must be in (0, 1), or 0 for the default", c.PreloadRatio))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"WaitTimeout", c.WaitTimeout}, {"LoadTimeout", c.LoadTimeout},
		{"RetryBackoff", c.RetryBackoff}, {"SegmentDuration", c.SegmentDuration},
		{"RefreshInterval", c.RefreshInterval}, {"NegativeTTL", c.NegativeTTL},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", d.name, d.v))
		}
	}
	for _, n := range []struct {
		name string
		v    int64
	}{
		{"MaxLoaders", int64(c.MaxLoaders)}, {"MaxPending", int64(c.MaxPending)}, {"FirstLoaders", int64(c.FirstLoaders)},
		{"MaxStep", c.MaxStep}, {"DefaultStep", c.DefaultStep},
		{"MaxNegative", int64(c.MaxNegative)}, {"MaxTags", int64(c.MaxTags)},
		{"MaxBatch", int64(c.MaxBatch)}, {"WarmTags", int64(c.WarmTags)},
	} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must not be negative", n.name, n.v))
		}
	}
	if c.MaxStep > maxRangeEnd/4 {
		errs = append(errs, fmt.Errorf("MaxStep %d: too large", c.MaxStep))
	}
	if len(errs) > 0 {
		return fmt.Errorf("segment: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// withDefaults returns c with zero fields replaced by their defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.PreloadRatio == 0 {
		c.PreloadRatio = d.PreloadRatio
	}
	if c.WaitTimeout == 0 {
		c.WaitTimeout = d.WaitTimeout
	}
	if c.MaxLoaders == 0 {
		c.MaxLoaders = d.MaxLoaders
	}
	if c.MaxPending == 0 {
		c.MaxPending = d.MaxPending
	}
	if c.FirstLoaders == 0 {
		c.FirstLoaders = d.FirstLoaders
	}
	if c.LoadTimeout == 0 {
		c.LoadTimeout = d.LoadTimeout
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = d.RetryBackoff
	}
	if c.SegmentDuration == 0 {
		c.SegmentDuration = d.SegmentDuration
	}
	if c.MaxStep == 0 {
		c.MaxStep = d.MaxStep
	}
	if c.DefaultStep == 0 {
		c.DefaultStep = d.DefaultStep
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = d.RefreshInterval
	}
	if c.NegativeTTL == 0 {
		c.NegativeTTL = d.NegativeTTL
	}
	if c.MaxNegative == 0 {
		c.MaxNegative = d.MaxNegative
	}
	if c.MaxTags == 0 {
		c.MaxTags = d.MaxTags
	}
	if c.WarmTags == 0 {
		c.WarmTags = d.WarmTags
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	return c
}
