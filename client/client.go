package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configure a Client. A zero field takes its default.
type Options struct {
	// Addrs are leafd instances sharing one store; requests go to one at a time and move to
	// the next when it is unreachable or cannot serve. At least one.
	Addrs    []string
	Username string
	Password string
	// Timeout bounds one request to one address. Default 2s.
	Timeout time.Duration
	// PoolSize is the connections per address. Default 4.
	PoolSize int

	// MinBatch and MaxBatch bound the size of a range of a tag. Defaults 100 and 1,000,000.
	MinBatch, MaxBatch int64
	// BatchTarget is how long a range should last: its size doubles while a range lasts less,
	// halves while it lasts more than twice that. Default 1s.
	BatchTarget time.Duration

	// SnowflakeMaxAge is how long after its request was sent a batch of snowflake IDs may be
	// handed out; an ID is never older than this when Snowflake returns it. Default 100ms.
	SnowflakeMaxAge time.Duration
	// SnowflakeBatch is the largest IDS.SNOWFLAKE count asked for (the server's --max-batch
	// bounds it too). Default 1000.
	SnowflakeBatch int
}

func (o *Options) setDefaults() error {
	if len(o.Addrs) == 0 {
		return &Error{Code: "CONFIG", Msg: "CONFIG client.Options.Addrs is empty: name at least one leafd address"}
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 4
	}
	if o.MinBatch <= 0 {
		o.MinBatch = 100
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 1_000_000
	}
	if o.MaxBatch < o.MinBatch {
		return &Error{Code: "CONFIG", Msg: fmt.Sprintf("CONFIG client.Options.MaxBatch %d is below MinBatch %d", o.MaxBatch, o.MinBatch)}
	}
	if o.BatchTarget <= 0 {
		o.BatchTarget = time.Second
	}
	if o.SnowflakeMaxAge <= 0 {
		o.SnowflakeMaxAge = 100 * time.Millisecond
	}
	if o.SnowflakeBatch <= 0 {
		o.SnowflakeBatch = 1000
	}
	return nil
}

// Client hands out IDs from local buffers refilled from leafd. It is safe for concurrent
// use; Close releases it.
type Client struct {
	opt   Options
	conns []*redis.Client
	at    atomic.Int64 // index of the address requests go to first

	hot  atomic.Pointer[span]            // the range of the latest slow Next: Next's one load
	tags atomic.Pointer[map[string]*Tag] // copy on write, under mu
	mu   sync.Mutex

	sf *snowBuf

	start  time.Time
	now    func() time.Duration // monotonic time since start; a seam for tests
	ctx    context.Context      // ends at Close: background fetches stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // background fetches
	goMu   sync.RWMutex   // orders spawn's wg.Add before Close's wg.Wait
	closed atomic.Bool
	waits  atomic.Int64 // takes that waited for a fetch (none in steady state)
}

// New returns a client of the leafd instances in opt.Addrs. It connects lazily: an
// unreachable address shows at the first request.
func New(opt Options) (*Client, error) {
	if err := opt.setDefaults(); err != nil {
		return nil, err
	}
	c := &Client{opt: opt, start: time.Now()}
	c.now = func() time.Duration { return time.Since(c.start) }
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for _, a := range opt.Addrs {
		c.conns = append(c.conns, redis.NewClient(&redis.Options{
			Addr: a, Username: opt.Username, Password: opt.Password, Protocol: 2,
			DialTimeout: opt.Timeout, ReadTimeout: opt.Timeout, WriteTimeout: opt.Timeout,
			PoolSize: opt.PoolSize, MaxRetries: -1, DisableIdentity: true,
		}))
	}
	m := map[string]*Tag{}
	c.tags.Store(&m)
	c.hot.Store(noSpan)
	c.sf = &snowBuf{c: c, batch: min(100, opt.SnowflakeBatch)}
	return c, nil
}

// Close stops the background fetches and closes the connections. What was fetched and not
// handed out is a gap. Calls after Close return ErrClosed.
func (c *Client) Close() error {
	c.goMu.Lock()
	was := c.closed.Swap(true)
	c.goMu.Unlock()
	if was {
		return nil
	}
	c.cancel()
	c.wg.Wait()
	// Nothing buffered is handed out after Close: a take finds no range and answers CLOSED.
	c.hot.Store(noSpan)
	for _, t := range *c.tags.Load() {
		t.mu.Lock()
		t.cur.Store(noSpan)
		t.next = nil
		t.mu.Unlock()
	}
	c.sf.drop()
	var errs []error
	for _, r := range c.conns {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// do sends one command, to the current address first and then to the others in turn while
// an address is unreachable or answers that it cannot serve now. The error is an *Error.
func (c *Client) do(ctx context.Context, args ...any) (any, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	first := c.at.Load()
	var last error
	for i := range int64(len(c.conns)) {
		at := (first + i) % int64(len(c.conns))
		rctx, cancel := context.WithTimeout(ctx, c.opt.Timeout)
		v, err := c.conns[at].Do(rctx, args...).Result()
		cancel()
		if err == nil {
			c.at.CompareAndSwap(first, at)
			return v, nil
		}
		if e, ok := replyError(err); ok {
			if !failover(e) {
				return nil, e
			}
			last = e
		} else {
			last = &Error{Code: "UNAVAILABLE", Msg: fmt.Sprintf("UNAVAILABLE leafd at %s unreachable: %v", c.opt.Addrs[at], err)}
		}
		if ctx.Err() != nil {
			break
		}
	}
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if ctx.Err() != nil {
		return nil, &Error{Code: "UNAVAILABLE", Msg: fmt.Sprintf("UNAVAILABLE gave up: %v (last: %v)", ctx.Err(), last)}
	}
	return nil, last
}

// doInt is do for a command whose reply is an integer.
func (c *Client) doInt(ctx context.Context, args ...any) (int64, error) {
	v, err := c.do(ctx, args...)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, &Error{Code: "PROTOCOL", Msg: fmt.Sprintf("PROTOCOL %v answered %T, want an integer", args[0], v)}
	}
	return n, nil
}

// info reads a tag's IDS.INFO as field -> value (RESP2: a flat array of pairs).
func (c *Client) info(ctx context.Context, tag string) (map[string]any, error) {
	v, err := c.do(ctx, "IDS.INFO", tag)
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok {
		return nil, &Error{Code: "PROTOCOL", Msg: fmt.Sprintf("PROTOCOL IDS.INFO answered %T, want an array", v)}
	}
	m := make(map[string]any, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		if k, ok := a[i].(string); ok {
			m[k] = a[i+1]
		}
	}
	return m, nil
}

// wait blocks until done is closed or ctx ends.
func wait(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return &Error{Code: "UNAVAILABLE", Msg: fmt.Sprintf("UNAVAILABLE no ID before the deadline: %v", ctx.Err())}
	}
}
