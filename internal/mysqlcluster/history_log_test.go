package mysqlcluster

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestHistoryAnnouncesOnce: each new generation is logged once per process, with the words
// of how it was learned (begun here, or recorded by another instance), and the OnGeneration
// functions run once for it. While this process records a generation, its other statements
// that read the recorded row, or find the same lower reading, announce nothing.
func TestHistoryAnnouncesOnce(t *testing.T) {
	ctx := context.Background()
	open := func(t *testing.T) (*History, *observer.ObservedLogs, *int) {
		core, logs := observer.New(zapcore.InfoLevel)
		h, err := OpenHistory("", zap.New(core))
		if err != nil {
			t.Fatal(err)
		}
		n := new(int)
		h.OnGeneration(func() { *n++ })
		return h, logs, n
	}
	count := func(logs *observer.ObservedLogs, msg string) int { return logs.FilterMessage(msg).Len() }

	t.Run("begun", func(t *testing.T) {
		h, logs, n := open(t)
		if err := h.Check(ctx, &fakeSource{}, synced(100, 0)); err != nil {
			t.Fatal(err)
		}
		src := &fakeSource{confirm: synced(40, 0)}
		src.onBegin = func() {
			src.onBegin = nil
			// Other statements of this process while it records the generation: one finds
			// the same lower reading, one reads the row being recorded.
			if err := h.Check(ctx, src, synced(40, 0)); !errors.Is(err, ErrGeneration) {
				t.Errorf("the same lower reading while it is recorded: %v, want ErrGeneration", err)
			}
			if err := h.Check(ctx, src, synced(41, 1)); err != nil {
				t.Errorf("a reading of the recorded generation: %v", err)
			}
		}
		if err := h.Check(ctx, src, synced(40, 0)); !errors.Is(err, ErrGeneration) {
			t.Fatalf("a confirmed lower reading: %v, want ErrGeneration", err)
		}
		if len(src.begins) != 1 {
			t.Fatalf("generation recorded %d times, want 1", len(src.begins))
		}
		if b, r := count(logs, msgBegins), count(logs, msgRecorded); b != 1 || r != 0 {
			t.Fatalf("logged %d \"begins\" and %d \"recorded by another instance\", want 1 and 0", b, r)
		}
		if *n != 1 {
			t.Fatalf("OnGeneration ran %d times, want 1", *n)
		}
	})

	t.Run("recorded elsewhere", func(t *testing.T) {
		h, logs, n := open(t)
		for _, st := range []State{synced(100, 0), synced(60, 1), synced(61, 1)} {
			if err := h.Check(ctx, &fakeSource{}, st); err != nil {
				t.Fatal(err)
			}
		}
		if b, r := count(logs, msgBegins), count(logs, msgRecorded); b != 0 || r != 1 {
			t.Fatalf("logged %d \"begins\" and %d \"recorded by another instance\", want 0 and 1", b, r)
		}
		if *n != 1 {
			t.Fatalf("OnGeneration ran %d times, want 1", *n)
		}
	})
}
