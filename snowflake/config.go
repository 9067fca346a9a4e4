package snowflake

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/limits"
)

// Config configures a Generator. A zero field means its default (see DefaultConfig).
type Config struct {
	// Layout: bit layout and epoch. Default: Leaf's 41/10/12, epoch 1288834974657.
	Layout Layout
	// SequenceStartZero starts every millisecond's sequence at 0. Default false: at a random
	// value in [0, 100) like Leaf, so that IDs of low traffic are not all even.
	SequenceStartZero bool
	// MaxBackward: a clock moved back by at most this is waited out (up to twice the offset, then
	// re-checked); further back is ErrClockBack. Default 5ms.
	MaxBackward time.Duration
	// MaxWait bounds the time one Next/AppendIDs call waits in total: for the next millisecond
	// when the sequence is used up, for a clock to catch up, for a lease extension. Default 200ms.
	MaxWait time.Duration
	// LeaseWindow: how far ahead reserved_until is extended. Longer means fewer writes but a
	// longer wait on restart. Default 3s.
	LeaseWindow time.Duration
	// MaxStartWait: the longest New (or the background acquisition) waits for the clock to pass
	// the bound persisted by the previous run; beyond it, it refuses to start. Default 10s.
	MaxStartWait time.Duration
	// MaxBatch: the largest n of AppendIDs. Default limits.MaxBatch (1000).
	MaxBatch int
	// ExtendTimeout bounds one WorkerSource.Extend or Acquire call. Default 2s.
	ExtendTimeout time.Duration
	// RetryInterval: pause between failed background Acquire/Extend attempts. Default 100ms.
	RetryInterval time.Duration
	// Clock gives the time and every wait: the next millisecond, a clock step back, the start
	// bound, New's retries, the pacing of the background goroutine. Default clock.Real, whose
	// Sleep is precise to a few microseconds (time.Sleep for the coarse part, then yielding), so
	// that waiting for the next millisecond loses little of it. Tests use clock.Fake.
	Clock clock.Clock
	// Rand draws the random sequence starts. Default: a PCG seeded at random. Used under the
	// generator's lock, so it need not be safe for concurrent use.
	Rand rand.Source
}

// DefaultConfig returns the defaults with every field filled in.
func DefaultConfig() Config {
	return Config{
		Layout:        DefaultLayout(),
		MaxBackward:   5 * time.Millisecond,
		MaxWait:       200 * time.Millisecond,
		LeaseWindow:   3 * time.Second,
		MaxStartWait:  10 * time.Second,
		MaxBatch:      limits.MaxBatch,
		ExtendTimeout: 2 * time.Second,
		RetryInterval: 100 * time.Millisecond,
		Clock:         clock.Real{},
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Layout = c.Layout.withDefaults()
	if c.MaxBackward == 0 {
		c.MaxBackward = d.MaxBackward
	}
	if c.MaxWait == 0 {
		c.MaxWait = d.MaxWait
	}
	if c.LeaseWindow == 0 {
		c.LeaseWindow = d.LeaseWindow
	}
	if c.MaxStartWait == 0 {
		c.MaxStartWait = d.MaxStartWait
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.ExtendTimeout == 0 {
		c.ExtendTimeout = d.ExtendTimeout
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = d.RetryInterval
	}
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	if c.Rand == nil {
		c.Rand = rand.NewPCG(rand.Uint64(), rand.Uint64())
	}
	return c
}

// Validate checks the configuration, defaults applied, against the clock: the epoch must not be
// in the future and the layout must not already be exhausted.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := c.Layout.Validate(); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"MaxBackward", c.MaxBackward}, {"MaxWait", c.MaxWait}, {"LeaseWindow", c.LeaseWindow},
		{"MaxStartWait", c.MaxStartWait}, {"ExtendTimeout", c.ExtendTimeout}, {"RetryInterval", c.RetryInterval}} {
		if f.d < 0 {
			return fmt.Errorf("snowflake: %s %v is negative", f.name, f.d)
		}
	}
	if c.LeaseWindow < 10*time.Millisecond {
		return fmt.Errorf("snowflake: LeaseWindow %v is below 10ms", c.LeaseWindow)
	}
	if c.MaxBatch < 1 {
		return fmt.Errorf("snowflake: MaxBatch %d is below 1", c.MaxBatch)
	}
	now := c.Clock.Now()
	if c.Layout.Epoch.After(now) {
		return fmt.Errorf("snowflake: epoch %v is in the future (clock %v)", c.Layout.Epoch, now.UTC())
	}
	if now.After(c.Layout.MaxTime()) {
		return fmt.Errorf("%w: layout with %d time bits ends at %v", ErrOverflow, c.Layout.TimeBits, c.Layout.MaxTime())
	}
	return nil
}
