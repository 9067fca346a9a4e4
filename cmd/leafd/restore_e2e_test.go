package main

import (
	"github.com/leafd/leafd/internal/e2e"

	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRestoreWithoutMarksRefused: the embedded store with marks.db lost (deleted, or a data dir
// rebuilt from a backup of leafd.db alone) and leafd.db restored from an earlier copy is
// refused at start, with a message naming the override, instead of reissuing IDs (leafd.db and
// marks.db carry one pairing id, boltstore.PairMarks).
func TestRestoreWithoutMarksRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := e2e.Start(t, "--data-dir", dir, "--worker-id", "1")
	if _, err := l.Incr("t"); err != nil {
		t.Fatal(err)
	}
	if err := l.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	backup, err := os.ReadFile(filepath.Join(dir, "leafd.db"))
	if err != nil {
		t.Fatal(err)
	}
	l.Restart()
	for range 3 { // IDs above the copy: a start on the copy without the marks would reissue them
		if _, err := l.Incr("t"); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "leafd.db"), backup, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "marks.db")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a start that serves is killed
	defer cancel()
	out, err := exec.CommandContext(ctx, e2e.Binary(), l.Args...).CombinedOutput()
	if err == nil {
		t.Fatalf("leafd started with leafd.db restored and marks.db missing\n%s", out)
	}
	if !strings.Contains(string(out), "--accept-missing-marks") || !strings.Contains(string(out), "marks") {
		t.Fatalf("refusal does not name the override --accept-missing-marks:\n%s", out)
	}
}
