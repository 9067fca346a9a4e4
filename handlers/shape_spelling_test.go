package handlers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
)

// TestShapedTagOneSpelling: on MySQL's default case-insensitive collation another spelling
// of a shaped tag finds its shape and shares its counter rows, but an opaque permutation is
// keyed by the name as written, so two spellings would map one counter sequence through two
// permutations and issue duplicate IDs. A shaped tag answers to its stored spelling only.
func TestShapedTagOneSpelling(t *testing.T) {
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, testKey(), serverOpts{autoCreate: true, mysqlDSN: testenv.FreshDatabase(t, testenv.MySQLDSN(t)), dir: t.TempDir()})
	c := s.client(t, 3, "")
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "opq", "FORMAT", "OP{yyyyMMdd}{seq:6}", "RESET", "day", "OPAQUE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "IDS.NEXT", "opq").Err(); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"OPQ", "Opq"} {
		for _, cmd := range [][]any{{"IDS.NEXT", other}, {"INCR", other}, {"IDS.PARSE", other, "OP20261201000001"}} {
			err := c.Do(ctx, cmd...).Err()
			if err == nil || !strings.HasPrefix(err.Error(), "BADTAG") || !strings.Contains(err.Error(), "'opq'") {
				t.Fatalf("%v: got %v, want BADTAG naming the stored spelling 'opq'", cmd, err)
			}
		}
	}
}

// TestPruneNeedsTheFence: with --mysql-failover-allocs 0 there is no high-water, so a pruned
// period's row re-created by another instance (without this one's marks) would start again at
// 1: IDS.PRUNE refuses, and deletes nothing.
func TestPruneNeedsTheFence(t *testing.T) {
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := shapedServer(t, clk, nil, serverOpts{autoCreate: true, mysqlDSN: dsn, mysqlNoFence: true, dir: t.TempDir()})
	c := s.client(t, 3, "")
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "ord", "FORMAT", "ORD{yyyyMMdd}{seq:6}", "RESET", "day").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "IDS.NEXT", "ord").Err(); err != nil {
		t.Fatal(err)
	}
	clk.set(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	if err := c.Do(ctx, "IDS.NEXT", "ord").Err(); err != nil {
		t.Fatal(err)
	}
	err := c.Do(ctx, "IDS.PRUNE", "ord", "20261202").Err()
	if err == nil || !strings.HasPrefix(err.Error(), "LIMIT") || !strings.Contains(err.Error(), "--mysql-failover-allocs") {
		t.Fatalf("IDS.PRUNE without the fence: got %v, want LIMIT naming --mysql-failover-allocs", err)
	}
	if n := sqlCount(t, dsn, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = 'ord@20261201'"); n != 1 {
		t.Fatalf("the refused prune deleted the period's row (%d rows left)", n)
	}
}
