package mysqlstore

import (
	"context"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// TestMySQLPausedHolderReleasesRow: an instance paused (SIGSTOP, a VM or GC pause, a
// partition that keeps the TCP connection up) inside an allocation transaction holds the
// tag's leaf_alloc row lock. Without a server-side bound the lock stays until the server's
// wait_timeout (8 hours by default), and every other instance's allocation of the tag fails
// meanwhile (UNAVAILABLE once its segments are used up). The store's sessions carry a short
// wait_timeout (idleSessionTimeout), so the server ends the paused holder's session and rolls
// its transaction back: the other instance allocates again within seconds, and the paused
// holder's transaction cannot commit afterwards (its range was never granted).
func TestMySQLPausedHolderReleasesRow(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	short := func(c *MySQLConfig) { c.QueryTimeout = time.Second }
	paused := openTestMySQL(t, dsn, short)
	other := openTestMySQL(t, dsn, short)
	ctx := context.Background()
	if err := paused.Create(ctx, segment.Tag{Name: "held", Step: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := paused.Allocate(ctx, "held", 0); err != nil {
		t.Fatal(err)
	}

	// The paused instance: a session of its pool, inside an allocation transaction that
	// locked the row, then nothing more (the process is stopped).
	conn, err := paused.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // before conn.Close, which waits for the transaction
	var maxID int64
	if err := tx.QueryRowContext(ctx, "SELECT max_id FROM leaf_alloc WHERE biz_tag = ? FOR UPDATE", "held").Scan(&maxID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE leaf_alloc SET max_id = max_id + 10 WHERE biz_tag = ?", "held"); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	bound := idleSessionTimeout(time.Second) + 10*time.Second // generous: a loaded machine
	var a segment.Alloc
	for {
		a, err = other.Allocate(ctx, "held", 0)
		if err == nil {
			break
		}
		if time.Since(start) > bound {
			t.Fatalf("the other instance could not allocate for %v while a paused instance held the row: %v", bound, err)
		}
	}
	t.Logf("the other instance allocated after %v (session idle bound %v)", time.Since(start).Round(time.Millisecond), idleSessionTimeout(time.Second))
	if a.MaxID-10 < maxID {
		t.Fatalf("range [%d, %d) below max_id %d read by the paused holder", a.MaxID-10, a.MaxID, maxID)
	}
	// The paused holder resumes: its transaction was rolled back with its session.
	if err := tx.Commit(); err == nil {
		t.Fatalf("the paused holder's transaction committed after its session was ended")
	}
	var after int64
	if err := other.db.QueryRowContext(ctx, "SELECT max_id FROM leaf_alloc WHERE biz_tag = ?", "held").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != a.MaxID {
		t.Fatalf("max_id %d after the paused holder resumed, want %d (its update must not survive)", after, a.MaxID)
	}
}
