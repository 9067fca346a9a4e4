package mysqlworker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
)

// TestSQLConflictRetried: a worker-id write the server rolled back (1213: a certification
// conflict on a Galera member, applied nowhere) runs again and succeeds.
func TestSQLConflictRetried(t *testing.T) {
	dsn, _ := sqlFixture(t)
	dcfg, err := driverConfig(dsn, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	db, n := testenv.ConflictDB(t, dcfg, func(q string) bool {
		return strings.HasPrefix(q, "UPDATE") || strings.HasPrefix(q, "INSERT")
	})
	st := &sqlStore{db: db, timeout: 2 * time.Second}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	n.Store(2)
	if ok, err := st.Insert(ctx, 3, claim{Holder: "a", Token: "ta", Lease: time.Hour}); !ok || err != nil {
		t.Fatalf("insert after two conflicts: %v %v", ok, err)
	}
	n.Store(1)
	if ok, err := st.Renew(ctx, 3, 1, "ta", 1000, time.Hour); !ok || err != nil {
		t.Fatalf("renewal after a conflict: %v %v", ok, err)
	}
	if n.Load() >= 0 {
		t.Fatalf("%d conflicts left unused", n.Load())
	}
}
