package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// certConflict is what a Galera member answers at COMMIT when another member's transaction
// on the same rows was certified first: the transaction was rolled back on every member.
var certConflict = &mysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'},
	Message: "Deadlock found when trying to get lock; try restarting transaction (injected at COMMIT)"}

// failCommits points s at dsn through a connector whose next n COMMITs (n read at each
// COMMIT) roll back and answer certConflict.
func failCommits(t *testing.T, s *MySQLStore, dsn string, n *atomic.Int64) {
	t.Helper()
	dcfg, err := driverConfig(MySQLConfig{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(testenv.FaultConnector(c, testenv.Faults{Commit: func() error {
		if n.Add(-1) >= 0 {
			return certConflict
		}
		return nil
	}}))
	old := s.db
	s.db = db
	t.Cleanup(func() { _ = old.Close() })
}

// TestCommitConflictRetried: an allocation and creations whose COMMIT answers a
// certification conflict (1213, rolled back everywhere) run again and succeed, granting
// the range once; a conflict at every attempt fails after deadlockRetries commits.
func TestCommitConflictRetried(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := fenced(t, dsn)
	ctx := context.Background()
	if err := s.Create(ctx, segment.Tag{Name: "c", Step: 10}); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	failCommits(t, s, dsn, &n)

	before := maxIDOf(t, dsn, "c")
	n.Store(2)
	a, err := s.Allocate(ctx, "c", 0)
	if err != nil {
		t.Fatalf("allocation after two conflicts at COMMIT: %v", err)
	}
	if a.MaxID != before+10 || maxIDOf(t, dsn, "c") != before+10 {
		t.Fatalf("range end %d, max_id %d; want %d (granted once)", a.MaxID, maxIDOf(t, dsn, "c"), before+10)
	}
	if n.Load() >= 0 || s.Deadlocks() != 2 {
		t.Fatalf("conflicts left %d, retries counted %d; want all used and 2", n.Load(), s.Deadlocks())
	}

	n.Store(1)
	if err := s.Create(ctx, segment.Tag{Name: "d", Step: 10}); err != nil {
		t.Fatalf("creation after a conflict at COMMIT: %v", err)
	}
	// Concurrent creations (a batch, when they meet): the batch's COMMIT conflicts.
	n.Store(1)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Create(ctx, segment.Tag{Name: fmt.Sprintf("b%d", i), Step: 10})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("creation b%d after a conflict at COMMIT: %v", i, err)
		}
	}
	if got := sqlQuery(t, dsn, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = 'd' OR biz_tag LIKE 'b%'"); got != "9" {
		t.Errorf("created rows: %s, want 9", got)
	}

	before = maxIDOf(t, dsn, "c")
	n.Store(1 << 30)
	if _, err := s.Allocate(ctx, "c", 0); !errors.Is(err, certConflict) {
		t.Fatalf("allocation with a conflict at every COMMIT: %v, want the conflict", err)
	}
	if used := 1<<30 - n.Load(); used != deadlockRetries {
		t.Errorf("%d commits tried, want %d (bounded)", used, deadlockRetries)
	}
	if got := maxIDOf(t, dsn, "c"); got != before {
		t.Errorf("max_id %d after rolled back allocations, want %d", got, before)
	}
}
