package handlers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// TestShapeNoForeignRows: a shaped tag never takes over a row it did not create. IDS.CREATE
// of a shape is refused (TAGEXISTS) when rows name@... exist; once the shape exists, a plain
// creation of name@x (IDS.CREATE, auto-create's INCR, the store's Create without the row
// flag) is SHAPED, while the shaped path's own rows are created.
func TestShapeNoForeignRows(t *testing.T) {
	eachStore(t, testShapeNoForeignRows)
}

func testShapeNoForeignRows(t *testing.T, o serverOpts) {
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, nil, o)
	c := s.client(t, 3, "")
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "d@20261202", "START", "999990").Err(); err != nil {
		t.Fatal(err)
	}
	err := c.Do(ctx, "IDS.CREATE", "d", "FORMAT", "D{yyyyMMdd}{seq:6}", "RESET", "day").Err()
	wantErr(t, err, "TAGEXISTS")
	if err := c.Do(ctx, "IDS.CREATE", "okX@1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "IDS.CREATE", "ok_", "FORMAT", "K{yyyyMMdd}{seq:6}", "RESET", "day").Err(); err != nil {
		t.Fatal(err) // '_' is a LIKE wildcard: rows okX@... must not count
	}
	if err := c.Do(ctx, "IDS.CREATE", "e", "FORMAT", "E{yyyyMMdd}{seq:6}", "RESET", "day").Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Do(ctx, "IDS.NEXT", "e").Text(); err != nil || v != "E20261201000001" {
		t.Fatalf("IDS.NEXT e: %q, %v", v, err)
	}
	wantErr(t, c.Do(ctx, "IDS.CREATE", "e@20261203").Err(), "SHAPED")
	wantErr(t, c.Incr(ctx, "e@20261204").Err(), "SHAPED")
	st := s.h.cfg.Shapes.(segment.Store)
	err = st.Create(ctx, segment.Tag{Name: "e@20261205", MaxID: 1, Step: 10})
	if err == nil || !errorsIsShaped(err) {
		t.Fatalf("store Create of a plain e@20261205: %v, want ErrShaped", err)
	}
	if err := st.Create(ctx, segment.Tag{Name: "e@20261206", MaxID: 1, Step: 10, Row: &segment.ShapeRow{}}); err != nil {
		t.Fatalf("store Create of e's own row: %v", err)
	}
}

func errorsIsShaped(err error) bool { return errors.Is(err, segment.ErrShaped) }

// TestShapedRowFailoverRoom (MySQL, fence on): IDS.CREATE refuses a width that cannot hold a
// failover gap (--mysql-failover-allocs × STEP) and a step above START, with the numbers; a
// shaped tag's row is leased at its stored step only.
func TestShapedRowFailoverRoom(t *testing.T) {
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, nil, serverOpts{autoCreate: true, mysqlDSN: testenv.FreshDatabase(t, testenv.MySQLDSN(t)), dir: t.TempDir()})
	c := s.client(t, 3, "")
	ctx := context.Background()
	err := c.Do(ctx, "IDS.CREATE", "narrow", "FORMAT", "N{yyyyMMdd}{seq:4}", "RESET", "day", "STEP", "1000").Err()
	wantErr(t, err, "LIMIT")
	for _, want := range []string{"9999 values", "20000", "STEP 476"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if err := c.Do(ctx, "IDS.CREATE", "narrow", "FORMAT", "N{yyyyMMdd}{seq:4}", "RESET", "day", "STEP", "476").Err(); err != nil {
		t.Fatalf("STEP 476: %v", err)
	}
	if v, err := c.Do(ctx, "IDS.NEXT", "narrow").Text(); err != nil || v != "N202612010001" {
		t.Fatalf("IDS.NEXT narrow: %q, %v", v, err)
	}
	st := s.h.cfg.Shapes.(segment.Store)
	if _, err := st.Allocate(ctx, "narrow@20261201", 952); !errors.Is(err, segment.ErrLimit) {
		t.Fatalf("allocation of a shaped row above its step: %v, want ErrLimit", err)
	}
	if _, err := st.Allocate(ctx, "narrow@20261201", 0); err != nil {
		t.Fatalf("allocation at the stored step: %v", err)
	}
}
