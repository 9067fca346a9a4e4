package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// span is a part of a range of IDs leased by one INCRBY: [base+1, base+size]. Each take adds
// one to taken; the taker whose count n is in [1, size] owns base+n, so no value is handed out
// twice however many goroutines take at once. A span is never reused: a new part is a new
// span, published by pointer, so a taker's count, bound and base always come from the same
// span. A count never wraps: it starts at 0 and grows by one per take.
//
// A range is split in two spans at its first tenth: the head, then the tail. The switch from
// the head to the tail, which the lock orders, starts the fetch of the next range, so a take
// is only the add and the compare with size (no take count is special). A range too small to
// have a head is one span, the tail.
//
// The fields a take reads (name, base, size) never change; taken, which every take writes, is
// alone on its cache line, so takers on other cores read those fields from their own caches
// and the line that moves between cores is only the counter's.
type span struct {
	name       string // the tag's name, so that Next checks the hot range with one load
	tag        *Tag   // the tag's buffer
	base, size int64  // base is the first ID less one: a take returns base+n
	tail       *span  // the rest of the range after this head; nil in a tail
	_          [cacheLine - 48]byte
	taken      atomic.Int64
	_          [cacheLine - 8]byte
}

// noSpan is the range of a tag or client that has none (before the first fetch, after
// Close): no take succeeds on it (its size is 0), so the fast paths need no nil check. Only
// takes that go on to the slow path write its counter, one each (NextN skips it), so it
// cannot wrap either.
var noSpan = &span{}

// cacheLine is the size of a cache line (amd64, arm64) that span keeps taken alone on. A span
// is two lines, 128 bytes: the allocator's class of that size starts each one on a line.
const cacheLine = 64

// newSpans splits the range [lo, lo+size) into its head (the takes before the first tenth
// of the range) and its tail, and returns the first of them.
func (t *Tag) newSpans(lo, size int64) *span {
	tail := &span{name: t.name, tag: t, base: lo - 1, size: size}
	head := max(1, size/10) - 1
	if head == 0 {
		return tail
	}
	tail.base, tail.size = lo-1+head, size-head
	return &span{name: t.name, tag: t, base: lo - 1, size: head, tail: tail}
}

type kind int8

const (
	kindUnknown kind = iota // IDS.INFO not read yet
	kindPlain
	kindOrdered
	kindShaped
)

// call is one fetch in flight; done is closed when it ended, err is its outcome.
type call struct {
	done chan struct{}
	err  error
}

// errOrdered tells the take loop that the tag is ORDERED: every ID is a request.
var errOrdered = errors.New("ordered")

// Tag is the buffer of one tag of a Client: its current range (read without a lock) and the
// next one. Client.Tag returns it; its Next is Client.Next without the check of the tag's
// name. A Tag is safe for concurrent use and lasts as long as its Client.
type Tag struct {
	c    *Client
	name string
	cur  atomic.Pointer[span]

	mu       sync.Mutex
	kind     kind
	shaped   error // the ErrShaped of a shaped tag
	next     *span
	fetch    *call         // the fetch in flight, nil when none
	batch    int64         // size of the next INCRBY
	maxCount int64         // the server's max_incrby last read (0: not read)
	lastAt   time.Duration // when the previous fetch began (client clock), 0 before the first
	fetches  int64
}

// Next returns the next ID of tag from the local buffer, fetching a range first when none is
// ready. The error is an *Error and never comes with an ID.
//
// The steady state is one load of the hot range, a compare of the tag's length and string
// pointer with the range's name, one atomic add and one compare; everything else, a tag
// passed as an equal string at another address included, is in nextSlow, its only call.
func (c *Client) Next(ctx context.Context, tag string) (int64, error) {
	s := c.hot.Load()
	if len(s.name) == len(tag) && unsafe.StringData(s.name) == unsafe.StringData(tag) {
		if n := s.taken.Add(1); n <= s.size {
			return s.base + n, nil
		}
	}
	return c.nextSlow(ctx, tag)
}

// nextSlow is Next past the steady state: the tag is the hot range's as an equal string at
// another address, or the hot range is used up or another tag's.
func (c *Client) nextSlow(ctx context.Context, tag string) (int64, error) {
	if s := c.hot.Load(); s.name == tag {
		if n := s.taken.Add(1); n <= s.size {
			return s.base + n, nil
		}
	}
	return c.lookup(tag).take(ctx)
}

// Tag returns the buffer of tag, for callers that take many IDs of one tag: its Next skips
// the check of the name that Client.Next makes.
func (c *Client) Tag(tag string) *Tag {
	return c.lookup(tag)
}

// Name is the tag's name.
func (t *Tag) Name() string { return t.name }

// Next returns the next ID of the tag, as Client.Next does.
func (t *Tag) Next(ctx context.Context) (int64, error) {
	s := t.cur.Load()
	if n := s.taken.Add(1); n <= s.size {
		return s.base + n, nil
	}
	return t.take(ctx)
}

// NextN returns n distinct IDs of the tag in increasing order, as Client.NextN does.
func (t *Tag) NextN(ctx context.Context, n int) ([]int64, error) {
	return t.nextN(ctx, n)
}

// MaxNextN is the largest count NextN takes in one call.
const MaxNextN = 1 << 20

// NextN returns n distinct IDs of tag in increasing order.
func (c *Client) NextN(ctx context.Context, tag string, n int) ([]int64, error) {
	return c.lookup(tag).nextN(ctx, n)
}

func (t *Tag) nextN(ctx context.Context, n int) ([]int64, error) {
	if n < 1 || n > MaxNextN {
		return nil, &Error{Code: "LIMIT", Msg: fmt.Sprintf("LIMIT NextN count %d: must be between 1 and %d", n, MaxNextN)}
	}
	out := make([]int64, 0, n)
	for len(out) < n {
		// noSpan is skipped: a count of up to MaxNextN per call must not grow its counter.
		if s := t.cur.Load(); s != noSpan {
			want := int64(n - len(out))
			end := s.taken.Add(want)
			if begin := end - want; begin < s.size {
				hi := min(end, s.size)
				for k := begin + 1; k <= hi; k++ {
					out = append(out, s.base+k)
				}
				continue
			}
		}
		if err := t.advance(ctx); err != nil {
			if err != errOrdered {
				return nil, err
			}
			return t.orderedN(ctx, out, n)
		}
	}
	if !slices.IsSorted(out) { // ranges of two instances after a failover
		slices.Sort(out)
	}
	return out, nil
}

// orderedN completes out with INCRBY of the ordered tag: one contiguous range.
func (t *Tag) orderedN(ctx context.Context, out []int64, n int) ([]int64, error) {
	want := int64(n - len(out))
	r, err := t.c.doInt(ctx, "INCRBY", t.name, want)
	if err != nil {
		return nil, err
	}
	for v := r - want + 1; v <= r; v++ {
		out = append(out, v)
	}
	return out, nil
}

// lookup returns the tag's buffer, creating it on first use.
func (c *Client) lookup(tag string) *Tag {
	t := (*c.tags.Load())[tag]
	if t == nil {
		c.mu.Lock()
		old := *c.tags.Load()
		if t = old[tag]; t == nil {
			t = &Tag{c: c, name: tag, batch: c.opt.MinBatch}
			t.cur.Store(noSpan)
			m := make(map[string]*Tag, len(old)+1)
			for k, v := range old {
				m[k] = v
			}
			m[tag] = t
			c.tags.Store(&m)
		}
		c.mu.Unlock()
	}
	return t
}

// take is Next past its fast path: a take from the current range, and when it is used up
// the switch to the next range or the wait for a fetch; ordered tags ask the server every
// time. The range taken from becomes the client's hot range.
func (t *Tag) take(ctx context.Context) (int64, error) {
	for {
		s := t.cur.Load()
		if n := s.taken.Add(1); n <= s.size {
			t.c.hot.Store(s)
			return s.base + n, nil
		}
		if err := t.advance(ctx); err != nil {
			if err == errOrdered {
				return t.c.doInt(ctx, "INCR", t.name)
			}
			return 0, err
		}
	}
}

// advance makes a range with IDs left current: it returns nil once one may be, the fetch's
// error when the fetch it waited for failed, errOrdered for an ordered tag.
func (t *Tag) advance(ctx context.Context) error {
	t.mu.Lock()
	if t.c.closed.Load() {
		t.mu.Unlock()
		return ErrClosed
	}
	switch t.kind {
	case kindShaped:
		t.mu.Unlock()
		return t.shaped
	case kindOrdered:
		t.mu.Unlock()
		return errOrdered
	}
	cur := t.cur.Load()
	if cur.taken.Load() < cur.size {
		t.mu.Unlock()
		return nil
	}
	if cur.tail != nil {
		t.currentLocked(cur.tail)
		t.mu.Unlock()
		return nil
	}
	if s := t.next; s != nil {
		t.next = nil
		t.currentLocked(s)
		t.mu.Unlock()
		return nil
	}
	f := t.startLocked()
	t.mu.Unlock()
	if f == nil {
		return ErrClosed
	}
	t.c.waits.Add(1)
	if err := wait(ctx, f.done); err != nil {
		return err
	}
	return f.err
}

// currentLocked makes s the current range. A tail becoming current starts the fetch of the
// next range unless it is held or on its way: the rest of the range and the next one are
// then taken without waiting. t.mu is held.
func (t *Tag) currentLocked(s *span) {
	t.cur.Store(s)
	if s.tail == nil && t.next == nil {
		t.startLocked()
	}
}

// startLocked returns the fetch in flight, or starts one; nil after Close. t.mu is held.
func (t *Tag) startLocked() *call {
	if t.fetch != nil {
		return t.fetch
	}
	f := &call{done: make(chan struct{})}
	if !t.c.spawn(func() { t.run(f) }) {
		return nil
	}
	t.fetch = f
	return f
}

// run is one background fetch: it leases a range and publishes it as the next one.
func (t *Tag) run(f *call) {
	s, err := t.fetchSpan(t.c.ctx)
	t.mu.Lock()
	f.err = err
	t.fetch = nil
	if err == nil && s != nil && !t.c.closed.Load() {
		t.next = s // advance makes it current once the current one is used up
	}
	t.mu.Unlock()
	close(f.done)
}

// fetchSpan learns the tag's kind on first use and leases the next range with INCRBY; nil
// without error for an ordered tag.
func (t *Tag) fetchSpan(ctx context.Context) (*span, error) {
	t.mu.Lock()
	k := t.kind
	t.mu.Unlock()
	if k == kindUnknown {
		var err error
		if k, err = t.learn(ctx); err != nil {
			return nil, err
		}
	}
	switch k {
	case kindShaped:
		return nil, t.shaped
	case kindOrdered:
		return nil, nil
	}
	n := t.size()
	for {
		r, err := t.c.doInt(ctx, "INCRBY", t.name, n)
		if err == nil {
			return t.newSpans(r-n+1, n), nil
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != "LIMIT" || n <= 1 {
			return nil, err
		}
		// More than the server serves contiguously now: take what it says it can.
		m, ierr := t.c.info(ctx, t.name)
		if ierr != nil {
			return nil, ierr
		}
		mc, _ := m["max_incrby"].(int64)
		n = max(1, min(n/2, mc))
		t.mu.Lock()
		t.maxCount = n
		t.batch = n
		t.mu.Unlock()
	}
}

// learn reads IDS.INFO once: a shaped tag is refused, an ordered one is not buffered, and
// max_incrby bounds the first range. An unknown tag is plain (INCRBY creates it where the
// server creates tags on first use, or answers NOTAG).
func (t *Tag) learn(ctx context.Context) (kind, error) {
	m, err := t.c.info(ctx, t.name)
	k := kindPlain
	switch {
	case errors.Is(err, ErrNoTag):
	case err != nil:
		return kindUnknown, err
	case m["format"] != nil:
		k = kindShaped
	case m["ordered"] == int64(1):
		k = kindOrdered
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.kind = k
	if k == kindShaped {
		t.shaped = &Error{Code: "SHAPED", Msg: fmt.Sprintf("SHAPED tag '%s' has an ID shape: its IDs are strings from IDS.NEXT, which this client does not buffer", t.name)}
	}
	if mc, ok := m["max_incrby"].(int64); ok && mc > 0 {
		t.maxCount = mc
	}
	return k, nil
}

// size is the count of the next INCRBY: Leaf's dynamic step on the client. Ranges that last
// less than BatchTarget double it, more than twice that halve it; it stays within the
// options and what the server last said it serves contiguously (tried above that every
// eighth fetch, as the server's own step grows with the load).
func (t *Tag) size() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.c.now()
	o := &t.c.opt
	if t.lastAt != 0 {
		switch lasted := now - t.lastAt; {
		case lasted < o.BatchTarget:
			t.batch *= 2
		case lasted > 2*o.BatchTarget:
			t.batch /= 2
		}
	}
	t.lastAt = now
	t.batch = min(max(t.batch, o.MinBatch), o.MaxBatch)
	t.fetches++
	n := t.batch
	if t.maxCount > 0 && n > t.maxCount && t.fetches%8 != 0 {
		n = max(t.maxCount, 1)
	}
	return n
}

// spawn runs f on a goroutine that Close waits for; false after Close.
func (c *Client) spawn(f func()) bool {
	c.goMu.RLock()
	defer c.goMu.RUnlock()
	if c.closed.Load() {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}
