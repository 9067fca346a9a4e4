package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// batch is one IDS.SNOWFLAKE reply. Like a span, each take adds one to taken and owns the
// ID at that count; none is handed out after deadline (SnowflakeMaxAge after its request
// was sent, on the client's monotonic clock).
type batch struct {
	ids      []int64
	size     int64
	warn     int64
	taken    atomic.Int64
	deadline time.Duration
}

// fresh reports whether b has IDs left and may still hand them out at now.
func (b *batch) fresh(now time.Duration) bool {
	return b.taken.Load() < b.size && now <= b.deadline
}

// snowBuf is the client's current batch of snowflake IDs and the next one.
type snowBuf struct {
	c   *Client
	cur atomic.Pointer[batch]

	mu       sync.Mutex
	next     *batch
	fetch    *call
	batch    int // count of the next IDS.SNOWFLAKE
	maxCount int // the server's --max-batch as learned from a LIMIT (0: not seen)
}

// Snowflake returns a snowflake ID from the local batch, fetching one first when none is
// fresh. The ID's timestamp is at most Options.SnowflakeMaxAge old when it is returned.
func (c *Client) Snowflake(ctx context.Context) (int64, error) {
	sb := c.sf
	for {
		if b := sb.cur.Load(); b != nil {
			if n := b.taken.Add(1); n <= b.size && c.now() <= b.deadline {
				if n == b.warn {
					sb.prefetch()
				}
				return b.ids[n-1], nil
			}
		}
		if err := sb.advance(ctx); err != nil {
			return 0, err
		}
	}
}

// advance makes a fresh batch current, waiting for a fetch when none is.
func (sb *snowBuf) advance(ctx context.Context) error {
	sb.mu.Lock()
	if sb.c.closed.Load() {
		sb.mu.Unlock()
		return ErrClosed
	}
	now := sb.c.now()
	if b := sb.cur.Load(); b != nil && b.fresh(now) {
		sb.mu.Unlock()
		return nil
	}
	if b := sb.cur.Load(); b != nil {
		if b.taken.Load() < b.size {
			// It aged out with IDs left: the rate is below what its size assumed.
			sb.batch = max(1, sb.batch/2)
		} else {
			// Used up before it aged: the rate can take a larger batch.
			sb.batch = min(2*sb.batch, sb.c.opt.SnowflakeBatch)
		}
		sb.cur.Store(nil) // judged once; a take on nil goes straight here
	}
	if sb.next != nil {
		b := sb.next
		sb.next = nil
		if b.fresh(now) {
			sb.cur.Store(b)
			sb.mu.Unlock()
			return nil
		}
	}
	f := sb.startLocked()
	sb.mu.Unlock()
	if f == nil {
		return ErrClosed
	}
	if err := wait(ctx, f.done); err != nil {
		return err
	}
	return f.err
}

func (sb *snowBuf) prefetch() {
	sb.mu.Lock()
	if sb.next == nil {
		sb.startLocked()
	}
	sb.mu.Unlock()
}

func (sb *snowBuf) startLocked() *call {
	if sb.fetch != nil {
		return sb.fetch
	}
	f := &call{done: make(chan struct{})}
	if !sb.c.spawn(func() { sb.run(f) }) {
		return nil
	}
	sb.fetch = f
	return f
}

func (sb *snowBuf) run(f *call) {
	b, err := sb.fetchBatch(sb.c.ctx)
	sb.mu.Lock()
	if err == nil && !sb.c.closed.Load() {
		if cur := sb.cur.Load(); cur == nil || !cur.fresh(sb.c.now()) {
			sb.cur.Store(b)
		} else {
			sb.next = b
		}
	}
	f.err = err
	sb.fetch = nil
	sb.mu.Unlock()
	close(f.done)
}

// fetchBatch asks for the next batch. Its deadline counts from the send: every ID in the
// reply was made after that moment.
func (sb *snowBuf) fetchBatch(ctx context.Context) (*batch, error) {
	sb.mu.Lock()
	n := sb.batch
	if sb.maxCount > 0 {
		n = min(n, sb.maxCount)
	}
	sb.batch = max(1, n)
	sb.mu.Unlock()
	for {
		sent := sb.c.now()
		v, err := sb.c.do(ctx, "IDS.SNOWFLAKE", n)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Code == "LIMIT" && n > 1 {
				n /= 2
				sb.mu.Lock()
				sb.maxCount, sb.batch = n, n
				sb.mu.Unlock()
				continue
			}
			return nil, err
		}
		a, ok := v.([]any)
		if !ok || len(a) == 0 {
			return nil, &Error{Code: "PROTOCOL", Msg: fmt.Sprintf("PROTOCOL IDS.SNOWFLAKE %d answered %T", n, v)}
		}
		ids := make([]int64, len(a))
		for i, x := range a {
			if ids[i], ok = x.(int64); !ok {
				return nil, &Error{Code: "PROTOCOL", Msg: fmt.Sprintf("PROTOCOL IDS.SNOWFLAKE element %T, want an integer", x)}
			}
		}
		b := &batch{ids: ids, size: int64(len(ids)), warn: max(1, int64(len(ids))/2), deadline: sent + sb.c.opt.SnowflakeMaxAge}
		return b, nil
	}
}

// drop forgets every buffered snowflake ID (Close).
func (sb *snowBuf) drop() {
	sb.mu.Lock()
	sb.cur.Store(nil)
	sb.next = nil
	sb.mu.Unlock()
}
