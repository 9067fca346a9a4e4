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

// span is a range of IDs leased by one INCRBY: [lo, lo+size). Each take adds one to taken;
// the taker whose count is in [1, size] owns lo+count-1, so no value is handed out twice
// however many goroutines take at once. A span is never reused: a new range is a new span,
// published by pointer, so a taker's count and bound always come from the same range.
type span struct {
	name     string  // the tag's name, so that Next checks the hot range with one load
	tag      *tagBuf // the tag's buffer
	lo, size int64
	warn     int64 // the take count whose taker starts the next fetch
	taken    atomic.Int64
}

func (t *tagBuf) newSpan(lo, size int64) *span {
	return &span{name: t.name, tag: t, lo: lo, size: size, warn: max(1, size/10)}
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

// tagBuf is one tag's current range (read without a lock) and the next one.
type tagBuf struct {
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
// It is small enough to inline: the steady state is one load of the hot range, a compare of
// the tag and one atomic add; everything else is in nextSlow.
func (c *Client) Next(ctx context.Context, tag string) (int64, error) {
	s := c.hot.Load()
	var n int64
	if s != nil && sameString(s.name, tag) {
		if n = s.taken.Add(1); n != s.warn && n <= s.size {
			return s.lo + n - 1, nil
		}
	}
	return c.nextSlow(ctx, tag, s, n)
}

// sameString is a == b, without the call of the runtime's compare when both are the same
// string (a caller passing the same literal or variable every time).
func sameString(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// nextSlow is Next past the steady state: n > 0 is a take of count n from the hot range s
// that was its warn point (start the next fetch) or past its end; n == 0, a tag whose range
// is not the hot one.
func (c *Client) nextSlow(ctx context.Context, tag string, s *span, n int64) (int64, error) {
	if n > 0 {
		if n <= s.size {
			s.tag.prefetch()
			return s.lo + n - 1, nil
		}
		return s.tag.slow(ctx)
	}
	t := c.lookup(tag)
	if s := t.cur.Load(); s != nil {
		if n := s.taken.Add(1); n <= s.size {
			if n == s.warn {
				t.prefetch()
			}
			c.hot.Store(s)
			return s.lo + n - 1, nil
		}
	}
	return t.slow(ctx)
}

// MaxNextN is the largest count NextN takes in one call.
const MaxNextN = 1 << 20

// NextN returns n distinct IDs of tag in increasing order.
func (c *Client) NextN(ctx context.Context, tag string, n int) ([]int64, error) {
	if n < 1 || n > MaxNextN {
		return nil, &Error{Code: "LIMIT", Msg: fmt.Sprintf("LIMIT NextN count %d: must be between 1 and %d", n, MaxNextN)}
	}
	t := c.lookup(tag)
	out := make([]int64, 0, n)
	for len(out) < n {
		if s := t.cur.Load(); s != nil {
			want := int64(n - len(out))
			end := s.taken.Add(want)
			if begin := end - want; begin < s.size {
				hi := min(end, s.size)
				for k := begin + 1; k <= hi; k++ {
					out = append(out, s.lo+k-1)
				}
				if begin < s.warn && s.warn <= hi {
					t.prefetch()
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
func (t *tagBuf) orderedN(ctx context.Context, out []int64, n int) ([]int64, error) {
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
func (c *Client) lookup(tag string) *tagBuf {
	t := (*c.tags.Load())[tag]
	if t == nil {
		c.mu.Lock()
		old := *c.tags.Load()
		if t = old[tag]; t == nil {
			t = &tagBuf{c: c, name: tag, batch: c.opt.MinBatch}
			m := make(map[string]*tagBuf, len(old)+1)
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

// slow is Next when the current range is used up: switch to the next range, or wait for a
// fetch; ordered tags ask the server every time.
func (t *tagBuf) slow(ctx context.Context) (int64, error) {
	for {
		if err := t.advance(ctx); err != nil {
			if err == errOrdered {
				return t.c.doInt(ctx, "INCR", t.name)
			}
			return 0, err
		}
		if s := t.cur.Load(); s != nil {
			if n := s.taken.Add(1); n <= s.size {
				if n == s.warn {
					t.prefetch()
				}
				t.c.hot.Store(s)
				return s.lo + n - 1, nil
			}
		}
	}
}

// advance makes a range with IDs left current: it returns nil once one may be, the fetch's
// error when the fetch it waited for failed, errOrdered for an ordered tag.
func (t *tagBuf) advance(ctx context.Context) error {
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
	if s := t.cur.Load(); s != nil && s.taken.Load() < s.size {
		t.mu.Unlock()
		return nil
	}
	if t.next != nil {
		t.cur.Store(t.next)
		t.next = nil
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

// prefetch starts the fetch of the next range unless one is held or on its way.
func (t *tagBuf) prefetch() {
	t.mu.Lock()
	if t.next == nil && t.kind != kindShaped && t.kind != kindOrdered {
		t.startLocked()
	}
	t.mu.Unlock()
}

// startLocked returns the fetch in flight, or starts one; nil after Close. t.mu is held.
func (t *tagBuf) startLocked() *call {
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

// run is one background fetch: it leases a range and publishes it as the current range (when
// the current one is used up) or as the next.
func (t *tagBuf) run(f *call) {
	s, err := t.fetchSpan(t.c.ctx)
	t.mu.Lock()
	if err == nil && s != nil && !t.c.closed.Load() {
		if cur := t.cur.Load(); cur == nil || cur.taken.Load() >= cur.size {
			t.cur.Store(s)
		} else {
			t.next = s
		}
	}
	f.err = err
	t.fetch = nil
	t.mu.Unlock()
	close(f.done)
}

// fetchSpan learns the tag's kind on first use and leases the next range with INCRBY; nil
// without error for an ordered tag.
func (t *tagBuf) fetchSpan(ctx context.Context) (*span, error) {
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
			return t.newSpan(r-n+1, n), nil
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
func (t *tagBuf) learn(ctx context.Context) (kind, error) {
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
func (t *tagBuf) size() int64 {
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
