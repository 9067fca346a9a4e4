package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// client is one connection and what it measured. Only its own goroutine touches it until the
// run has waited for it.
type client struct {
	addr string
	nc   net.Conn
	rd   *Reader
	req  []byte // Pipeline copies of the request (one tag)
	one  int    // length of one request in req

	tagReqs [][]byte // with Tags > 1: the request of each tag, shared read-only
	nextTag int      // with Tags > 1: the tag of the next request
	batch   []byte   // with Tags > 1: the requests of the current pipeline

	rc *redis.Client // with ClientGoRedis

	hist     *Histogram
	requests int64 // measured requests answered (errors included)
	ids      int64 // IDs received in measured requests
	errs     int64 // error replies
	firstErr string

	check *connCheck // nil without Check
	err   error      // what ended the connection early
}

// Run runs the load described by cfg and returns what it measured. It returns an error when
// the configuration is invalid or a connection cannot be opened; a connection that fails
// during the run ends early and its error is reported in the Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	one := encode(cfg.args())
	req := bytes.Repeat(one, cfg.Pipeline)
	var tagReqs [][]byte
	if cfg.Tags > 1 {
		tagReqs = make([][]byte, cfg.Tags)
		for i := range tagReqs {
			tagReqs[i] = encode(cfg.argsFor(cfg.tagName(i)))
		}
	}
	if cfg.Client == ClientGoRedis {
		return runGoRedis(ctx, cfg)
	}

	clients := make([]*client, cfg.Clients)
	closeAll := func() {
		for _, c := range clients {
			if c != nil && c.nc != nil {
				_ = c.nc.Close()
			}
		}
	}
	d := net.Dialer{Timeout: cfg.DialTimeout}
	for i := range clients {
		addr := cfg.Addrs[i%len(cfg.Addrs)]
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("bench: connection %d to %s: %w", i, addr, err)
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		c := &client{addr: addr, nc: nc, rd: NewReader(nc, 64<<10), req: req, one: len(one), hist: NewHistogram()}
		if tagReqs != nil {
			c.tagReqs = tagReqs
			c.nextTag = i * cfg.Tags / cfg.Clients
		}
		if cfg.Check {
			c.check = &connCheck{}
		}
		clients[i] = c
	}
	defer closeAll()

	// Cancellation wakes every connection blocked in I/O.
	stopWatch := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		select {
		case <-ctx.Done():
			for _, c := range clients {
				_ = c.nc.SetDeadline(time.Unix(1, 0))
			}
		case <-stopWatch:
		}
	}()
	defer func() { close(stopWatch); watch.Wait() }()

	if tagReqs != nil {
		if err := prime(clients, cfg); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}

	begin := time.Now()
	measureFrom := begin.Add(cfg.Warmup)
	var deadline time.Time // zero in count mode
	if cfg.Requests <= 0 {
		deadline = measureFrom.Add(cfg.Duration)
	}
	var budget atomic.Int64
	budget.Store(cfg.Requests)
	var lastDone atomic.Int64 // unix ns when the last connection finished
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.err = c.run(cfg, measureFrom, deadline, &budget)
			end := time.Now().UnixNano()
			for {
				old := lastDone.Load()
				if end <= old || lastDone.CompareAndSwap(old, end) {
					break
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Unix(0, lastDone.Load()).Sub(measureFrom)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return newResult(cfg, clients, elapsed), nil
}

// take reserves up to p requests from the shared budget of a count-limited run.
func take(budget *atomic.Int64, p int) int {
	rem := budget.Add(-int64(p))
	if rem >= 0 {
		return p
	}
	if rem > -int64(p) {
		return p + int(rem)
	}
	return 0
}

// run sends batches until the deadline or the end of the budget.
func (c *client) run(cfg Config, measureFrom, deadline time.Time, budget *atomic.Int64) error {
	var armed time.Time
	scratch := make([]int64, 0, cfg.Batch)
	for {
		start := time.Now()
		measured := !start.Before(measureFrom)
		if !deadline.IsZero() && !start.Before(deadline) {
			return nil
		}
		n := cfg.Pipeline
		if deadline.IsZero() && measured {
			if n = take(budget, n); n == 0 {
				return nil
			}
		}
		// Deadlines cost a timer update; push them forward at most once a second.
		if start.Sub(armed) > time.Second {
			armed = start
			if err := c.nc.SetDeadline(start.Add(cfg.Timeout)); err != nil {
				return err
			}
		}
		out := c.req[:n*c.one]
		if c.tagReqs != nil {
			out = c.nextBatch(n)
		}
		if _, err := c.nc.Write(out); err != nil {
			return err
		}
		for range n {
			var err error
			scratch, err = c.rd.ReadReply(scratch[:0])
			now := time.Now()
			var re *ReplyError
			if err != nil && !errors.As(err, &re) {
				return err
			}
			if c.check != nil {
				c.check.add(scratch)
			}
			if !measured {
				continue
			}
			c.hist.Record(now.Sub(start))
			c.requests++
			c.ids += idsIn(cfg, scratch)
			if re != nil {
				if c.errs == 0 {
					c.firstErr = re.Msg
				}
				c.errs++
			}
		}
	}
}

// nextBatch assembles the next n requests of a many-tag run, round-robin over the tags.
func (c *client) nextBatch(n int) []byte {
	c.batch = c.batch[:0]
	for range n {
		c.batch = append(c.batch, c.tagReqs[c.nextTag]...)
		if c.nextTag++; c.nextTag == len(c.tagReqs) {
			c.nextTag = 0
		}
	}
	return c.batch
}

// prime sends every tag's request once, connection i taking tags i, i+Clients, ..., so
// that creating the tags and loading their first segments is not measured. A tag answered
// with an error (UNAVAILABLE while the server's loaders are busy) is sent again.
func prime(clients []*client, cfg Config) error {
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.nc.SetDeadline(time.Now().Add(10 * time.Minute))
			var todo, sent, again []int
			for t := i; t < len(c.tagReqs); t += len(clients) {
				todo = append(todo, t)
			}
			var scratch []int64
			for retries := 0; len(todo) > 0; retries++ {
				if retries > 1000 {
					errs[i] = fmt.Errorf("bench: priming the tags: %d tags still failing", len(todo))
					return
				}
				if retries > 0 {
					time.Sleep(10 * time.Millisecond)
				}
				again = again[:0]
				for len(todo) > 0 {
					n := min(cfg.Pipeline, len(todo))
					sent, todo = todo[:n], todo[n:]
					c.batch = c.batch[:0]
					for _, t := range sent {
						c.batch = append(c.batch, c.tagReqs[t]...)
					}
					if _, err := c.nc.Write(c.batch); err != nil {
						errs[i] = err
						return
					}
					for _, t := range sent {
						var err error
						var re *ReplyError
						if scratch, err = c.rd.ReadReply(scratch[:0]); errors.As(err, &re) {
							again = append(again, t)
						} else if err != nil {
							errs[i] = fmt.Errorf("bench: priming the tags: %w", err)
							return
						}
					}
				}
				todo, again = again, todo[:0]
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// idsIn is the number of IDs a reply carries: its integers, or a whole block for INCRBY.
func idsIn(cfg Config, ids []int64) int64 {
	if cfg.Command == CmdIncrBy && len(ids) == 1 {
		return int64(cfg.Batch)
	}
	return int64(len(ids))
}
