package ordered

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
)

// TestMySQLLeaseCommitConflictRetried: a lease write the database rolled back whole (a
// certification conflict, 1213, answered to an autocommit statement on Galera) runs again
// and is granted. Mutant: Write without mysqlcluster.Retry: caught.
func TestMySQLLeaseCommitConflictRetried(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, n := testenv.ConflictDB(t, cfg, func(q string) bool { return strings.HasPrefix(q, "UPDATE leafd_leader") })
	m := NewMySQLLeases(db, 5*time.Second)
	t.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()
	if err := m.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.MarkOrdered(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	r0, err := m.Read(ctx, "o")
	if err != nil {
		t.Fatal(err)
	}
	n.Store(2)
	r1, ok, err := m.Write(ctx, "o", r0, "a", true, time.Minute)
	if err != nil || !ok || r1.Epoch != 1 {
		t.Fatalf("take after two conflicts: %+v %v %v; want granted, epoch 1", r1, ok, err)
	}
	if n.Load() >= 0 {
		t.Fatalf("%d conflicts left unused", n.Load())
	}
	n.Store(1)
	if r2, ok, err := m.Write(ctx, "o", r1, "a", false, time.Minute); err != nil || !ok || r2.Epoch != 1 {
		t.Fatalf("renewal after a conflict: %+v %v %v; want granted, epoch 1", r2, ok, err)
	}
}
