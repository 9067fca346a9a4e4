package ids

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/shape"
	"go.uber.org/zap"
)

// ID shapes (docs/SHAPES.md): a shaped tag's spec lives in the store (segment.Shapes) and is
// compiled here; its counters are the segment rows tag@period, served by the segment core
// like any tag. This file holds the registry of compiled shapes and the commands IDS.NEXT and
// IDS.PARSE, and the shaped paths of INCR, IDS.CREATE and IDS.INFO.

// shapeEntry is one compiled shape and what this instance did with its periods.
type shapeEntry struct {
	s      *shape.Shape
	ready  atomic.Pointer[shape.Period] // the latest period whose row this instance created or found
	ahead  atomic.Pointer[shape.Period] // the period whose successor's row was prefetched
	ready2 atomic.Pointer[string]       // the row prefetchNext created or found and loaded
	mu     sync.Mutex                   // serializes row creation and retirement of the tag
	// resumed: rows of the tag the segment core resumed from the remainder file at start,
	// retired at the tag's first period here unless they are its current or a later one.
	resumed []string
}

// shapeRegistry maps shaped tags to their compiled shapes. Readers look up without a lock
// (a copy-on-write map); shapes are never changed once created, so an entry never goes stale.
type shapeRegistry struct {
	m   atomic.Pointer[map[string]*shapeEntry]
	mu  sync.Mutex
	neg map[string]time.Time // tags the store has no shape for, until
	// The background creations of next periods' rows (prefetchNext): queued, run by at most
	// prefetchWorkers goroutines that exist only while the queue is not empty. Close cancels
	// preCtx, which bounds every job, and waits for the workers (preWG).
	prefetching atomic.Int64 // queued or running
	preMu       sync.Mutex
	preQueue    []prefetchJob
	preWorkers  int
	preClosed   bool
	preCtx      context.Context
	preStop     context.CancelFunc
	preWG       sync.WaitGroup
	count       atomic.Int64
}

const (
	shapeNegTTL = time.Second
	shapeNegMax = 10000
)

func (r *shapeRegistry) get(tag string) *shapeEntry {
	if r.count.Load() == 0 {
		return nil
	}
	return (*r.m.Load())[tag]
}

func (r *shapeRegistry) add(s *shape.Shape) *shapeEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.m.Load()
	if old != nil {
		if e := (*old)[s.Tag()]; e != nil {
			return e
		}
	}
	m := make(map[string]*shapeEntry, r.count.Load()+1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	e := &shapeEntry{s: s}
	m[s.Tag()] = e
	r.m.Store(&m)
	r.count.Add(1)
	delete(r.neg, s.Tag())
	return e
}

// shapeOf returns tag's shape when this instance knows it.
func (r *Router) shapeOf(tag string) *shapeEntry { return r.shapes.get(tag) }

// learnShape reads tag's shape from the store (nil, nil when it has none; remembered for a
// second so unknown tags do not hit the store on every request).
func (r *Router) learnShape(tag string) (*shapeEntry, error) {
	if e := r.shapes.get(tag); e != nil {
		return e, nil
	}
	if r.cfg.Shapes == nil {
		return nil, nil
	}
	now := r.now()
	r.shapes.mu.Lock()
	until, neg := r.shapes.neg[tag]
	r.shapes.mu.Unlock()
	if neg && now.Before(until) {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.CreateTimeout)
	defer cancel()
	raw, err := r.cfg.Shapes.LoadShape(ctx, tag)
	if errors.Is(err, segment.ErrUnknownTag) {
		r.shapes.mu.Lock()
		if r.shapes.neg == nil || len(r.shapes.neg) >= shapeNegMax {
			r.shapes.neg = make(map[string]time.Time)
		}
		r.shapes.neg[strings.Clone(tag)] = now.Add(shapeNegTTL)
		r.shapes.mu.Unlock()
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	spec, err := shape.DecodeSpec(raw)
	if err != nil {
		return nil, err
	}
	s, err := shape.Compile(strings.Clone(tag), spec, r.cfg.IDKey)
	if err != nil {
		return nil, err
	}
	return r.shapes.add(s), nil
}

// shapeOnMiss: a plain request of tag failed with err; if tag is shaped (this instance had
// not seen it yet) its entry is returned so the request takes the shaped path. The error to
// reply with otherwise: err, or why the shape cannot be used (NOKEY: not this server's key).
func (r *Router) shapeOnMiss(tag string, err error) (*shapeEntry, error) {
	if !errors.Is(err, segment.ErrUnknownTag) && !errors.Is(err, segment.ErrShaped) {
		return nil, err
	}
	e, lerr := r.learnShape(tag)
	if lerr != nil {
		if errors.Is(lerr, shape.ErrKey) || errors.Is(lerr, shape.ErrTemplate) || errors.Is(lerr, segment.ErrInvalidTag) {
			return nil, lerr // the shape's own refusal (another spelling of a shaped tag: BADTAG)
		}
		r.log.Warn("shape: cannot read a tag's shape", zap.String("tag", tag), zap.Error(lerr))
		return nil, err
	}
	if e == nil {
		return nil, err
	}
	return e, nil
}

// period returns the period of now and makes sure its row exists: the first request of a
// period on this instance creates it (start and step from the shape; a row that exists is
// fine; a row pruned and created again starts above every ID this instance or, on MySQL, any
// instance issued from it: the marks and leafd_fence's high-water). The row of the period
// before is retired from this instance: a segment never outlives its period.
func (r *Router) period(e *shapeEntry) (*shape.Period, error) {
	now := r.cfg.PeriodNow()
	p := e.s.PeriodAt(now)
	if e.ready.Load() == p {
		if r.cfg.PeriodLead > 0 && !p.End.IsZero() && p.End.Sub(now) <= r.cfg.PeriodLead && e.ahead.Load() != p {
			r.prefetchNext(e, p)
		}
		return p, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	prev := e.ready.Load()
	if prev == p {
		return p, nil
	}
	// A row prepared ahead (prefetchNext) exists: no store call at the boundary.
	if pr := e.ready2.Load(); pr == nil || *pr != p.Row {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.CreateTimeout)
		defer cancel()
		if err := r.ensureRow(ctx, e, p); err != nil {
			return nil, err
		}
	}
	if prev != nil && prev.Row != p.Row {
		r.seg.Retire(prev.Row)
	}
	if prev == nil {
		r.retireResumed(e, p)
	}
	e.ready.Store(p)
	return p, nil
}

// maxPrefetching bounds the queued creations of next periods' rows; a tag beyond it is
// tried again by its next request, or creates its row at the boundary. prefetchWorkers run
// them, concurrently so that the store's group commit shares their commits.
const (
	maxPrefetching  = 100_000
	prefetchWorkers = 64
)

type prefetchJob struct {
	e    *shapeEntry
	next *shape.Period
}

// prefetcher is a segment core that can load a tag's first segment without taking an ID.
type prefetcher interface {
	Prefetch(ctx context.Context, tag string) error
}

// prefetchNext queues the creation of the row of the period after p and the load of its
// first segment, once per period and tag: within PeriodLead of a boundary, so that every
// periodic tag serves its first ID of the new period from memory instead of all creating
// their rows at once at the boundary (TestPeriodBoundaryManyTags, BenchmarkPeriodBoundary).
// Each period is its own row, so a row made early collides with nothing; its range is served
// only from its period.
func (r *Router) prefetchNext(e *shapeEntry, p *shape.Period) {
	old := e.ahead.Load()
	if old == p || !e.ahead.CompareAndSwap(old, p) {
		return
	}
	q := &r.shapes
	q.preMu.Lock()
	defer q.preMu.Unlock()
	if q.preClosed || len(q.preQueue) >= maxPrefetching {
		e.ahead.CompareAndSwap(p, old) // a later request tries again (or the boundary creates it)
		return
	}
	q.prefetching.Add(1)
	q.preQueue = append(q.preQueue, prefetchJob{e, e.s.NextPeriod(p)})
	if q.preWorkers < prefetchWorkers {
		q.preWorkers++
		q.preWG.Add(1)
		go r.prefetchWorker()
	}
}

// closePrefetch drops the queued preparations, cancels those running and waits for their
// workers: after it no goroutine of the router touches the store. Idempotent.
func (q *shapeRegistry) closePrefetch() {
	q.preMu.Lock()
	q.preClosed = true
	q.prefetching.Add(-int64(len(q.preQueue)))
	q.preQueue = nil
	q.preMu.Unlock()
	q.preStop()
	q.preWG.Wait()
}

// prefetchWorker runs queued jobs and ends when the queue is empty; each job ends within
// CreateTimeout.
func (r *Router) prefetchWorker() {
	q := &r.shapes
	defer q.preWG.Done()
	for {
		q.preMu.Lock()
		if len(q.preQueue) == 0 {
			q.preWorkers--
			q.preQueue = nil
			q.preMu.Unlock()
			return
		}
		j := q.preQueue[0]
		q.preQueue = q.preQueue[1:]
		q.preMu.Unlock()
		ctx, cancel := context.WithTimeout(q.preCtx, r.cfg.CreateTimeout)
		err := r.ensureRow(ctx, j.e, j.next)
		if pf, ok := r.seg.(prefetcher); ok && err == nil {
			err = pf.Prefetch(ctx, j.next.Row)
		}
		cancel()
		if err == nil {
			j.e.ready2.Store(&j.next.Row)
		}
		if err != nil {
			r.log.Debug("shape: preparing the next period's row failed; it is created at the boundary", zap.String("row", j.next.Row), zap.Error(err))
		}
		q.prefetching.Add(-1)
	}
}

// ensureRow creates p's row unless it exists. Most instances find the row another one created
// (a read, no lock), so few creations of one row run at once; a creation that loses to a
// concurrent one (TAGEXISTS, or a MySQL deadlock between the two) is retried, then accepted.
func (r *Router) ensureRow(ctx context.Context, e *shapeEntry, p *shape.Period) error {
	if r, ok := r.cfg.Shapes.(interface {
		MaxID(ctx context.Context, tag string) (int64, error)
	}); ok {
		if _, err := r.MaxID(ctx, p.Row); err == nil {
			return nil
		}
	}
	spec := e.s.Spec()
	var err error
	for try := 0; try < 3; try++ {
		t := segment.Tag{Name: p.Row, Step: spec.Step, MaxID: e.s.Start(), Description: spec.Desc,
			Row: &segment.ShapeRow{PeriodStart: p.Start}}
		err = r.seg.Create(ctx, t)
		if errors.Is(err, segment.ErrLimit) { // START below the mark (a pruned or known row): start at the mark
			t.MaxID = 0
			err = r.seg.Create(ctx, t)
		}
		if err == nil || errors.Is(err, segment.ErrTagExists) {
			return nil
		}
		var te *segment.TagError
		if errors.As(err, &te) || ctx.Err() != nil { // a refusal (LIMIT, BADTAG, SHAPED): final
			return err
		}
		r.log.Info("shape: creating a period's row failed; retrying", zap.String("row", p.Row), zap.Error(err))
		r.cfg.Sleep(time.Duration(10*(try+1)) * time.Millisecond)
	}
	return err
}

// shapedCounter takes one counter of e's current period.
func (r *Router) shapedCounter(e *shapeEntry) (*shape.Period, int64, error) {
	for try := 0; ; try++ {
		p, err := r.period(e)
		if err != nil {
			return nil, 0, err
		}
		c, err := r.seg.Next(p.Row)
		if try == 0 && r.rowLost(e, p, err) {
			continue
		}
		return p, c, err
	}
}

// rowLost reports whether err says that p's row, which this instance created or found, is
// gone from the store (a database failover lost its creation), and if so forgets that the row
// exists, so that the next period call creates it again: above every ID this instance
// issued from it (the marks) and, on MySQL, above the fence's high-water.
func (r *Router) rowLost(e *shapeEntry, p *shape.Period, err error) bool {
	if !errors.Is(err, segment.ErrUnknownTag) {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ready.Load() == p {
		again := *p // another pointer to the same period: period() ensures the row again
		e.ready.Store(&again)
	}
	if pr := e.ready2.Load(); pr != nil && *pr == p.Row {
		e.ready2.Store(nil)
	}
	r.log.Warn("shape: a period's row is gone from the store (a failover lost its creation); creating it again", zap.String("row", p.Row))
	return true
}

// shapedInt is INCR of a shaped tag: the counter of the current period, or for an opaque tag
// its FF1 image (never the raw counter).
func (r *Router) shapedInt(e *shapeEntry) (int64, error) {
	p, ctr, err := r.shapedCounter(e)
	if err != nil {
		return 0, err
	}
	return e.s.Int(p, ctr)
}

// shapedIDs appends n counters of e's current period to dst (IDS.NEXT).
func (r *Router) shapedIDs(dst []int64, e *shapeEntry, n int) (Batch, error) {
	for try := 0; ; try++ {
		per, err := r.period(e)
		if err != nil {
			return Batch{IDs: dst}, err
		}
		ids, err := r.seg.AppendIDs(dst, per.Row, n)
		if try == 0 && r.rowLost(e, per, err) {
			continue
		}
		return Batch{IDs: ids, shape: e, period: per}, err
	}
}

// createShaped runs IDS.CREATE of a tag with FORMAT, RESET, TZ or OPAQUE: the spec is
// checked (a template that cannot hold START, a period the template does not print, OPAQUE
// without --id-key-file: refused) and stored; the rows come with the first use of each period.
func (r *Router) createShaped(tag string, spec shape.Spec) error {
	if r.cfg.Shapes == nil {
		return Refusal("ERR this store keeps no ID shapes")
	}
	if err := segment.ValidateTag(tag); err != nil {
		return err
	}
	if strings.Contains(tag, shape.RowSep) {
		return Refusal("BADTAG a shaped tag's name may not contain '@' (its rows are tag@period)")
	}
	if len(tag)+1+10 > segment.MaxTagLen {
		return Refusal(fmt.Sprintf("BADTAG a shaped tag's name is at most %d bytes (its rows add @period)", segment.MaxTagLen-11))
	}
	s, err := shape.Compile(strings.Clone(tag), r.fixStep(spec), r.cfg.IDKey)
	if err != nil {
		return err
	}
	if err := r.checkFailoverRoom(s); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.CreateTimeout)
	defer cancel()
	if err := r.cfg.Shapes.CreateShape(ctx, tag, s.Spec().Encode()); err != nil {
		return err
	}
	r.shapes.add(s)
	r.log.Info("shape: tag created", zap.String("tag", tag), zap.String("format", spec.Format), zap.String("reset", spec.Reset), zap.String("tz", spec.TZ))
	return nil
}

// shapedWaitRow is WaitRow of a shaped tag: its current period's row, or wait when this
// instance has not created or found that row yet.
func (r *Router) shapedWaitRow(e *shapeEntry) (string, bool) {
	p := e.ready.Load()
	if p == nil || p != e.s.PeriodAt(r.cfg.PeriodNow()) {
		return "", true
	}
	return p.Row, false
}

// Prune is IDS.PRUNE tag period: it deletes the rows of the shaped tag's periods before
// period (its key: 20261201, 202612, 2026 or 2026120115), the retention step for periodic
// tags; the current period is never pruned. It returns the number of rows deleted. A pruned
// period never starts again at 1: if a request (a clock stepped back) uses it again, its row
// is created above every ID this instance issued from it (the marks) and, on MySQL, above
// leafd_fence's high-water.
func (r *Router) Prune(tag, before string) (int, error) {
	e, err := r.learnShape(tag)
	if err != nil {
		return 0, err
	}
	if e == nil || e.s.Reset() == shape.ResetNone {
		return 0, Refusal(fmt.Sprintf("NOSHAPE tag '%s' is not a periodic tag", tag))
	}
	pr, ok := r.cfg.Shapes.(segment.Pruner)
	st, ok2 := r.cfg.Shapes.(segment.Store)
	if !ok || !ok2 {
		return 0, Refusal("ERR this store cannot prune")
	}
	cur := e.s.PeriodAt(r.cfg.PeriodNow())
	if len(before) != len(cur.Key) || before > cur.Key {
		return 0, Refusal(fmt.Sprintf("ERR period must be a key like %s, not after the current period", cur.Key))
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.CreateTimeout)
	defer cancel()
	rows, err := segment.PeriodRows(ctx, st, tag)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, row := range rows {
		key := strings.TrimPrefix(row, tag+shape.RowSep)
		if len(key) != len(before) || key >= before {
			continue
		}
		r.seg.Retire(row)
		if err := pr.DeleteTag(ctx, row); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Parse is IDS.PARSE tag id: the counter and period an ID of a shaped tag came from;
// NOSHAPE for a tag without a shape, BADID for a string the tag could not have issued.
func (r *Router) Parse(tag, id string) (shape.Parsed, error) {
	e, err := r.learnShape(tag)
	if err != nil {
		return shape.Parsed{}, err
	}
	if e == nil {
		return shape.Parsed{}, Refusal(fmt.Sprintf("NOSHAPE tag '%s' has no ID shape (create it with IDS.CREATE %s FORMAT template)", tag, tag))
	}
	return e.s.Parse(id)
}

// errShaped is the error of INCRBY or IDS.SEGMENT on a shaped tag's name (no row of that
// name exists): SHAPED.
func errShaped(tag string) error {
	return &segment.TagError{Tag: strings.Clone(tag), Err: segment.ErrShaped, Detail: "use IDS.NEXT or INCR"}
}

// counterRow refuses a plain request (INCR, INCRBY, IDS.SEGMENT) of a shaped tag's counter
// row, tag@period: the row's raw counter is what an opaque tag's permutation hides, and the
// period logic (a segment never outlives its period) belongs to the shaped tag. A name
// without '@' costs one byte scan. When the shape is not known here it is read from the store
// only if the request waits anyway (the row is not served from memory: a load is due), so a
// served request never blocks the loop on it; a row this instance served through its shaped
// tag has its shape known.
func (r *Router) counterRow(tag string, n int64) error {
	i := strings.IndexByte(tag, '@')
	if i <= 0 {
		return nil
	}
	base := tag[:i]
	e := r.shapeOf(base)
	if e == nil && r.cfg.Shapes != nil && !r.seg.Serves(tag, n) {
		var err error
		if e, err = r.learnShape(base); err != nil {
			if errors.Is(err, shape.ErrKey) || errors.Is(err, shape.ErrTemplate) {
				return errCounterRow(tag, base) // shaped, but not servable here (no key)
			}
			return err // cannot tell: refuse rather than perhaps leak an opaque tag's counter
		}
	}
	if e == nil {
		return nil
	}
	return errCounterRow(tag, base)
}

// formatted takes one counter of e's current period and renders it (the HTTP API).
func (r *Router) formatted(dst []byte, e *shapeEntry) ([]byte, error) {
	p, c, err := r.shapedCounter(e)
	if err != nil {
		return dst, err
	}
	return e.s.Append(dst, p, c)
}

// Prefetching is the number of next periods' rows being prepared in the background, queued
// or running (prefetchNext).
func (r *Router) Prefetching() int64 { return r.shapes.prefetching.Load() }
