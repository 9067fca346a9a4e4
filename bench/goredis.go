package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// runGoRedis is Run with ClientGoRedis: each connection is a go-redis client holding one
// connection, and each batch of Pipeline requests is one go-redis pipeline. Batches of IDs are
// read as IntSliceCmd (one []int64 per reply, no boxing of each ID), single IDs as IntCmd.
func runGoRedis(ctx context.Context, cfg Config) (*Result, error) {
	clients := make([]*client, cfg.Clients)
	defer func() {
		for _, c := range clients {
			if c != nil && c.rc != nil {
				_ = c.rc.Close()
			}
		}
	}()
	for i := range clients {
		addr := cfg.Addrs[i%len(cfg.Addrs)]
		rc := redis.NewClient(&redis.Options{
			Addr: addr, Protocol: 2, DisableIdentity: true,
			PoolSize: 1, MinIdleConns: 1, PipelinePoolSize: -1,
			DialTimeout: cfg.DialTimeout, ReadTimeout: cfg.Timeout, WriteTimeout: cfg.Timeout,
		})
		c := &client{addr: addr, rc: rc, hist: NewHistogram()}
		if cfg.Check {
			c.check = &connCheck{}
		}
		clients[i] = c
		if err := rc.Ping(ctx).Err(); err != nil {
			return nil, fmt.Errorf("bench: connection %d to %s: %w", i, addr, err)
		}
	}
	begin := time.Now()
	measureFrom := begin.Add(cfg.Warmup)
	var deadline time.Time
	if cfg.Requests <= 0 {
		deadline = measureFrom.Add(cfg.Duration)
	}
	var budget atomic.Int64
	budget.Store(cfg.Requests)
	var mu sync.Mutex
	var lastDone time.Time
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.err = c.runGoRedis(ctx, cfg, measureFrom, deadline, &budget)
			end := time.Now()
			mu.Lock()
			if end.After(lastDone) {
				lastDone = end
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return newResult(cfg, clients, lastDone.Sub(measureFrom)), nil
}

func (c *client) runGoRedis(ctx context.Context, cfg Config, measureFrom, deadline time.Time, budget *atomic.Int64) error {
	args := cfg.args()
	cmdArgs := make([]any, len(args))
	for i, a := range args {
		cmdArgs[i] = a
	}
	batched := cfg.Command == CmdSegment || cfg.Command == CmdSnowflake && cfg.Batch > 1
	pipe := c.rc.Pipeline()
	ints := make([]*redis.IntCmd, cfg.Pipeline)
	slices := make([]*redis.IntSliceCmd, cfg.Pipeline)
	one := make([]int64, 1)
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
		for j := range n {
			if batched {
				slices[j] = redis.NewIntSliceCmd(ctx, cmdArgs...)
				_ = pipe.Process(ctx, slices[j])
			} else {
				ints[j] = redis.NewIntCmd(ctx, cmdArgs...)
				_ = pipe.Process(ctx, ints[j])
			}
		}
		_, execErr := pipe.Exec(ctx)
		now := time.Now()
		for j := range n {
			var ids []int64
			var err error
			if batched {
				ids, err = slices[j].Result()
			} else {
				one[0], err = ints[j].Result()
				ids = one
			}
			var re redis.Error
			if err != nil && !errors.As(err, &re) {
				return err
			}
			if err != nil {
				ids = nil
			}
			if c.check != nil {
				c.check.add(ids)
			}
			if !measured {
				continue
			}
			c.hist.Record(now.Sub(start))
			c.requests++
			c.ids += idsIn(cfg, ids)
			if err != nil {
				if c.errs == 0 {
					c.firstErr = err.Error()
				}
				c.errs++
			}
		}
		var re redis.Error
		if execErr != nil && !errors.As(execErr, &re) {
			return execErr
		}
	}
}
