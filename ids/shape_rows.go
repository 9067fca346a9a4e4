package ids

import (
	"errors"
	"fmt"
	"strings"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/shape"
	"go.uber.org/zap"
)

// Counter rows resumed at start. The segment core serves the remainder file of a graceful
// shutdown before any request (segment: "Graceful restart"), and it holds rows tag@period
// like any tag, without knowing shapes. A resumed row is served from memory, so the check
// that refuses a shaped tag's row to plain requests (counterRow), which reads the shape only
// when a request waits anyway, would not read it, and an opaque tag's raw counter would be
// served; and a row of a past period would be held, and saved at each stop, for ever.
// adoptResumed therefore runs before the first request: each resumed row whose prefix is a
// shaped tag gets that shape registered (so every plain path refuses it with SHAPED), a row
// of a past period is retired at once, the current and a later period's row stay (their IDs
// are served), and a row whose shape cannot be read or used here (no key, store down) is
// retired: its rest is a gap, never a leak.

// adoptResumed runs once, from New.
func (r *Router) adoptResumed() {
	if r.cfg.Shapes == nil {
		return
	}
	now := r.cfg.PeriodNow()
	for _, row := range r.seg.Tags() {
		i := strings.IndexByte(row, '@')
		if i <= 0 {
			continue
		}
		base := row[:i]
		e, err := r.learnShape(base)
		switch {
		case err != nil:
			r.seg.Retire(row)
			if !errors.Is(err, shape.ErrKey) && !errors.Is(err, shape.ErrTemplate) {
				r.log.Warn("shape: a resumed row's shape cannot be read; the row is retired (its rest is a gap)", zap.String("row", row), zap.Error(err))
			}
		case e == nil: // a plain tag whose name has an '@'
		case e.s.Reset() != shape.ResetNone && pastKey(rowKey(row, base), e.s.PeriodAt(now).Key):
			r.seg.Retire(row)
		default:
			e.mu.Lock()
			e.resumed = append(e.resumed, row)
			e.mu.Unlock()
		}
	}
}

// rowKey is the period key of a counter row of base.
func rowKey(row, base string) string { return row[len(base)+len(shape.RowSep):] }

// pastKey reports whether a row's period key k comes before the current key cur (period keys
// of one tag have one length and sort as their periods; another length is no period of it).
func pastKey(k, cur string) bool { return len(k) != len(cur) || k < cur }

// retireResumed retires, at e's first period p on this instance (e.mu held), the resumed rows
// of periods before p (a clock that moved on since the start).
func (r *Router) retireResumed(e *shapeEntry, p *shape.Period) {
	for _, row := range e.resumed {
		if pastKey(rowKey(row, e.s.Tag()), p.Key) {
			r.seg.Retire(row)
		}
	}
	e.resumed = nil
}

// fixStep writes the step into a spec that has none (this instance's default step), so that
// every instance creates the tag's rows at one step: the failover room checked at creation
// (checkFailoverRoom) holds whatever another instance's --default-step.
func (r *Router) fixStep(spec shape.Spec) shape.Spec {
	if d, ok := r.seg.(interface{ DefaultStep() int64 }); ok && spec.Step == 0 {
		spec.Step = d.DefaultStep()
	}
	return spec
}

// checkFailoverRoom refuses a shape whose counter width cannot hold what uniqueness needs
// through a failover: a takeover moves a row by --mysql-failover-allocs × STEP (its failover
// gap, segment/mysqlstore/shaperow.go), and the row must still serve a segment above that.
func (r *Router) checkFailoverRoom(s *shape.Shape) error {
	rg, ok := r.cfg.Shapes.(interface{ RowGap(step int64) int64 })
	step := s.Spec().Step
	if !ok || step <= 0 || rg.RowGap(1) <= 0 {
		return nil
	}
	f, capacity, start := rg.RowGap(1), s.Capacity(), s.Start()
	if room := capacity - start + 1; step <= room/(f+1) {
		return nil
	}
	return Refusal(fmt.Sprintf("LIMIT the counter holds %d values from START %d to %d; a failover moves a row by --mysql-failover-allocs %d × STEP %d = %d and it must serve one more step above that (%d values): use STEP %d or less, or a wider counter",
		capacity-start+1, start, capacity, f, step, f*step, (f+1)*step, (capacity-start+1)/(f+1)))
}

// errCounterRow refuses a plain request of base's counter row tag (counterRow).
func errCounterRow(tag, base string) error {
	return &segment.TagError{Tag: strings.Clone(tag), Err: segment.ErrShaped,
		Detail: "a counter row of the shaped tag '" + base + "' is served only through it: use IDS.NEXT or INCR " + base}
}
