package handlers

import (
	"github.com/leafd/leafd/ids"
	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/resp"
	"github.com/prometheus/client_golang/prometheus"
)

// The RESP side of ORDERED tags: the router (package ids) takes their IDs here while this
// instance leads the tag, else names the leader; a command led elsewhere is forwarded (with
// the pipelined commands that can join it, orderedfwd.go) or redirected, and the leader's
// replies relayed.

// forwardCmd sends args, an ID command of an ordered tag led elsewhere, where fw says.
func (h *Handler) forwardCmd(c *resp.Conn, fw ids.Forward, args [][]byte) error {
	if c.Name() == ordered.ForwardClientName {
		// Forwarded by an instance that saw this one as the leader: never sent on again.
		return h.ids.TryAgain(fw.Tag, fw.Route, "is not led by this instance now")
	}
	if redirects(c) {
		return h.redirect(fw.Tag, fw.Route)
	}
	h.forward(c, fw.Tag, fw.Route, args)
	return nil
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
func writeOrderedInfo(c *resp.Conn, t *ordered.Tag) {
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
