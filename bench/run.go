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
)

// client is one connection and what it measured. Only its own goroutine touches it until the
// run has waited for it.
type client struct {
	addr string
	nc   net.Conn
	rd   *Reader
	req  []byte // Pipeline copies of the request
	one  int    // length of one request in req

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
		if _, err := c.nc.Write(c.req[:n*c.one]); err != nil {
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
			c.ids += int64(len(scratch))
			if re != nil {
				if c.errs == 0 {
					c.firstErr = re.Msg
				}
				c.errs++
			}
		}
	}
}
