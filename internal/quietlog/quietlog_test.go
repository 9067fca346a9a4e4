package quietlog

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestRepeatingFailure: ten failures a second for 60 s (a ZooKeeper outage's rate) are one
// line, then one summary per 10 s (at 10 s ... 50 s), then one recovery line: 7 lines, not 600.
func TestRepeatingFailure(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	now := time.Unix(1000, 0)
	q := New(zap.New(core), 10*time.Second, func() time.Time { return now })
	for i := 0; i < 600; i++ {
		// The text changes on every try (a time in it), the kind does not.
		q.Fail(zapcore.WarnLevel, "lease extension failed", fmt.Errorf("unreachable at %v", now))
		now = now.Add(100 * time.Millisecond)
	}
	q.OK("lease extension failed", "lease extension recovered")
	q.OK("lease extension failed", "lease extension recovered") // no run: no line
	all := logs.All()
	if len(all) != 7 {
		for _, e := range all {
			t.Log(e.Message, e.ContextMap())
		}
		t.Fatalf("got %d lines for a 60 s run, want 7 (first, 5 summaries, recovery)", len(all))
	}
	if m := all[1].ContextMap(); m["repeated"] != int64(100) {
		t.Errorf("first summary: repeated = %v, want 100", m["repeated"])
	}
	if m := all[6].ContextMap(); all[6].Message != "lease extension recovered" || m["failures"] != int64(600) {
		t.Errorf("recovery line: %q %v, want the count 600", all[6].Message, m)
	}
	if q.Failing("lease extension failed") {
		t.Error("still failing after OK")
	}
}

// TestKindsApart: two kinds of failure are counted apart; a new run after OK is logged again.
func TestKindsApart(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	now := time.Unix(1000, 0)
	q := New(zap.New(core), 10*time.Second, func() time.Time { return now })
	err := errors.New("down")
	if !q.Fail(zapcore.WarnLevel, "a", err) || !q.Fail(zapcore.WarnLevel, "b", err) || q.Fail(zapcore.WarnLevel, "a", err) {
		t.Fatal("the first failure of each kind is logged, a repeat within the interval is not")
	}
	q.OK("a", "a ok")
	if !q.Fail(zapcore.WarnLevel, "a", err) {
		t.Error("a new run after recovery is not logged")
	}
	if n := logs.Len(); n != 4 {
		t.Errorf("got %d lines, want 4", n)
	}
}
