package boltstore

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leafd/leafd/segment"
)

func openTestMarkFile(t *testing.T) *MarkFile {
	t.Helper()
	m, err := OpenMarkFile(filepath.Join(t.TempDir(), "marks.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// RaiseHint refuses an empty tag with ErrInvalidTag, like Raise, and writes no mark.
func TestMarkFileRaiseHintInvalidTag(t *testing.T) {
	m := openTestMarkFile(t)
	if err := m.RaiseHint("", 10, segment.Hint{Step: 1}); !errors.Is(err, segment.ErrInvalidTag) {
		t.Fatalf("RaiseHint(\"\"): %v, want ErrInvalidTag", err)
	}
	if all, err := m.AllMarks(); err != nil || len(all) != 0 {
		t.Fatalf("marks after the refused RaiseHint: %v, %v; want none", all, err)
	}
}

// A stored hint with a negative field (a corrupt record: writers clamp every field at 0) is
// read as the zero Hint, whichever field it is; a hint with zero fields is read as written.
func TestMarkFileHintMalformedIsZero(t *testing.T) {
	m := openTestMarkFile(t)
	put := func(step, rate, load int64) {
		t.Helper()
		var v [24]byte
		binary.BigEndian.PutUint64(v[:], uint64(step))
		binary.BigEndian.PutUint64(v[8:], uint64(rate))
		binary.BigEndian.PutUint64(v[16:], uint64(load))
		err := m.db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(boltHintsBucket)
			if err != nil {
				return err
			}
			return b.Put([]byte("a"), v[:])
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range [][3]int64{{-1, 5, 7}, {3, -1, 7}, {3, 5, -1}} {
		put(c[0], c[1], c[2])
		if h, err := m.Hint("a"); err != nil || h != (segment.Hint{}) {
			t.Errorf("hint %v: got %+v, %v; want the zero Hint", c, h, err)
		}
	}
	for _, c := range [][3]int64{{0, 5, 7}, {3, 0, 7}, {3, 5, 0}} {
		put(c[0], c[1], c[2])
		want := segment.Hint{Step: c[0], Rate: c[1], Load: time.Duration(c[2])}
		if h, err := m.Hint("a"); err != nil || h != want {
			t.Errorf("hint %v: got %+v, %v; want %+v", c, h, err, want)
		}
	}
}

// RecentTags (the warm start) lists the most recently raised tags first, by the time of the
// raise, not by name; only a raise that moves the mark up counts as one.
func TestMarkFileRecentTagsOrder(t *testing.T) {
	m := openTestMarkFile(t)
	clk := newFakeClock()
	m.now = clk.Now
	for _, tag := range []string{"c", "a", "b"} {
		clk.Add(time.Second)
		if err := m.Raise(tag, 10); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(time.Second)
	if err := m.Raise("c", 5); err != nil { // below its mark: no raise
		t.Fatal(err)
	}
	if err := m.RaiseHint("c", 10, segment.Hint{Step: 1}); err != nil { // at its mark: no raise either
		t.Fatal(err)
	}
	got, err := m.RecentTags(2)
	if err != nil || !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("RecentTags(2): %v, %v; want [b a]", got, err)
	}
}

// TestMarkFileHints: hints are stored beside the marks, in the same commit, and survive a
// reopen; RaiseHint never lowers a mark.
func TestMarkFileHints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "marks.db")
	m, err := OpenMarkFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := m.Hint("a"); err != nil || h != (segment.Hint{}) {
		t.Fatalf("no hint: got %+v, %v", h, err)
	}
	want := segment.Hint{Step: 64000, Rate: 123456, Load: 310 * time.Millisecond}
	if err := m.RaiseHint("a", 5000, want); err != nil {
		t.Fatal(err)
	}
	if err := m.RaiseHint("a", 4000, segment.Hint{Step: 1}); err != nil { // a lower end: mark kept
		t.Fatal(err)
	}
	if end, _ := m.Mark("a"); end != 5000 {
		t.Fatalf("RaiseHint with a lower end moved the mark to %d, want it kept at 5000", end)
	}
	if err := m.RaiseHint("a", 9000, want); err != nil {
		t.Fatal(err)
	}
	m.Close()
	m, err = OpenMarkFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if end, _ := m.Mark("a"); end != 9000 {
		t.Fatalf("mark: got %d, want 9000", end)
	}
	if h, _ := m.Hint("a"); h != want {
		t.Fatalf("hint after reopen: got %+v, want %+v", h, want)
	}
	// The embedded store's file keeps them too.
	bs, err := OpenBolt(filepath.Join(t.TempDir(), "leafd.db"), BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	if err := bs.RaiseHint("b", 10, want); err != nil {
		t.Fatal(err)
	}
	if h, _ := bs.Hint("b"); h != want {
		t.Fatalf("BoltStore hint: got %+v, want %+v", h, want)
	}
	if end, _ := bs.Mark("b"); end != 10 {
		t.Fatalf("BoltStore mark: got %d, want 10", end)
	}
}
