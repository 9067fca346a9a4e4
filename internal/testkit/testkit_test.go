package testkit

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestPollUntilTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	if !Poll(10*time.Second, func() bool { return n.Add(1) == 3 }) {
		t.Fatal("Poll: false, want true once the condition holds")
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("condition checked %d times, want 3 (it stops at the first true)", got)
	}
}

func TestPollTimesOut(t *testing.T) {
	start := time.Now()
	var n atomic.Int32
	if Poll(50*time.Millisecond, func() bool { n.Add(1); return false }) {
		t.Fatal("Poll: true for a condition that never holds")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("Poll returned after %v, want at least the 50ms timeout", d)
	}
	if n.Load() < 2 {
		t.Fatalf("condition checked %d times, want it checked again before giving up", n.Load())
	}
}

func TestEventuallyFailsNamingTheCondition(t *testing.T) {
	ft := &fakeT{}
	done := make(chan struct{})
	go func() { // Fatalf ends the goroutine, as it ends a test's
		defer close(done)
		Eventually(ft, 20*time.Millisecond, "the row", func() bool { return false })
	}()
	<-done
	if want := "the row: not within 20ms"; ft.msg != want {
		t.Fatalf("got %q, want %q", ft.msg, want)
	}
}

type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
