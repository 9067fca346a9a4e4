package handlers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/shape"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// ORDERED tags (package ordered; docs/SEGMENT.md, "Ordered tags"). One instance at a time,
// the tag's leader, issues its IDs; every other instance forwards the tag's INCR, INCRBY,
// IDS.SEGMENT and IDS.NEXT to it and relays the reply. The leader takes IDs only while it is
// Serving, checked before and after the take with the same term: an ID taken across a lost
// lease or a new term is never sent (TRYAGAIN instead; the ID is a gap).

// The commands an ordered tag routes (orderedCmd's kind).
const (
	ordIncr = iota
	ordIncrBy
	ordSegment
	ordNext
)

// orderedTag returns the ordered tag args[1] names, nil for an ordinary tag (one atomic load
// while no ordered tag is known; a map look-up otherwise; no allocation).
func (h *Handler) orderedTag(args [][]byte) *ordered.Tag {
	if h.ord == nil || len(args) < 2 {
		return nil
	}
	return h.ord.Lookup(str(args[1]))
}

// forwardedTag returns tag when it is an ordered tag this instance does not serve now: its ID
// commands are forwarded (Handler.serves, which every ID command's mayWait asks); else nil.
func (h *Handler) forwardedTag(tag string) *ordered.Tag {
	if h.ord == nil {
		return nil
	}
	t := h.ord.Lookup(tag)
	if t == nil {
		return nil
	}
	if _, ok := t.Held(); ok {
		return nil
	}
	return t
}

// orderedCmd runs an ID command of ordered tag t: here while this instance serves it, else
// forwarded to the leader, else TRYAGAIN.
func (h *Handler) orderedCmd(c *resp.Conn, t *ordered.Tag, args [][]byte, kind int) error {
	if term, ok := t.Held(); ok {
		return h.orderedLocal(c, t, term, args, kind)
	}
	t.WaitFirst(h.ord.Length() / 3) // a tag just learned of: its first lease call tells the route
	if term, ok := t.Held(); ok {
		return h.orderedLocal(c, t, term, args, kind)
	}
	r := t.Route()
	if c.Name() == ordered.ForwardClientName {
		// Forwarded by an instance that saw this one as the leader: never sent on again.
		return h.tryAgain(t, r, "is not led by this instance now")
	}
	if r.Leader == "" || r.Here {
		return h.tryAgain(t, r, "")
	}
	if redirects(c) {
		return h.redirect(t, r)
	}
	h.forward(c, t, r, args)
	return nil
}

// forwardFailed is the answer when the leader could not be reached: an error, never an ID of
// this instance's own.
func (h *Handler) forwardFailed(t *ordered.Tag, r ordered.Route, err error) error {
	t.ForwardErrors.Add(1)
	h.ord.ForwardErrors.Add(1)
	h.log.Debug("ordered: forward failed", zap.String("tag", t.Name), zap.Error(err))
	return replyError(fmt.Sprintf("UNAVAILABLE ordered tag '%s': leader %s unreachable (its lease expires within %s); retry", t.Name, r.Leader, secs(t.Status().Remaining)))
}

// orderedNext is the next ID of ordered tag t for Leaf's HTTP API, gated and routed as
// orderedCmd's INCR: taken here only while Held before and Serving after the take in the same
// term, else forwarded to the leader, else TRYAGAIN: a direct call of the segment core would let an
// ex-leader serve its held segments (TestOrderedHTTPGated).
func (h *Handler) orderedNext(t *ordered.Tag, key string) (int64, error) {
	term, ok := t.Held()
	if !ok {
		t.WaitFirst(h.ord.Length() / 3)
		term, ok = t.Held()
	}
	if ok {
		id, err := h.seg.Next(key)
		if errors.Is(err, segment.ErrNotAdmitted) {
			return 0, h.tryAgain(t, t.Route(), "")
		}
		if err != nil {
			return 0, err
		}
		if now, ok := t.Serving(); !ok || now != term {
			return 0, h.tryAgain(t, t.Route(), "") // the ID taken is a gap, never sent
		}
		return id, nil
	}
	r := t.Route()
	if r.Leader == "" || r.Here {
		return 0, h.tryAgain(t, r, "")
	}
	call := h.fwd.Do(r.Leader, [][]byte{[]byte("INCR"), []byte(key)})
	defer h.fwd.Release(call)
	if call.Err != nil {
		return 0, h.forwardFailed(t, r, call.Err)
	}
	t.Forwarded.Add(1)
	h.ord.Forwarded.Add(1)
	switch rep := &call.Replies[0]; rep.Kind {
	case ':':
		return rep.Int, nil
	case '-':
		return 0, replyError(string(rep.Str))
	}
	return 0, replyError("ERR the leader answered INCR with no integer")
}

// tryAgain is the retryable refusal while no instance serves t (as far as this one knows).
func (h *Handler) tryAgain(t *ordered.Tag, r ordered.Route, why string) error {
	h.ord.TryAgain.Add(1)
	switch {
	case why != "":
		why = fmt.Sprintf("%s (leader: %s)", why, orNone(r.Leader))
	case r.Here && r.Wait > 0:
		why = fmt.Sprintf("is being taken over by this instance (serving within %s, after a database failover)", secs(r.Wait))
	case r.Here:
		why = "is changing leader"
	default:
		why = fmt.Sprintf("has no leader now (lease expires within %s)", secs(r.Wait))
	}
	return replyError(fmt.Sprintf("TRYAGAIN ordered tag '%s' %s; retry", t.Name, why))
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

// orderedLocal takes the IDs here, then checks that the term still serves (Serving, on the
// clock; the check before was Held, without it): an ID taken while the lease ran out or a new
// term began is not sent.
func (h *Handler) orderedLocal(c *resp.Conn, t *ordered.Tag, term int64, args [][]byte, kind int) error {
	tag := str(args[1])
	p := idsPool.Get().(*[]int64)
	defer idsPool.Put(p)
	ids := (*p)[:0]
	var err error
	switch kind {
	case ordIncr:
		var id int64
		if id, err = h.seg.Next(tag); err == nil {
			ids = append(ids, id)
		}
	case ordIncrBy:
		n, perr := parseInt(args[2])
		if perr != nil {
			return perr
		}
		if n < 1 {
			return replyError("LIMIT INCRBY count must be at least 1")
		}
		var id int64
		if id, err = h.seg.NextN(tag, n); err == nil {
			ids = append(ids, id)
		}
	default:
		n, cerr := h.tagCount(args)
		if cerr != nil {
			return cerr
		}
		ids, err = h.seg.AppendIDs(ids, tag, n)
	}
	*p = ids[:0]
	if errors.Is(err, segment.ErrNotAdmitted) {
		return h.tryAgain(t, t.Route(), "")
	}
	if err != nil {
		return err
	}
	if now, ok := t.Serving(); !ok || now != term {
		return h.tryAgain(t, t.Route(), "") // the IDs taken are a gap, never sent
	}
	switch kind {
	case ordIncr, ordIncrBy:
		c.WriteInt(ids[0])
	case ordSegment:
		c.WriteInts(ids)
	case ordNext:
		if len(args) == 3 {
			c.WriteArray(len(ids))
		}
		for _, id := range ids {
			writeID(c, id, true)
		}
	}
	return nil
}

// orderedRetry: a command of a tag not known as ordered failed because the segment core
// found it ordered at its first load (segment.ErrNotAdmitted): now known, it runs again
// (routed). It reports whether it ran.
func (h *Handler) orderedRetry(c *resp.Conn, cmd *command, args [][]byte, err error) bool {
	if !errors.Is(err, segment.ErrNotAdmitted) || h.orderedTag(args) == nil {
		return false
	}
	if err := cmd.run(h, c, args); err != nil {
		c.WriteError(h.errorReply(err))
	}
	return true
}

// writeReply relays a reply of the leader.
func writeReply(c *resp.Conn, r *ordered.Reply) {
	switch r.Kind {
	case ':':
		c.WriteInt(r.Int)
	case '-':
		c.WriteError(string(r.Str))
	case '+':
		c.WriteSimple(string(r.Str))
	case '$':
		c.WriteBulk(r.Str)
	case '*':
		c.WriteArray(len(r.Elems))
		for i := range r.Elems {
			writeReply(c, &r.Elems[i])
		}
	default:
		c.WriteNull()
	}
}

// orderedInfoFields is how many fields writeOrderedInfo adds to IDS.INFO.
const orderedInfoFields = 6

// writeOrderedInfo writes IDS.INFO's fields of an ordered tag.
func (h *Handler) writeOrderedInfo(c *resp.Conn, t *ordered.Tag) {
	s := t.Status()
	c.WriteBulkString("ordered")
	c.WriteInt(1)
	c.WriteBulkString("leader")
	c.WriteBulkString(s.Leader)
	c.WriteBulkString("leader_here")
	c.WriteInt(b2i(s.Here))
	c.WriteBulkString("epoch")
	c.WriteInt(s.Epoch)
	c.WriteBulkString("lease_remaining_ms")
	c.WriteInt(s.Remaining.Milliseconds())
	c.WriteBulkString("forwarded")
	c.WriteInt(s.Forwarded)
}

// createOrdered: IDS.CREATE tag ... ORDERED. The mark is written in the creating transaction
// (segment.Tag.Ordered), so no instance can serve the tag's first range as an ordinary tag:
// its first load asks segment.Config.Admit, which reads the mark. An existing tag cannot be
// made ORDERED (TAGEXISTS, as for any IDS.CREATE of an existing tag): instances hold ranges
// of it, issued in no order across them, and would keep serving them.
func (h *Handler) createOrdered(c *resp.Conn, t segment.Tag, sp shape.Spec) error {
	if sp.Format != "" || sp.Reset != "" || sp.TZ != "" || sp.Opaque {
		return replyError("ERR ORDERED cannot be combined with FORMAT, RESET, TZ or OPAQUE")
	}
	if h.ord == nil {
		return replyError("ERR ORDERED tags are not enabled on this server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.CreateTimeout)
	defer cancel()
	if err := h.seg.Create(ctx, t); err != nil {
		return err
	}
	if _, err := h.ord.Add(t.Name); err != nil {
		// Created and marked: the other instances route it; this one learns it at its next
		// list of the ordered tags (within the lease length) and answers TRYAGAIN meanwhile.
		h.log.Warn("ordered: tag created but not tracked yet", zap.String("tag", t.Name), zap.Error(err))
	}
	c.WriteSimple("OK")
	return nil
}

// statusOrdered is /status.json's "ordered": the forwarding counters and each ordered tag's
// leader as this instance sees it.
type statusOrdered struct {
	Local         bool   `json:"local"` // the embedded store: every ordered tag is led here
	Holder        string `json:"advertise_addr"`
	Forwarded     int64  `json:"forwarded"`
	ForwardErrors int64  `json:"forward_errors"`
	TryAgain      int64  `json:"tryagain"`
	// ForwardWrites and ForwardRequests: the writes to leaders and the requests they carried
	// (a follower's pipelines and many clients' calls share writes).
	ForwardWrites   int64              `json:"forward_writes"`
	ForwardRequests int64              `json:"forward_requests"`
	Tags            []statusOrderedTag `json:"tags"`
}

type statusOrderedTag struct {
	Tag              string `json:"tag"`
	Leader           string `json:"leader"`
	LeaderHere       bool   `json:"leader_here"`
	Epoch            int64  `json:"epoch"`
	LeaseRemainingMs int64  `json:"lease_remaining_ms"`
	Forwarded        int64  `json:"forwarded"`
	ForwardErrors    int64  `json:"forward_errors"`
	LastError        string `json:"last_error,omitempty"`
}

func (h *Handler) orderedStatus() *statusOrdered {
	if h.ord == nil {
		return nil
	}
	so := &statusOrdered{Local: h.ord.Local(), Holder: h.ord.Holder(), Forwarded: h.ord.Forwarded.Load(),
		ForwardErrors: h.ord.ForwardErrors.Load(), TryAgain: h.ord.TryAgain.Load(), Tags: []statusOrderedTag{}}
	if h.fwd != nil {
		so.ForwardWrites, so.ForwardRequests = h.fwd.Writes(), h.fwd.Requests()
	}
	for _, s := range h.ord.Statuses() {
		so.Tags = append(so.Tags, statusOrderedTag{Tag: s.Tag, Leader: s.Leader, LeaderHere: s.Here, Epoch: s.Epoch,
			LeaseRemainingMs: s.Remaining.Milliseconds(), Forwarded: s.Forwarded, ForwardErrors: s.ForwardErrors, LastError: s.LastError})
	}
	return so
}

var (
	descOrdForwarded   = desc("ordered_forwarded_total", "Requests of ORDERED tags forwarded to their leader and answered.", "tag")
	descOrdForwardErrs = desc("ordered_forward_errors_total", "Requests of ORDERED tags whose leader could not be reached (answered UNAVAILABLE).", "tag")
	descOrdTryAgain    = desc("ordered_tryagain_total", "Requests of ORDERED tags answered TRYAGAIN (no leader, or a lease lost during the request).")
	descOrdLeaderHere  = desc("ordered_leader", "1 for the ORDERED tag's leader as this instance sees it.", "tag", "leader")
)

func (h *Handler) collectOrdered(counter, gauge func(d *prometheus.Desc, v float64, labels ...string)) {
	if h.ord == nil {
		return
	}
	counter(descOrdTryAgain, float64(h.ord.TryAgain.Load()))
	for _, s := range h.ord.Statuses() {
		counter(descOrdForwarded, float64(s.Forwarded), s.Tag)
		counter(descOrdForwardErrs, float64(s.ForwardErrors), s.Tag)
		gauge(descOrdLeaderHere, 1, s.Tag, s.Leader)
	}
}
