package segment

import (
	"errors"
	"path/filepath"
	"testing"
)

// RaiseMaxID only moves max_id up, durably; an unknown tag is ErrUnknownTag.
func TestBoltRaiseMaxID(t *testing.T) {
	st := openTestBolt(t, filepath.Join(t.TempDir(), "leafd.db"))
	ctx := t.Context()
	if err := st.Create(ctx, Tag{Name: "a", MaxID: 50, Step: 10}); err != nil {
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
	if _, _, err := st.RaiseMaxID(ctx, "nosuch", 10); !errors.Is(err, ErrUnknownTag) {
		t.Errorf("RaiseMaxID of an unknown tag: %v, want ErrUnknownTag", err)
	}
	if _, _, err := st.RaiseMaxID(ctx, "a", -1); !errors.Is(err, ErrLimit) {
		t.Errorf("RaiseMaxID(-1): %v, want ErrLimit", err)
	}
}
