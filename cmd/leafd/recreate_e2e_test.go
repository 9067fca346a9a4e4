package main

// Re-creation of a deleted tag on MySQL: the high-water of leafd_fence (segment/mysqlstore/fence.go)
// keeps every re-creation, through any instance and in any letter case, above the IDs issued.

import (
	"github.com/leafd/leafd/internal/e2e"

	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
)

// TestMySQLRecreateOnOtherInstance: IDs of a retired tag are never reissued, even if the row is
// deleted and the tag re-created through an instance that never served it (no mark there): x
// issues 1..3 of tag "r", the row is deleted, IDS.CREATE r (no START) on z starts above the
// high-water kept in r's leafd_fence row, which survives the deletion.
func TestMySQLRecreateOnOtherInstance(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	db := e2e.OpenSQL(t, dsn)
	x := e2e.StartMySQL(t, dsn, "--default-step", "10")
	z := e2e.StartMySQL(t, dsn, "--default-step", "10")
	if _, err := x.Do("IDS.CREATE", "r", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	served := map[int64]bool{}
	for range 3 {
		id, err := x.Incr("r")
		if err != nil {
			t.Fatal(err)
		}
		served[id] = true
	}
	if _, err := x.Do("IDS.RETIRE", "r"); err != nil {
		t.Fatal(err)
	}
	e2e.SQLExec(t, db, "DELETE FROM leaf_alloc WHERE biz_tag = 'r'")
	if _, err := z.Do("IDS.CREATE", "r", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		id, err := z.Incr("r")
		if err != nil {
			t.Fatal(err)
		}
		if served[id] {
			t.Errorf("ID %d of tag r served by x, then again by z after the tag was deleted and re-created", id)
		}
	}
}

// TestMySQLRecreateOtherCase, on ONE instance: MySQL's default collation matches biz_tag
// case-insensitively, while the marks are keyed by the exact name. "kb" issues 1..3, is retired
// and its row deleted; IDS.CREATE KB (no START) finds no mark for "KB", but the high-water of
// the fence row "kb" (matched with the same collation) makes the new row start above the IDs of
// kb.
func TestMySQLRecreateOtherCase(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	db := e2e.OpenSQL(t, dsn)
	x := e2e.StartMySQL(t, dsn, "--default-step", "10", "--tag-refresh", "1h")
	if _, err := x.Do("IDS.CREATE", "kb", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	served := map[int64]bool{}
	for range 3 {
		id, err := x.Incr("kb")
		if err != nil {
			t.Fatal(err)
		}
		served[id] = true
	}
	if _, err := x.Do("IDS.RETIRE", "kb"); err != nil {
		t.Fatal(err)
	}
	e2e.SQLExec(t, db, "DELETE FROM leaf_alloc WHERE biz_tag = 'kb'")
	if _, err := x.Do("IDS.CREATE", "KB", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		id, err := x.Incr("KB")
		if err != nil {
			t.Fatal(err)
		}
		if served[id] {
			t.Errorf("ID %d of row kb served again as KB after the row was deleted and re-created", id)
		}
	}
}

// lagMaxID makes tag's row look like a promoted replica that missed its last allocations
// (on the same server, so the failover fence sees nothing): max_id drops by `by`, and the
// fence row's high-water with it, as both were written by the allocations the replica lacks.
// Lowering max_id alone is a row lowered by hand, which the high-water repairs.
func lagMaxID(t *testing.T, db *sql.DB, tag string, by int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	var maxID int64
	if err := tx.QueryRowContext(ctx, "SELECT max_id FROM leaf_alloc WHERE biz_tag = ? FOR UPDATE", tag).Scan(&maxID); err != nil {
		t.Fatalf("lagMaxID %s: %v", tag, err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = ?", maxID-by, tag); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE leafd_fence SET max_end = LEAST(max_end, ?) WHERE biz_tag = ?", maxID-by, tag); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
