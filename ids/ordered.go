package ids

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/shape"
	"go.uber.org/zap"
)

// ORDERED tags (package ordered; docs/SEGMENT.md, "Ordered tags"). One instance at a time,
// the tag's leader, issues its IDs; every other instance forwards the tag's INCR, INCRBY,
// IDS.SEGMENT and IDS.NEXT to it and relays the reply. The leader takes IDs only while it is
// Serving, checked before and after the take with the same term: an ID taken across a lost
// lease or a new term is never sent (TRYAGAIN instead; the ID is a gap).

// The ID operations an ordered tag routes (orderedTake's kind).
const (
	ordIncr = iota
	ordIncrBy
	ordIDs
)

// Forward is where a request of an ordered tag goes when another instance leads it: the
// caller sends it there (handlers forwards a RESP pipeline) or redirects the client. The
// zero Forward (Tag nil) means the request was answered here.
type Forward struct {
	Tag   *ordered.Tag
	Route ordered.Route
}

// orderedTag returns the ordered tag named tag, nil for any other (one atomic load while no
// ordered tag is known; a map look-up otherwise; no allocation).
func (r *Router) orderedTag(tag string) *ordered.Tag {
	if r.ord == nil {
		return nil
	}
	return r.ord.Lookup(tag)
}

// orderedTake takes the IDs of ordered tag t here while this instance serves it (n for
// ordIncrBy and ordIDs; the highest one for ordIncrBy, appended to dst), else returns
// where to forward the request, else TRYAGAIN.
func (r *Router) orderedTake(dst []int64, t *ordered.Tag, kind int, n int64) ([]int64, Forward, error) {
	term, fw, ok, err := r.orderedHeld(t)
	if !ok {
		return dst, fw, err
	}
	var id int64
	ids := dst
	switch kind {
	case ordIncr:
		if id, err = r.seg.Next(t.Name); err == nil {
			ids = append(ids, id)
		}
	case ordIncrBy:
		if id, err = r.seg.NextN(t.Name, n); err == nil {
			ids = append(ids, id)
		}
	default:
		ids, err = r.seg.AppendIDs(ids, t.Name, int(n))
	}
	return ids, Forward{}, r.orderedTook(t, term, err)
}

// orderedIncr is orderedTake of one ID for INCR, without a slice (dst escapes through the
// Segments interface: an allocation per INCR, here and at every follower forwarding it).
func (r *Router) orderedIncr(t *ordered.Tag) (int64, Forward, error) {
	term, fw, ok, err := r.orderedHeld(t)
	if !ok {
		return 0, fw, err
	}
	id, err := r.seg.Next(t.Name)
	return id, Forward{}, r.orderedTook(t, term, err)
}

// orderedHeld is orderedTake's check before the take: ok with the term while this instance
// serves t, else where to forward the request, or TRYAGAIN.
func (r *Router) orderedHeld(t *ordered.Tag) (term int64, fw Forward, ok bool, err error) {
	term, ok = t.Held()
	if !ok {
		t.WaitFirst(r.ord.Length() / 3) // a tag just learned of: its first lease call tells the route
		term, ok = t.Held()
	}
	if ok {
		return term, Forward{}, true, nil
	}
	rt := t.Route()
	if rt.Leader == "" || rt.Here {
		return 0, Forward{}, false, r.TryAgain(t, rt, "")
	}
	return 0, Forward{Tag: t, Route: rt}, false, nil
}

// orderedTook is orderedTake's check after the take (err its error): nil when the IDs may be
// sent, still serving in the same term.
func (r *Router) orderedTook(t *ordered.Tag, term int64, err error) error {
	if errors.Is(err, segment.ErrNotAdmitted) {
		return r.TryAgain(t, t.Route(), "")
	}
	if err != nil {
		return err
	}
	// Serving, on the clock (the check before was Held, without it): an ID taken while the
	// lease ran out or a new term began is not sent.
	if now, ok := t.Serving(); !ok || now != term {
		return r.TryAgain(t, t.Route(), "") // the IDs taken are a gap, never sent
	}
	return nil
}

// ForwardFailed is the answer when the leader could not be reached: an error, never an ID of
// this instance's own.
func (r *Router) ForwardFailed(t *ordered.Tag, rt ordered.Route, err error) error {
	t.ForwardErrors.Add(1)
	r.ord.ForwardErrors.Add(1)
	r.log.Debug("ordered: forward failed", zap.String("tag", t.Name), zap.Error(err))
	return Refusal(fmt.Sprintf("UNAVAILABLE ordered tag '%s': leader %s unreachable (its lease expires within %s); retry", t.Name, rt.Leader, secs(t.Status().Remaining)))
}

// Forwarded counts n requests of the ordered tags that a leader answered.
func (r *Router) Forwarded(n int64) { r.ord.Forwarded.Add(n) }

// orderedNext is the next ID of ordered tag t for Leaf's HTTP API, gated and routed as
// INCR: taken here only while Held before and Serving after the take in the same term, else
// forwarded to the leader, else TRYAGAIN: a direct call of the segment core would let an
// ex-leader serve its held segments (TestOrderedHTTPGated).
func (r *Router) orderedNext(t *ordered.Tag) (int64, error) {
	id, fw, err := r.orderedIncr(t)
	if err != nil {
		return 0, err
	}
	if fw.Tag == nil {
		return id, nil
	}
	call := r.fwd.Do(fw.Route.Leader, [][]byte{[]byte("INCR"), []byte(t.Name)})
	defer r.fwd.Release(call)
	if call.Err != nil {
		return 0, r.ForwardFailed(t, fw.Route, call.Err)
	}
	t.Forwarded.Add(1)
	r.ord.Forwarded.Add(1)
	switch rep := &call.Replies[0]; rep.Kind {
	case ':':
		return rep.Int, nil
	case '-':
		return 0, Refusal(string(rep.Str))
	}
	return 0, Refusal("ERR the leader answered INCR with no integer")
}

// TryAgain is the retryable refusal while no instance serves t (as far as this one knows).
func (r *Router) TryAgain(t *ordered.Tag, rt ordered.Route, why string) error {
	r.ord.TryAgain.Add(1)
	switch {
	case why != "":
		why = fmt.Sprintf("%s (leader: %s)", why, orNone(rt.Leader))
	case rt.Here && rt.Wait > 0:
		why = fmt.Sprintf("is being taken over by this instance (serving within %s, after a database failover)", secs(rt.Wait))
	case rt.Here:
		why = "is changing leader"
	default:
		why = fmt.Sprintf("has no leader now (lease expires within %s)", secs(rt.Wait))
	}
	return Refusal(fmt.Sprintf("TRYAGAIN ordered tag '%s' %s; retry", t.Name, why))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// secs rounds d up to a tenth of a second ("0.0s" when zero).
func secs(d time.Duration) string {
	tenths := (d + 100*time.Millisecond - 1) / (100 * time.Millisecond)
	return fmt.Sprintf("%d.%ds", tenths/10, tenths%10)
}

// createOrdered: IDS.CREATE tag ... ORDERED. The mark is written in the creating transaction
// (segment.Tag.Ordered), so no instance can serve the tag's first range as an ordinary tag:
// its first load asks segment.Config.Admit, which reads the mark. An existing tag cannot be
// made ORDERED (TAGEXISTS, as for any IDS.CREATE of an existing tag): instances hold ranges
// of it, issued in no order across them, and would keep serving them.
func (r *Router) createOrdered(t segment.Tag, sp shape.Spec) error {
	if sp.Format != "" || sp.Reset != "" || sp.TZ != "" || sp.Opaque {
		return Refusal("ERR ORDERED cannot be combined with FORMAT, RESET, TZ or OPAQUE")
	}
	if r.ord == nil {
		return Refusal("ERR ORDERED tags are not enabled on this server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.CreateTimeout)
	defer cancel()
	if err := r.seg.Create(ctx, t); err != nil {
		return err
	}
	if _, err := r.ord.Add(t.Name); err != nil {
		// Created and marked: the other instances route it; this one learns it at its next
		// list of the ordered tags (within the lease length) and answers TRYAGAIN meanwhile.
		r.log.Warn("ordered: tag created but not tracked yet", zap.String("tag", t.Name), zap.Error(err))
	}
	return nil
}
