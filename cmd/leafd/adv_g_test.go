package main

// Adversarial review G of the segment path (after #8): reproductions against the built
// binary. Each test that shows a defect still present is skipped with "repro: ..." so that CI
// stays green; run it with LEAFD_ADV_REPRO=1 to see it fail.

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// advRepro skips a reproduction of an open defect unless LEAFD_ADV_REPRO=1.
func advRepro(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("LEAFD_ADV_REPRO") != "1" {
		t.Skip("repro: " + why + " (LEAFD_ADV_REPRO=1 runs it)")
	}
}

// TestAdvGRestoreWithoutMarks: the embedded store with marks.db lost (deleted, or a data dir
// rebuilt from a backup of leafd.db alone) and leafd.db restored from an earlier copy starts
// silently and reissues IDs. docs/SEGMENT.md says "never delete it"; nothing enforces it.
func TestAdvGRestoreWithoutMarks(t *testing.T) {
	advRepro(t, "a restored leafd.db without its marks.db is served without a check")
	dir := t.TempDir()
	l := startLeafd(t, "--data-dir", dir, "--worker-id", "1")
	if _, err := incrOnce(l, "t"); err != nil {
		t.Fatal(err)
	}
	if err := l.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	backup, err := os.ReadFile(filepath.Join(dir, "leafd.db"))
	if err != nil {
		t.Fatal(err)
	}
	l.start()
	served := map[int64]bool{}
	for range 3 {
		id, err := incrOnce(l, "t")
		if err != nil {
			t.Fatal(err)
		}
		served[id] = true
	}
	if err := l.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "leafd.db"), backup, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "marks.db")); err != nil {
		t.Fatal(err)
	}
	l.start()
	for range 3 {
		id, err := incrOnce(l, "t")
		if err != nil {
			continue // a refusal is the fix
		}
		if served[id] {
			t.Errorf("ID %d reissued after leafd.db was restored without marks.db", id)
		}
	}
}
