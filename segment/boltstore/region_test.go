package boltstore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/leafd/leafd/segment"
)

// TestCheckRegionBolt: the embedded store records the layout of its first regional start and
// refuses any other; a single-region store with tags is refused as a region.
func TestCheckRegionBolt(t *testing.T) {
	ctx := context.Background()
	open := func(t *testing.T) *BoltStore {
		s, err := OpenBolt(filepath.Join(t.TempDir(), "leafd.db"), BoltOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	t.Run("recorded then refused", func(t *testing.T) {
		s := open(t)
		if err := segment.CheckRegion(ctx, s, segment.Region{K: 0, N: 2}); err != nil {
			t.Fatalf("first start 0/2: %v", err)
		}
		if err := segment.CheckRegion(ctx, s, segment.Region{K: 0, N: 2}); err != nil {
			t.Fatalf("second start 0/2: %v", err)
		}
		for _, r := range []segment.Region{{K: 1, N: 2}, {K: 0, N: 3}, {K: 0, N: 1}, {}} {
			if err := segment.CheckRegion(ctx, s, r); !errors.Is(err, segment.ErrRegionMismatch) {
				t.Errorf("start %v on a store recorded 0/2: got %v, want ErrRegionMismatch", r, err)
			}
		}
	})
	t.Run("single region leaves no record", func(t *testing.T) {
		s := open(t)
		if err := segment.CheckRegion(ctx, s, segment.Region{}); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := s.Region(ctx); ok || err != nil {
			t.Errorf("after a single-region start: record %v, %v; want none", ok, err)
		}
	})
	t.Run("single-region tags refused as a region", func(t *testing.T) {
		s := open(t)
		if err := s.Create(ctx, segment.Tag{Name: "a", MaxID: 1, Step: 10}); err != nil {
			t.Fatal(err)
		}
		if err := segment.CheckRegion(ctx, s, segment.Region{K: 1, N: 2}); !errors.Is(err, segment.ErrRegionMismatch) {
			t.Errorf("1/2 on a single-region store with tags: got %v, want ErrRegionMismatch", err)
		}
		if err := s.SetRegion(ctx, segment.Region{K: 1, N: 2}); err != nil {
			t.Fatal(err)
		}
		if err := segment.CheckRegion(ctx, s, segment.Region{K: 1, N: 2}); err != nil {
			t.Errorf("1/2 after SetRegion 1/2: %v", err)
		}
	})
}
