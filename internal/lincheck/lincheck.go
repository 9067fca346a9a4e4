// Package lincheck checks a history of ID requests against what an ORDERED tag promises
// (docs/SEGMENT.md, "Ordered tags"): every ID is handed out once, and every reply
// is above every reply that any client had received before that request was sent
// (linearizable increments).
//
// A Recorder hands each client goroutine its own Client, which stamps each request with the
// process's monotonic clock: the send time before the request is written, the reply time
// after the reply is read. So when one op's reply time is below another's send time, the
// first reply really had arrived before the second request left, whatever the scheduling in
// between, and the second reply must be above the first. Ops whose intervals overlap are
// concurrent and may come in either order.
//
// Check runs in O(n log n): the successful ops sorted by reply time give, by a running
// maximum, the highest ID received before any instant; each op sorted by send time is
// compared with that maximum at its send. A million ops check in well under a second.
//
// The package is for tests (cmd/leafd's end-to-end tests); it is internal and never linked
// into the leafd binary.
package lincheck

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Op is one request as one client saw it. Times are nanoseconds on the Recorder's
// monotonic clock (since its start).
type Op struct {
	Client int   // the client (connection) that sent it
	Seq    int   // its position among the client's ops (0, 1, ...)
	Send   int64 // taken before the request was written
	Reply  int64 // taken after the reply (or the error) was read; >= Send
	Value  int64 // the highest ID of the reply (INCR: the ID; INCRBY n: the reply)
	N      int64 // how many IDs the reply owns, [Value-N+1, Value]; 0 for an error
	Err    string
	// Err is "" for an ID, else the error's code (the first word of an error reply, such
	// as TRYAGAIN) or a word of the caller's for a transport error (NET).
}

// OK reports whether the op was answered with IDs.
func (o Op) OK() bool { return o.Err == "" && o.N > 0 }

// Lo is the lowest ID the op owns.
func (o Op) Lo() int64 { return o.Value - o.N + 1 }

func (o Op) String() string {
	what := fmt.Sprintf("ID %d", o.Value)
	switch {
	case !o.OK():
		what = "error " + o.Err
	case o.N > 1:
		what = fmt.Sprintf("IDs %d-%d", o.Lo(), o.Value)
	}
	return fmt.Sprintf("client %d op %d sent %v, answered %v: %s", o.Client, o.Seq,
		time.Duration(o.Send), time.Duration(o.Reply), what)
}

// Recorder collects the ops of many clients. Client is safe for concurrent use; each Client
// is used by one goroutine at a time.
type Recorder struct {
	start time.Time // carries the monotonic reading every stamp is taken against

	mu      sync.Mutex
	clients []*Client
}

// NewRecorder returns a Recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the Recorder's monotonic clock: nanoseconds since its start.
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// At converts a time.Time taken in this process (with its monotonic reading) to the
// Recorder's clock, so that a scenario can mark its faults on the ops' time line.
func (r *Recorder) At(t time.Time) int64 { return int64(t.Sub(r.start)) }

// Client returns a new client with the next id. Its ops are part of Ops from then on.
func (r *Recorder) Client() *Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &Client{r: r, id: len(r.clients), ops: make([]Op, 0, 1024)}
	r.clients = append(r.clients, c)
	return c
}

// Ops returns every client's ops. Call it once the clients have stopped.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.clients {
		n += len(c.ops)
	}
	out := make([]Op, 0, n)
	for _, c := range r.clients {
		out = append(out, c.ops...)
	}
	return out
}

// Client records one connection's requests, one at a time: Send, then OK or Fail.
type Client struct {
	r       *Recorder
	id      int
	ops     []Op
	pending int64 // send time of the request in flight; -1 when none
}

// ID is the client's id in the ops.
func (c *Client) ID() int { return c.id }

// Send stamps the send time of the next request. Call it just before writing the request.
func (c *Client) Send() { c.pending = c.r.Now() }

// OK records the reply of the request in flight: n IDs, the highest value.
func (c *Client) OK(value, n int64) { c.add(value, n, "") }

// OKEach records a reply of several IDs that need not be contiguous (IDS.SEGMENT): one op
// per ID, all with the request's stamps, in the reply's order (so each must be above the
// one before it, as the client's later op).
func (c *Client) OKEach(ids []int64) {
	now := c.r.Now()
	for _, id := range ids {
		c.ops = append(c.ops, Op{Client: c.id, Seq: len(c.ops), Send: c.pending, Reply: now, Value: id, N: 1})
	}
}

// Fail records an error reply (its code) or a transport error (a word of the caller's).
func (c *Client) Fail(code string) { c.add(0, 0, code) }

func (c *Client) add(value, n int64, code string) {
	now := c.r.Now()
	c.ops = append(c.ops, Op{Client: c.id, Seq: len(c.ops), Send: c.pending, Reply: now, Value: value, N: n, Err: code})
}

// Violation is a reply not above a reply received before its request was sent.
type Violation struct {
	Op     Op // the late, low reply
	Before Op // the highest reply received before Op was sent: Before.Reply < Op.Send
}

func (v Violation) String() string {
	return fmt.Sprintf("%v is not above %v, received %v before the request was sent",
		v.Op, v.Before, time.Duration(v.Op.Send-v.Before.Reply))
}

// Duplicate is an ID owned by two replies.
type Duplicate struct {
	ID   int64
	A, B Op
}

func (d Duplicate) String() string {
	return fmt.Sprintf("ID %d handed out twice: %v; %v", d.ID, d.A, d.B)
}

// Gap is a window with no successful reply.
type Gap struct {
	From, To int64 // on the Recorder's clock
}

// Len is the window's length.
func (g Gap) Len() time.Duration { return time.Duration(g.To - g.From) }

// Examples is how many violations and duplicates a Result keeps (the first ones).
const Examples = 10

// Result is what Check found.
type Result struct {
	Ops, OK    int
	Errors     map[string]int // error ops by code
	Duplicates int            // pairs of replies owning a common ID
	Violations int            // replies not above a reply received before their send
	FirstDups  []Duplicate    // the first Examples duplicates, by ID
	FirstViols []Violation    // the first Examples violations, by send time
	Span       Gap            // from the first send to the last reply
	LongestGap Gap            // the longest window within Span with no successful reply
}

// Err is nil when the history has no duplicate and no violation, else an error listing the
// first of each.
func (r Result) Err() error {
	if r.Duplicates == 0 && r.Violations == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d duplicates and %d order violations among %d replies with IDs", r.Duplicates, r.Violations, r.OK)
	for _, d := range r.FirstDups {
		b.WriteString("\n  duplicate: " + d.String())
	}
	for _, v := range r.FirstViols {
		b.WriteString("\n  order: " + v.String())
	}
	return fmt.Errorf("%s", b.String())
}

// String summarises the result in one line.
func (r Result) String() string {
	codes := make([]string, 0, len(r.Errors))
	for c, n := range r.Errors {
		codes = append(codes, fmt.Sprintf("%s=%d", c, n))
	}
	slices.Sort(codes)
	return fmt.Sprintf("%d ops over %v: %d IDs, errors {%s}, %d duplicates, %d violations, longest gap %v at %v",
		r.Ops, r.Span.Len().Round(time.Millisecond), r.OK, strings.Join(codes, " "), r.Duplicates, r.Violations,
		r.LongestGap.Len().Round(time.Millisecond), time.Duration(r.LongestGap.From).Round(time.Millisecond))
}

// stamp is one op's time with its index: the sort key of both sweeps.
type stamp struct {
	t int64
	i int32
}

func byTime(a, b stamp) int {
	if c := cmp.Compare(a.t, b.t); c != 0 {
		return c
	}
	return cmp.Compare(a.i, b.i)
}

// Check checks ops (any order) for duplicates and order violations and measures the gaps.
func Check(ops []Op) Result {
	res := Result{Ops: len(ops), Errors: map[string]int{}}
	if len(ops) == 0 {
		return res
	}
	res.Span = Gap{From: ops[0].Send, To: ops[0].Reply}
	sends := make([]stamp, 0, len(ops))
	replies := make([]stamp, 0, len(ops))
	los := make([]stamp, 0, len(ops))
	for i, o := range ops {
		res.Span.From = min(res.Span.From, o.Send)
		res.Span.To = max(res.Span.To, o.Reply)
		if !o.OK() {
			res.Errors[o.Err]++
			continue
		}
		res.OK++
		sends = append(sends, stamp{o.Send, int32(i)})
		replies = append(replies, stamp{o.Reply, int32(i)})
		los = append(los, stamp{o.Lo(), int32(i)})
	}
	slices.SortFunc(sends, byTime)
	slices.SortFunc(replies, byTime)
	slices.SortFunc(los, byTime)
	res.Duplicates, res.FirstDups = duplicates(ops, los)
	res.Violations, res.FirstViols = violations(ops, sends, replies)
	res.LongestGap = longestGap(res.Span, replies)
	return res
}

// duplicates walks the replies by their lowest ID: one overlaps an earlier one when it
// starts at or below the highest ID seen so far.
func duplicates(ops []Op, los []stamp) (n int, first []Duplicate) {
	top := -1 // index into ops of the reply with the highest ID so far
	for _, s := range los {
		o := ops[s.i]
		if top >= 0 && o.Lo() <= ops[top].Value {
			n++
			if len(first) < Examples {
				first = append(first, Duplicate{ID: o.Lo(), A: ops[top], B: o})
			}
		}
		if top < 0 || o.Value > ops[top].Value {
			top = int(s.i)
		}
	}
	return n, first
}

// violations sweeps the replies by send time: before each op's send, every reply received
// strictly earlier joins a running maximum, and the op's lowest ID must be above it. A
// client's own earlier ops are before its later ones whatever their stamps say (two stamps
// of a coarse clock may be equal), so each op is also compared with its client's previous
// successful op. An op counts once, with the higher of the two witnesses.
func violations(ops []Op, sends, replies []stamp) (n int, first []Violation) {
	witness := make(map[int32]int32) // op -> the reply it is not above
	top, j := int32(-1), 0           // top: the highest reply received so far
	for _, s := range sends {
		for j < len(replies) && replies[j].t < s.t {
			if r := replies[j].i; top < 0 || ops[r].Value > ops[top].Value {
				top = r
			}
			j++
		}
		if top >= 0 && ops[s.i].Lo() <= ops[top].Value {
			witness[s.i] = top
		}
	}
	bySeq := make([]stamp, 0, len(sends)) // by client, then the client's order
	for i, o := range ops {
		if o.OK() {
			bySeq = append(bySeq, stamp{int64(o.Client)<<32 | int64(o.Seq), int32(i)})
		}
	}
	if !slices.IsSortedFunc(bySeq, byTime) { // a Recorder's ops are in this order already
		slices.SortFunc(bySeq, byTime)
	}
	for k := 1; k < len(bySeq); k++ {
		p, o := bySeq[k-1].i, bySeq[k].i
		if ops[p].Client != ops[o].Client || ops[o].Lo() > ops[p].Value {
			continue
		}
		if w, ok := witness[o]; !ok || ops[p].Value > ops[w].Value {
			witness[o] = p
		}
	}
	for _, s := range sends {
		if w, ok := witness[s.i]; ok {
			n++
			if len(first) < Examples {
				first = append(first, Violation{Op: ops[s.i], Before: ops[w]})
			}
		}
	}
	return n, first
}

// longestGap is the longest window of span with no successful reply: before the first,
// between two, or after the last.
func longestGap(span Gap, replies []stamp) Gap {
	if len(replies) == 0 {
		return span
	}
	best := Gap{From: span.From, To: replies[0].t}
	for k := 1; k < len(replies); k++ {
		if g := (Gap{From: replies[k-1].t, To: replies[k].t}); g.Len() > best.Len() {
			best = g
		}
	}
	if g := (Gap{From: replies[len(replies)-1].t, To: span.To}); g.Len() > best.Len() {
		best = g
	}
	return best
}

// LongestGap is the longest window within [from, to] (the Recorder's clock) with no
// successful reply among ops: the unavailability around a fault.
func LongestGap(ops []Op, from, to int64) Gap {
	var replies []stamp
	for i, o := range ops {
		if o.OK() && o.Reply >= from && o.Reply <= to {
			replies = append(replies, stamp{o.Reply, int32(i)})
		}
	}
	slices.SortFunc(replies, byTime)
	return longestGap(Gap{From: from, To: to}, replies)
}
