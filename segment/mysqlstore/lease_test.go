package mysqlstore

import (
	"context"
	"testing"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// TestLeaseBelowFloorRolledBack: the generator's lease with a floor (its mark) goes through
// AllocateAbove, so a range below the floor comes back without error for the regression check
// to refuse while max_id stays where it was, with the fence on and off.
func TestLeaseBelowFloorRolledBack(t *testing.T) {
	for _, fence := range []bool{true, false} {
		t.Run(map[bool]string{true: "fence", false: "no fence"}[fence], func(t *testing.T) {
			dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
			s := openTestMySQL(t, dsn, func(c *MySQLConfig) {
				if !fence {
					c.FailoverAllocs = 0
				}
			})
			ctx := context.Background()
			if err := s.Create(ctx, segment.Tag{Name: "f", Step: 10}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Lease(ctx, segment.LeaseRequest{Tag: "f"}); err != nil {
				t.Fatal(err)
			}
			before := maxIDOf(t, dsn, "f")
			for range 3 {
				l, err := s.Lease(ctx, segment.LeaseRequest{Tag: "f", Floor: 100_000})
				if err != nil || l.MaxID-10 >= 100_000 {
					t.Fatalf("Lease below the floor: got %+v, %v; want the range below 100000 and no error", l, err)
				}
			}
			if got := maxIDOf(t, dsn, "f"); got != before {
				t.Fatalf("max_id after leases below the floor: got %d, want %d (rolled back)", got, before)
			}
		})
	}
}
