// Package ids routes a request for IDs of a tag to what serves that kind of tag. It decides
// once per request what kind of tag it is:
//
//   - plain: the segment generator, directly;
//   - shaped (docs/SHAPES.md: FORMAT, RESET, OPAQUE): the counter of the current period's
//     row tag@period, rendered by its compiled shape (shape.go);
//   - ordered (docs/SEGMENT.md, "Ordered tags"): taken here while this instance leads the
//     tag, else a Forward naming the leader, else TRYAGAIN (ordered.go).
//
// The decision is resolve: two atomic loads while no shaped or ordered tag is known, a map
// look-up per kind in use otherwise, never an allocation. A plain request whose tag the
// segment core does not hold may turn out to be of another kind (a shape in the store this
// instance has not seen, a tag found ordered at its first load): miss decides again, once.
// The RESP commands (package handlers) and Leaf's HTTP API both call the Router; they write
// the replies, the Router knows neither protocol.
package ids

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/shape"
)

// Segments is what the router needs from the segment core.
type Segments interface {
	Next(tag string) (int64, error)
	NextN(tag string, n int64) (int64, error)
	AppendIDs(dst []int64, tag string, n int) ([]int64, error)
	// Serves reports whether n values of tag are in memory now (no wait for a load).
	Serves(tag string, n int64) bool
	Info(tag string) (segment.Info, error)
	Tags() []string
	Create(ctx context.Context, t segment.Tag) error
	Retire(tag string) bool
}

// Config configures the router. A zero field takes its default from DefaultConfig.
type Config struct {
	// Shapes stores the ID shapes of shaped tags (nil: IDS.CREATE FORMAT/RESET/OPAQUE is
	// refused); IDKey is the AES key of opaque tags (nil: none).
	Shapes segment.Shapes
	IDKey  []byte
	// Ordered serves the ORDERED tags (nil: none) and Forward carries requests to a leader.
	Ordered *ordered.Manager
	Forward *ordered.Forwarder
	// CreateTimeout bounds each store call of a shape or a tag creation (default 5s).
	CreateTimeout time.Duration
	// PeriodNow picks a shaped tag's period (default Now). PeriodLead: within this time
	// before a period's end the next period's row is prepared in the background (default
	// 30s; negative: off).
	PeriodNow  func() time.Time
	PeriodLead time.Duration
	// Now is the clock (default time.Now); Sleep waits (default time.Sleep).
	Now   func() time.Time
	Sleep func(time.Duration)
}

// DefaultConfig returns the router's defaults.
func DefaultConfig() Config {
	return Config{CreateTimeout: 5 * time.Second, PeriodLead: 30 * time.Second, Now: time.Now, Sleep: time.Sleep}
}

// Validate reports an invalid field. Zero fields are valid (they mean the default).
func (c Config) Validate() error {
	if c.CreateTimeout < 0 {
		return errors.New("ids: CreateTimeout must not be negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.CreateTimeout <= 0 {
		c.CreateTimeout = d.CreateTimeout
	}
	if c.PeriodLead == 0 {
		c.PeriodLead = d.PeriodLead
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	if c.Sleep == nil {
		c.Sleep = d.Sleep
	}
	if c.PeriodNow == nil {
		c.PeriodNow = c.Now
	}
	return c
}

// Router routes ID requests by tag kind. Safe for concurrent use.
type Router struct {
	cfg    Config
	seg    Segments
	log    *zap.Logger
	now    func() time.Time
	shapes shapeRegistry      // the compiled ID shapes this instance has seen (shape.go)
	ord    *ordered.Manager   // nil: no ordered tags (ordered.go)
	fwd    *ordered.Forwarder // nil with a local ord
}

// New returns a router over seg. It first adopts the counter rows the segment core resumed
// from a graceful stop (shape_rows.go), before any request.
func New(cfg Config, seg Segments, log *zap.Logger) *Router {
	cfg = cfg.withDefaults()
	r := &Router{cfg: cfg, seg: seg, log: log, now: cfg.Now, ord: cfg.Ordered, fwd: cfg.Forward}
	r.shapes.preCtx, r.shapes.preStop = context.WithCancel(context.Background())
	r.adoptResumed()
	return r
}

// Close ends the router's background work (the preparation of shaped tags' next periods)
// and waits for it, so that nothing of the router uses the segment core or the stores after
// it returns. Requests still work; they no longer prepare a period ahead. Idempotent.
func (r *Router) Close() error {
	r.shapes.closePrefetch()
	return nil
}

// Refusal is an error whose text is the reply: a stable code, a space, the message.
type Refusal string

func (e Refusal) Error() string { return string(e) }

// kind is what a tag is, as far as this instance knows.
type kind uint8

const (
	plain kind = iota
	shaped
	orderedKind
)

// route is the decision for one request's tag.
type route struct {
	kind  kind
	shape *shapeEntry
	ord   *ordered.Tag
}

// resolve decides the kind of tag: the one place that does.
func (r *Router) resolve(tag string) route {
	if t := r.orderedTag(tag); t != nil {
		return route{kind: orderedKind, ord: t}
	}
	if e := r.shapes.get(tag); e != nil {
		return route{kind: shaped, shape: e}
	}
	return route{}
}

// miss decides again after a plain take of tag failed with err: the segment core found the
// tag ordered at its first load (ErrNotAdmitted: the manager knows it now), or the store has
// a shape this instance had not seen. A plain route means err (or the shape's own refusal,
// NOKEY for instance) is the answer.
func (r *Router) miss(tag string, err error) (route, error) {
	if errors.Is(err, segment.ErrNotAdmitted) {
		if t := r.orderedTag(tag); t != nil {
			return route{kind: orderedKind, ord: t}, nil
		}
		return route{}, err
	}
	e, err := r.shapeOnMiss(tag, err)
	if e == nil {
		return route{}, err
	}
	return route{kind: shaped, shape: e}, nil
}

// Incr is INCR tag: the next ID (a shaped tag: its integer form), or where to forward it.
func (r *Router) Incr(tag string) (int64, Forward, error) {
	rt := r.resolve(tag)
	if rt.kind == plain {
		if err := r.counterRow(tag, 1); err != nil {
			return 0, Forward{}, err
		}
		id, err := r.seg.Next(tag)
		if err == nil {
			return id, Forward{}, nil
		}
		if rt, err = r.miss(tag, err); rt.kind == plain {
			return 0, Forward{}, err
		}
	}
	if rt.kind == shaped {
		id, err := r.shapedInt(rt.shape)
		return id, Forward{}, err
	}
	id, fw, err := r.orderedIncr(rt.ord)
	if err != nil || fw.Tag != nil {
		return 0, fw, err
	}
	return id, fw, nil
}

// IncrBy is INCRBY tag n (n ≥ 1): the highest of n contiguous IDs, or where to forward it.
// A plain tag's ID comes back as a value, not in a slice: a slice handed to the segment core
// (an interface) would escape and allocate on every call.
func (r *Router) IncrBy(tag string, n int64) (int64, Forward, error) {
	rt := r.resolve(tag)
	if rt.kind == plain {
		if err := r.counterRow(tag, n); err != nil {
			return 0, Forward{}, err
		}
		id, err := r.seg.NextN(tag, n)
		if err == nil {
			return id, Forward{}, nil
		}
		if rt, _ = r.miss(tag, err); rt.kind == plain {
			return 0, Forward{}, err
		}
	}
	if rt.kind == shaped {
		return 0, Forward{}, errShaped(tag)
	}
	ids, fw, err := r.orderedTake(nil, rt.ord, ordIncrBy, n)
	if err != nil || fw.Tag != nil {
		return 0, fw, err
	}
	return ids[0], fw, nil
}

// Segment is IDS.SEGMENT tag n: n IDs appended to dst, or where to forward it. A shaped tag
// refuses it (SHAPED).
func (r *Router) Segment(dst []int64, tag string, n int) ([]int64, Forward, error) {
	rt := r.resolve(tag)
	if rt.kind == plain {
		if err := r.counterRow(tag, int64(n)); err != nil {
			return dst, Forward{}, err
		}
		ids, err := r.seg.AppendIDs(dst, tag, n)
		if err == nil {
			return ids, Forward{}, nil
		}
		if rt, _ = r.miss(tag, err); rt.kind == plain {
			return ids, Forward{}, err
		}
	}
	if rt.kind == shaped {
		return dst, Forward{}, errShaped(tag)
	}
	return r.orderedTake(dst, rt.ord, ordIDs, int64(n))
}

// Batch is the IDs of one IDS.NEXT, with what renders them.
type Batch struct {
	IDs    []int64
	shape  *shapeEntry   // nil: plain digits
	period *shape.Period // the shaped tag's period the IDs came from
}

// Append renders id: a shaped tag's formatted ID, else its decimal digits.
func (b *Batch) Append(dst []byte, id int64) ([]byte, error) {
	if b.shape == nil {
		return strconv.AppendInt(dst, id, 10), nil
	}
	return b.shape.s.Append(dst, b.period, id)
}

// Next is IDS.NEXT tag n: n IDs appended to dst, rendered by Batch.Append; or where to
// forward it.
func (r *Router) Next(dst []int64, tag string, n int) (Batch, Forward, error) {
	rt := r.resolve(tag)
	if rt.kind == plain {
		if err := r.counterRow(tag, int64(n)); err != nil {
			return Batch{IDs: dst}, Forward{}, err
		}
		ids, err := r.seg.AppendIDs(dst, tag, n)
		if err == nil {
			return Batch{IDs: ids}, Forward{}, nil
		}
		if rt, err = r.miss(tag, err); rt.kind == plain {
			return Batch{IDs: ids}, Forward{}, err
		}
	}
	if rt.kind == shaped {
		b, err := r.shapedIDs(dst, rt.shape, n)
		return b, Forward{}, err
	}
	ids, fw, err := r.orderedTake(dst, rt.ord, ordIDs, int64(n))
	return Batch{IDs: ids}, fw, err
}

// AppendNext is Leaf's /api/segment/get/{key}: the next ID's text appended to dst (a shaped
// tag's formatted ID, as Leaf's users of formatted serials expect); an ordered tag led
// elsewhere is forwarded here, one request at a time.
func (r *Router) AppendNext(dst []byte, tag string) ([]byte, error) {
	rt := r.resolve(tag)
	if rt.kind == plain {
		if err := r.counterRow(tag, 1); err != nil {
			return dst, err
		}
		id, err := r.seg.Next(tag)
		if err == nil {
			return strconv.AppendInt(dst, id, 10), nil
		}
		if rt, err = r.miss(tag, err); rt.kind == plain {
			return dst, err
		}
	}
	if rt.kind == shaped {
		return r.formatted(dst, rt.shape)
	}
	id, err := r.orderedNext(rt.ord)
	if err != nil {
		return dst, err
	}
	return strconv.AppendInt(dst, id, 10), nil
}

// WaitRow returns the segment row a request of tag takes its values from, for a caller that
// asks whether the request would wait (the event loop's may-wait flags): wait is set when it
// waits whatever that row holds: an ordered tag led elsewhere (forwarded), a shaped tag whose
// current period's row this instance has not created or found yet (a store call).
func (r *Router) WaitRow(tag string) (row string, wait bool) {
	switch rt := r.resolve(tag); rt.kind {
	case orderedKind:
		_, ok := rt.ord.Held()
		return tag, !ok
	case shaped:
		return r.shapedWaitRow(rt.shape)
	}
	return tag, false
}

// Known reports whether tag's kind is known without a store read: a tag known as shaped
// or ordered, or one the segment core holds (IDS.INFO and IDS.PARSE of any other tag read
// the shape store).
func (r *Router) Known(tag string) bool {
	return r.resolve(tag).kind != plain || r.cfg.Shapes == nil || r.seg.Serves(tag, 1)
}

// KnowsShape reports whether tag is a shaped tag whose shape this instance has read.
func (r *Router) KnowsShape(tag string) bool { return r.shapes.get(tag) != nil }

// Ordered returns the ordered tag named tag, nil for any other tag.
func (r *Router) Ordered(tag string) *ordered.Tag { return r.orderedTag(tag) }

// Create is IDS.CREATE: an ordered, a shaped or a plain tag by its options.
func (r *Router) Create(t segment.Tag, sp shape.Spec) error {
	// A counter row of a shaped tag (tag@period) is created by its shaped tag only: made by
	// hand, a future period could start at a START or STEP the client chose
	// (TestCounterRowRefused).
	if err := r.counterRow(t.Name, 1); err != nil {
		return err
	}
	if t.Ordered {
		return r.createOrdered(t, sp)
	}
	if sp.Format != "" || sp.Reset != "" || sp.TZ != "" || sp.Opaque {
		sp.Start, sp.Step, sp.Desc = t.MaxID, t.Step, t.Description
		return r.createShaped(t.Name, sp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.CreateTimeout)
	defer cancel()
	return r.seg.Create(ctx, t)
}

// Info is IDS.INFO's view of a tag.
type Info struct {
	// Held: Seg is the tag's buffer (a shaped tag: its current period's row's).
	Held bool
	Seg  segment.Info
	// Shape is set for a shaped tag, Ordered for an ordered one.
	Shape   *ShapeInfo
	Ordered *ordered.Tag
}

// ShapeInfo is a shaped tag's part of IDS.INFO.
type ShapeInfo struct {
	Tag      string
	Spec     shape.Spec
	Capacity int64
	Period   string // the current period's key
	Row      string // its counter row
}

// Info is IDS.INFO tag. A tag neither held nor shaped nor ordered is the segment core's
// error (NOTAG, or why its first load failed). It may read the shape store (Known).
func (r *Router) Info(tag string) (Info, error) {
	rt := r.resolve(tag)
	if rt.kind == plain && !r.seg.Serves(tag, 1) { // not a held plain tag: perhaps a shape not seen yet
		e, err := r.learnShape(tag)
		if err != nil {
			return Info{}, err
		}
		if e != nil {
			rt = route{kind: shaped, shape: e}
		}
	}
	var in Info
	row := tag
	if e := rt.shape; e != nil {
		per := e.s.PeriodAt(r.cfg.PeriodNow())
		row = per.Row
		in.Shape = &ShapeInfo{Tag: e.s.Tag(), Spec: e.s.Spec(), Capacity: e.s.Capacity(), Period: per.Key, Row: per.Row}
	}
	in.Ordered = rt.ord
	seg, err := r.seg.Info(row)
	if err != nil && rt.kind == plain {
		return Info{}, err
	}
	in.Held, in.Seg = err == nil, seg
	return in, nil
}
