package segment

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
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
	if err := m.RaiseHint("", 10, Hint{Step: 1}); !errors.Is(err, ErrInvalidTag) {
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
		if h, err := m.Hint("a"); err != nil || h != (Hint{}) {
			t.Errorf("hint %v: got %+v, %v; want the zero Hint", c, h, err)
		}
	}
	for _, c := range [][3]int64{{0, 5, 7}, {3, 0, 7}, {3, 5, 0}} {
		put(c[0], c[1], c[2])
		want := Hint{Step: c[0], Rate: c[1], Load: time.Duration(c[2])}
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
	if err := m.RaiseHint("c", 10, Hint{Step: 1}); err != nil { // at its mark: no raise either
		t.Fatal(err)
	}
	got, err := m.RecentTags(2)
	if err != nil || !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("RecentTags(2): %v, %v; want [b a]", got, err)
	}
}
