package snowflake

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
)

// TestRestartWithChangedLayoutDoesNotReissue: the data dir's time bound is kept in Unix
// milliseconds, but an ID encodes milliseconds since the epoch with the layout's shifts. A
// restart of the same data dir with --snowflake-epoch moved forward by D (or other
// --snowflake-bits) issues the IDs of D ms ago again. The restart must either refuse (naming
// the options) or issue only above every ID of the earlier run.
//
// The data dir records the layout (layout.go): the restart is refused, naming the options.
func TestRestartWithChangedLayoutDoesNotReissue(t *testing.T) {
	dir := t.TempDir()
	c := clock.NewFakeMs(ms2024)
	run := func(epochMs int64, n int) ([]int64, error) {
		src, err := NewFileSource(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(c)
		cfg.Layout = Layout{Epoch: time.UnixMilli(epochMs)}
		g, err := New(cfg, src, nil)
		if err != nil {
			return nil, err // a refusal is a correct answer
		}
		defer g.Close()
		waitReady(t, g)
		var ids []int64
		for range n {
			ids = append(ids, mustNext(t, g))
			c.Add(time.Millisecond)
		}
		return ids, nil
	}
	first, err := run(DefaultEpochMs, 50)
	if err != nil {
		t.Fatal(err)
	}
	c.Add(time.Second)
	// The epoch moved forward by the time that passed since the first run began.
	second, err := run(DefaultEpochMs+c.Now().UnixMilli()-ms2024, 50)
	if err != nil {
		if !errors.Is(err, ErrLayoutChanged) || !strings.Contains(err.Error(), "--snowflake-epoch") ||
			!strings.Contains(err.Error(), "--snowflake-bits") {
			t.Fatalf("restart with another epoch: want ErrLayoutChanged naming --snowflake-epoch and --snowflake-bits, got %v", err)
		}
		if strings.Contains(err.Error(), "snowflake: snowflake:") {
			t.Fatalf("repeated prefix: %v", err)
		}
		return
	}
	seen := make(map[int64]bool, len(first))
	for _, id := range first {
		seen[id] = true
	}
	dups := 0
	for _, id := range second {
		if seen[id] {
			dups++
		}
	}
	if dups > 0 || second[0] <= first[len(first)-1] {
		t.Fatalf("restart with the epoch moved forward by the time since the first run: %d of %d IDs reissued; first new ID %d, last old ID %d",
			dups, len(second), second[0], first[len(first)-1])
	}
}

// TestLayoutRecordedInDataDir: other bit widths are refused like another epoch; the same
// layout restarts; a file written before the record existed adopts the current layout (and
// then refuses another one).
func TestLayoutRecordedInDataDir(t *testing.T) {
	dir := t.TempDir()
	open := func(l Layout) error {
		src, err := NewFileSource(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		src.UseLayout(l)
		_, err = src.Acquire(context.Background())
		return err
	}
	if err := open(Layout{}); err != nil {
		t.Fatal(err)
	}
	if err := open(Layout{TimeBits: 41, WorkerBits: 8, SeqBits: 14}); !errors.Is(err, ErrLayoutChanged) {
		t.Fatalf("other bits: want ErrLayoutChanged, got %v", err)
	}
	if err := open(DefaultLayout()); err != nil {
		t.Fatalf("same layout: %v", err)
	}
	// An old file: no layout record.
	p := filepath.Join(dir, LocalStateFile)
	if err := os.WriteFile(p, []byte(`{"worker_id":0,"reserved_until":1,"source":"file","instance":"abc"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	moved := Layout{Epoch: time.UnixMilli(DefaultEpochMs + 1000)}
	if err := open(moved); err != nil {
		t.Fatalf("old file: %v", err)
	}
	if err := open(Layout{}); !errors.Is(err, ErrLayoutChanged) {
		t.Fatalf("after adopting the moved epoch, the default: want ErrLayoutChanged, got %v", err)
	}
}

type failSource struct{ err error }

func (s failSource) Acquire(context.Context) (Worker, error) { return Worker{}, s.err }
func (s failSource) Extend(context.Context, time.Time) error { return s.err }
func (s failSource) Close() error                            { return nil }

// TestErrorPrefixOnce: the errors New returns say "snowflake: " once, however deep the cause.
func TestErrorPrefixOnce(t *testing.T) {
	c := clock.NewFakeMs(ms2024)
	_, err := New(testConfig(c), failSource{errors.New("snowflake: broken source")}, nil)
	if err == nil || strings.Count(err.Error(), "snowflake:") != 1 {
		t.Fatalf("got %v, want one \"snowflake:\"", err)
	}
	dir := t.TempDir()
	src, err := NewFileSource(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Extend(context.Background(), time.Time{}); err == nil {
		t.Fatal("Extend before Acquire succeeded")
	}
	if _, err := src.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := src.Extend(context.Background(), c.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	src.Close()
	src, err = NewFileSource(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(testConfig(c), src, nil)
	if !errors.Is(err, ErrBoundAhead) || strings.Count(err.Error(), "snowflake:") != 1 {
		t.Fatalf("bound an hour ahead: got %v, want ErrBoundAhead with one \"snowflake:\"", err)
	}
}
