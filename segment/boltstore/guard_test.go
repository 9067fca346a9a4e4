package boltstore

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/leafd/leafd/segment"
)

// Embedded store: leafd.db restored from a copy must give REGRESSION, never a reissued ID.
// The marks live in their own file, which the restore does not roll back.
func TestRestoredBoltBackupIsCaught(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "leafd.db")
	open := func() (*BoltStore, *MarkFile) {
		st, err := OpenBolt(dbPath, BoltOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mk, err := OpenMarkFile(filepath.Join(dir, "marks.db"))
		if err != nil {
			t.Fatal(err)
		}
		return st, mk
	}
	st, mk := open()
	if err := st.Create(t.Context(), segment.Tag{Name: "a", MaxID: 31, Step: 10}); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	copyFile(t, dbPath, filepath.Join(dir, "backup.db"))
	st, err := OpenBolt(dbPath, BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(newFakeClock())
	cfg.NoWarmStart = true
	g, err := segment.New(cfg, st, mk, nil)
	if err != nil {
		t.Fatal(err)
	}
	for want := int64(31); want <= 33; want++ {
		if got := mustNext(t, g, "a"); got != want {
			t.Fatalf("got %d, want %d", got, want)
		}
	}
	_ = g.Close()
	_ = st.Close()
	_ = mk.Close()
	copyFile(t, filepath.Join(dir, "backup.db"), dbPath) // the operator restores the copy

	st, mk = open()
	defer st.Close()
	defer mk.Close()
	g2, err := segment.New(cfg, st, mk, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	if v, err := g2.Next("a"); !errors.Is(err, segment.ErrRegression) {
		t.Fatalf("after restoring leafd.db: got %d, %v; want ErrRegression", v, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// Marks kept by earlier versions inside leafd.db move to marks.db, never lowering a mark.
func TestMigrateMarks(t *testing.T) {
	dir := t.TempDir()
	st := openTestBolt(t, filepath.Join(dir, "leafd.db"))
	if err := st.Raise("a", 500); err != nil {
		t.Fatal(err)
	}
	if err := st.Raise("b", 7); err != nil {
		t.Fatal(err)
	}
	mk, err := OpenMarkFile(filepath.Join(dir, "marks.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer mk.Close()
	if err := mk.Raise("b", 900); err != nil {
		t.Fatal(err)
	}
	if n, err := MigrateMarks(st, mk); err != nil || n != 2 {
		t.Fatalf("got %d, %v; want 2, nil", n, err)
	}
	for tag, want := range map[string]int64{"a": 500, "b": 900} {
		if got, _ := mk.Mark(tag); got != want {
			t.Fatalf("mark %s: got %d, want %d", tag, got, want)
		}
	}
}
