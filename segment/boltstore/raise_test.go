package boltstore

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/leafd/leafd/segment"
)

// RaiseMaxID only moves max_id up, durably; an unknown tag is ErrUnknownTag.
func TestBoltRaiseMaxID(t *testing.T) {
	st := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	ctx := t.Context()
	if err := st.Create(ctx, segment.Tag{Name: "a", MaxID: 50, Step: 10}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ floor, before, after int64 }{
		{101, 50, 101}, // up
		{80, 101, 101}, // never down
		{101, 101, 101},
	} {
		before, after, err := st.RaiseMaxID(ctx, "a", c.floor)
		if err != nil || before != c.before || after != c.after {
			t.Errorf("RaiseMaxID(%d): got %d, %d, %v; want %d, %d", c.floor, before, after, err, c.before, c.after)
		}
	}
	if a, err := st.Allocate(ctx, "a", 0); err != nil || a.MaxID != 111 {
		t.Errorf("Allocate after the raise: got %+v %v, want max_id 111", a, err)
	}
	if _, _, err := st.RaiseMaxID(ctx, "nosuch", 10); !errors.Is(err, segment.ErrUnknownTag) {
		t.Errorf("RaiseMaxID of an unknown tag: %v, want ErrUnknownTag", err)
	}
	if _, _, err := st.RaiseMaxID(ctx, "a", -1); !errors.Is(err, segment.ErrLimit) {
		t.Errorf("RaiseMaxID(-1): %v, want ErrLimit", err)
	}
}

// RaiseMaxID's range check: every floor in [0, maxRangeEnd) is accepted (0 and a floor at
// or below max_id leave the row as it is), maxRangeEnd and above are refused with ErrLimit
// and leave max_id unchanged, so that an operator's raise can never set max_id where the
// next allocation would pass the largest ID.
func TestBoltRaiseMaxIDBounds(t *testing.T) {
	st := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	ctx := t.Context()
	if err := st.Create(ctx, segment.Tag{Name: "a", MaxID: 50, Step: 10}); err != nil {
		t.Fatal(err)
	}
	if before, after, err := st.RaiseMaxID(ctx, "a", 0); err != nil || before != 50 || after != 50 {
		t.Errorf("RaiseMaxID(0): got %d, %d, %v; want 50, 50, nil", before, after, err)
	}
	for _, floor := range []int64{segment.MaxRangeEnd, segment.MaxRangeEnd + 1} {
		if _, _, err := st.RaiseMaxID(ctx, "a", floor); !errors.Is(err, segment.ErrLimit) {
			t.Errorf("RaiseMaxID(%d): %v, want ErrLimit", floor, err)
		}
	}
	if before, after, err := st.RaiseMaxID(ctx, "a", segment.MaxRangeEnd-1); err != nil || before != 50 || after != segment.MaxRangeEnd-1 {
		t.Errorf("RaiseMaxID(maxRangeEnd-1): got %d, %d, %v; want 50, %d, nil", before, after, err, int64(segment.MaxRangeEnd-1))
	}
}
