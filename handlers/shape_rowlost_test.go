package handlers

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
)

// TestShapedRowLostRecreated: a database failover that lost the creation of the current
// period's row leaves the instance that created it with IDs in memory and no row. Once those
// are used, its next request creates the row again (above every ID it issued from it),
// instead of answering NOTAG for the rest of the period.
func TestShapedRowLostRecreated(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, nil, serverOpts{mysqlDSN: dsn, dir: t.TempDir()})
	c := s.client(t, 3, "")
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "l", "FORMAT", "L{yyyyMMdd}{seq:6}", "RESET", "day", "STEP", "5").Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	take := func(n int) {
		t.Helper()
		for range n {
			v, err := c.Do(ctx, "IDS.NEXT", "l").Text()
			if err != nil {
				t.Fatalf("IDS.NEXT l after %d IDs: %v", len(got), err)
			}
			got = append(got, v)
		}
	}
	take(3)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("DELETE FROM leaf_alloc WHERE biz_tag = 'l@20261201'"); err != nil {
		t.Fatal(err)
	}
	take(20) // past the ranges held in memory: the row is created again
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("IDs not distinct and increasing: %v", got)
	}
}
