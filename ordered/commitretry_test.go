package ordered

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
)

// TestMySQLLeaseCommitConflictRetried: a lease transaction whose COMMIT answers a
// certification conflict (1213: rolled back on every member) runs again and is granted.
func TestMySQLLeaseCommitConflictRetried(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	conflict := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock (injected at COMMIT)"}
	db := sql.OpenDB(testenv.FaultConnector(c, testenv.Faults{Commit: func() error {
		if n.Add(-1) >= 0 {
			return conflict
		}
		return nil
	}}))
	t.Cleanup(func() { _ = db.Close() })
	m := NewMySQLLeases(db, 5*time.Second)
	ctx := context.Background()
	if err := m.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.MarkOrdered(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	n.Store(2)
	g, err := m.Acquire(ctx, "o", "a", time.Minute)
	if err != nil || !g.Granted || g.Epoch != 1 {
		t.Fatalf("Acquire after two conflicts at COMMIT: %+v, %v; want granted, epoch 1", g, err)
	}
	if n.Load() >= 0 {
		t.Fatalf("%d conflicts left unused", n.Load())
	}
	n.Store(1)
	if g, err := m.Acquire(ctx, "o", "a", time.Minute); err != nil || !g.Granted || g.Epoch != 1 || g.Settle {
		t.Fatalf("renewal after a conflict at COMMIT: %+v, %v; want granted, epoch 1, no settle", g, err)
	}
}
