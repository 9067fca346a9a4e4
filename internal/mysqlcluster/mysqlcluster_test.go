package mysqlcluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
)

// TestRetry: a rolled back transaction (1213 deadlock or certification conflict, 3101 Group
// Replication's) runs again, at most Attempts times; any other error, a wrapped driver error
// included only when it is one of those, ends it at once; a cancelled context stops it.
func TestRetry(t *testing.T) {
	ctx := context.Background()
	for _, num := range []uint16{1213, 3101} {
		calls := 0
		err := Retry(ctx, nil, func(context.Context) error {
			calls++
			if calls < 3 {
				return fmt.Errorf("commit: %w", &mysql.MySQLError{Number: num})
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Errorf("error %d twice: %v after %d calls, want success after 3", num, err, calls)
		}
	}
	calls, retries := 0, 0
	conflict := &mysql.MySQLError{Number: 1213}
	err := Retry(ctx, func(int, error) { retries++ }, func(context.Context) error { calls++; return conflict })
	if !errors.Is(err, conflict) || calls != Attempts || retries != Attempts-1 {
		t.Errorf("always a conflict: %v after %d calls (%d retries), want it after %d", err, calls, retries, Attempts)
	}
	for _, other := range []error{&mysql.MySQLError{Number: 1062}, mysql.ErrInvalidConn, context.DeadlineExceeded} {
		calls = 0
		err = Retry(ctx, nil, func(context.Context) error { calls++; return other })
		if !errors.Is(err, other) || calls != 1 {
			t.Errorf("%v: %d calls, want 1", other, calls)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	calls = 0
	if err := Retry(cctx, nil, func(context.Context) error { calls++; return conflict }); !errors.Is(err, conflict) || calls != 1 {
		t.Errorf("cancelled context: %v after %d calls, want the conflict after 1", err, calls)
	}
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func ident(t *testing.T, db *sql.DB, id Ident) (int64, string, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var a, c int64
	var b string
	if err := db.QueryRowContext(ctx, "SELECT "+id.Pair+", "+id.ID).Scan(&a, &b, &c); err != nil {
		t.Fatalf("SELECT %s, %s: %v", id.Pair, id.ID, err)
	}
	return a, b, c
}

// TestDetectServer: a single MariaDB is a Server, named by @@server_id.
func TestDetectServer(t *testing.T) {
	db := open(t, testenv.MySQLDSN(t))
	id, err := Detect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if id.Kind != Server {
		t.Fatalf("kind %v, want server", id.Kind)
	}
	var sid int64
	if err := db.QueryRow("SELECT @@server_id").Scan(&sid); err != nil {
		t.Fatal(err)
	}
	if a, _, c := ident(t, db, id); a != sid || c != sid {
		t.Fatalf("identity %d/%d, want @@server_id %d", a, c, sid)
	}
}

// TestDetectGalera: every member of a Galera cluster has the same identity (the state
// UUID's), which no 32-bit server_id can equal, though their server_ids differ.
func TestDetectGalera(t *testing.T) {
	g := testenv.StartGalera(t, 2)
	var ids [2][3]any
	for i, dsn := range g.DSNs("") {
		db := open(t, dsn)
		id, err := Detect(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		if id.Kind != Galera {
			t.Fatalf("node %d: kind %v, want galera", i, id.Kind)
		}
		a, b, c := ident(t, db, id)
		if a != c || a < 1<<60 || !IsGalera(b) || b != "galera:"+g.Nodes[i].Status("wsrep_cluster_state_uuid") {
			t.Fatalf("node %d: identity %d %q %d", i, a, b, c)
		}
		ids[i] = [3]any{a, b, c}
	}
	if ids[0] != ids[1] {
		t.Fatalf("members' identities differ: %v and %v", ids[0], ids[1])
	}
}

// TestNoIdentity: a NULL identity scans as ErrNoIdentity, which Retry runs again, so that an
// identity read inside a transaction aborted meanwhile is neither a failover nor a failure.
func TestNoIdentity(t *testing.T) {
	var n Name
	var id ID
	if err := n.Scan(nil); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("Name.Scan(nil): %v", err)
	}
	if err := id.Scan(nil); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("ID.Scan(nil): %v", err)
	}
	if err := n.Scan([]byte("galera:x")); err != nil || n != "galera:x" {
		t.Errorf("Name.Scan: %q, %v", n, err)
	}
	if err := id.Scan(int64(7)); err != nil || id != 7 {
		t.Errorf("ID.Scan: %d, %v", id, err)
	}
	calls := 0
	err := Retry(context.Background(), nil, func(context.Context) error {
		calls++
		if calls == 1 {
			return fmt.Errorf("sql: Scan error on column index 2: %w", ErrNoIdentity)
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Errorf("a NULL identity once: %v after %d calls, want success after 2", err, calls)
	}
}
