package snowflake

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/testkit"
)

// outageSource extends until down is set; then every Extend fails with a text that differs
// from the one before (a time in it, as ZooKeeper's "beyond the outage tolerance" error has).
type outageSource struct {
	scriptSource
	down  atomic.Bool
	tries atomic.Int64
}

func (s *outageSource) Extend(ctx context.Context, until time.Time) error {
	if s.down.Load() {
		n := s.tries.Add(1)
		return fmt.Errorf("%w: zookeeper StateConnecting; try %d at %v", ErrSourceUnavailable, n, until)
	}
	return s.scriptSource.Extend(ctx, until)
}

// TestOutageLogsQuietly: a coordinator outage of 60 s (on the injected clock), retried every
// 100 ms, writes at most 10 lines: the first failure, a summary per 10 s, the recovery.
func TestOutageLogsQuietly(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	core, logs := observer.New(zapcore.InfoLevel)
	src := &outageSource{scriptSource: scriptSource{w: Worker{ID: 4}}}
	cfg := testConfig(c)
	cfg.LeaseWindow = 300 * time.Millisecond
	cfg.RetryInterval = 100 * time.Millisecond
	g, err := New(cfg, src, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	mustNext(t, g)
	before := logs.Len()
	src.down.Store(true)
	// 60 s of outage in 100 ms steps of the clock, each step waiting for a failed try.
	for step := 0; step < 600; step++ {
		tries := src.tries.Load()
		c.Add(100 * time.Millisecond)
		testkit.Eventually(t, 5*time.Second, "a failed extension", func() bool { return src.tries.Load() > tries })
	}
	src.down.Store(false)
	c.Add(100 * time.Millisecond)
	testkit.Eventually(t, 5*time.Second, "the recovery", func() bool {
		return logs.FilterMessage("snowflake: lease extension recovered").Len() > 0
	})
	lines := logs.All()[before:]
	if len(lines) > 10 || len(lines) < 3 {
		for _, l := range lines {
			t.Log(l.Message, l.ContextMap())
		}
		t.Fatalf("%d tries in a 60 s outage logged %d lines, want 3..10", src.tries.Load(), len(lines))
	}
	last := lines[len(lines)-1].ContextMap()
	if last["failures"] != src.tries.Load() {
		t.Errorf("recovery line counts %v failures, want %d", last["failures"], src.tries.Load())
	}
}
