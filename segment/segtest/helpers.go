// Package segtest holds what the stores' tests share: the conformance suite every store passes
// (Run) and the small helpers and fakes it runs with (a fake clock, in-memory marks, waits).
// It is imported by tests only.
package segtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/segment"
)

// FakeClock is the shared fake clock (internal/clock) at 2025-01-01.
func FakeClock() *clock.Fake {
	return clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
}

// Config is a generator config with the fake clock clk and short waits.
func Config(clk *clock.Fake) segment.Config {
	return segment.Config{
		WaitTimeout: 2 * time.Second,
		LoadTimeout: 2 * time.Second,
		Clock:       clk,
	}
}

// NewGen builds a Generator and closes it at the end of the test.
func NewGen(t *testing.T, cfg segment.Config, st segment.Store, mk segment.Marks) *segment.Generator {
	t.Helper()
	g, err := segment.New(cfg, st, mk, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// MustNext calls Next and fails the test on error.
func MustNext(t *testing.T, g interface{ Next(string) (int64, error) }, tag string) int64 {
	t.Helper()
	v, err := g.Next(tag)
	if err != nil {
		t.Fatalf("Next(%q): %v", tag, err)
	}
	return v
}

// WaitFor polls cond (real time, testkit's poll loop) for up to 5s.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, "waiting for "+what, cond)
}

// WaitIdle waits until no load of tag runs.
func WaitIdle(t *testing.T, g *segment.Generator, tag string) segment.Info {
	t.Helper()
	var in segment.Info
	WaitFor(t, "load of "+tag+" to end", func() bool {
		var err error
		in, err = g.Info(tag)
		return err == nil && !in.Loading
	})
	return in
}

// StoreBase gives a test's Store the methods it does not care about: it cannot do them
// (segment.ErrNotSupported), so the generator goes without, as it does with any Store that
// cannot (segment.Store). Embed it and write Allocate, Tags and Create.
type StoreBase struct{}

// MaxID implements segment.Store: segment.ErrNotSupported.
func (StoreBase) MaxID(context.Context, string) (int64, error) { return 0, segment.ErrNotSupported }

// CheckTag implements segment.Store: segment.ErrNotSupported.
func (StoreBase) CheckTag(context.Context, string) error { return segment.ErrNotSupported }

// CreateShape implements segment.Store: segment.ErrNotSupported.
func (StoreBase) CreateShape(context.Context, string, []byte) error {
	return segment.ErrNotSupported
}

// LoadShape implements segment.Store: segment.ErrNotSupported.
func (StoreBase) LoadShape(context.Context, string) ([]byte, error) {
	return nil, segment.ErrNotSupported
}

// ShapeTags implements segment.Store: segment.ErrNotSupported.
func (StoreBase) ShapeTags(context.Context) ([]string, error) { return nil, segment.ErrNotSupported }

// MarksBase gives a test's Marks the methods it does not care about: it keeps no hint and
// lists nothing (segment.ErrNotSupported), so the generator goes without those features, as
// it does with any Marks that cannot do them. Embed it and write Mark and Raise.
type MarksBase struct{}

// RaiseHint implements segment.Marks: segment.ErrNotSupported (the generator raises through Raise).
func (MarksBase) RaiseHint(string, int64, segment.Hint) error { return segment.ErrNotSupported }

// Hint implements segment.Marks: segment.ErrNotSupported.
func (MarksBase) Hint(string) (segment.Hint, error) { return segment.Hint{}, segment.ErrNotSupported }

// AllMarks implements segment.Marks: segment.ErrNotSupported.
func (MarksBase) AllMarks() ([]segment.Mark, error) { return nil, segment.ErrNotSupported }

// MarksAfter implements segment.Marks: segment.ErrNotSupported.
func (MarksBase) MarksAfter(string, int) ([]segment.Mark, error) {
	return nil, segment.ErrNotSupported
}

// RecentTags implements segment.Marks: segment.ErrNotSupported.
func (MarksBase) RecentTags(int) ([]string, error) { return nil, segment.ErrNotSupported }

// Marks is an in-memory segment.Marks (with MarksBase: no hints, no listing).
type Marks struct {
	MarksBase
	mu sync.Mutex
	m  map[string]int64
}

// NewMarks returns empty in-memory marks.
func NewMarks() *Marks { return &Marks{m: map[string]int64{}} }

// Mark implements segment.Marks.
func (f *Marks) Mark(tag string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[tag], nil
}

// Raise implements segment.Marks.
func (f *Marks) Raise(tag string, end int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if end > f.m[tag] {
		f.m[tag] = end
	}
	return nil
}

// ErrDown is what every call of DownStore returns.
var ErrDown = errors.New("store down")

// DownStore is a store whose every call fails with ErrDown, as a MySQL that went away.
type DownStore struct{ StoreBase }

// Allocate implements segment.Store: ErrDown.
func (DownStore) Allocate(context.Context, string, int64) (segment.Alloc, error) {
	return segment.Alloc{}, ErrDown
}

// Tags implements segment.Store: ErrDown.
func (DownStore) Tags(context.Context) ([]string, error) { return nil, ErrDown }

// Create implements segment.Store: ErrDown.
func (DownStore) Create(context.Context, segment.Tag) error { return ErrDown }

// NoMarks is a segment.Marks that keeps nothing: every mark is 0 and a raise is dropped.
type NoMarks struct{ MarksBase }

// Mark implements segment.Marks: 0.
func (NoMarks) Mark(string) (int64, error) { return 0, nil }

// Raise implements segment.Marks: dropped.
func (NoMarks) Raise(string, int64) error { return nil }
