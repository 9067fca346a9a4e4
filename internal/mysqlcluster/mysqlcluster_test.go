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
// UUID's), which no 32-bit server_id can equal, though their server_ids differ. Its state
// column reads the member's seqno, Synced and generation; a causal read confirms it; a
// generation recorded on one member changes the identity on every member, and is never
// lowered nor written on a member of another cluster.
func TestDetectGalera(t *testing.T) {
	g := testenv.StartGalera(t, 2)
	g.Nodes[0].Exec("CREATE DATABASE d")
	ctx := context.Background()
	var dbs [2]*sql.DB
	var idents [2]Ident
	read := func(i int) [3]any {
		t.Helper()
		a, b, c := ident(t, dbs[i], idents[i])
		return [3]any{a, b, c}
	}
	uuid := g.Nodes[0].Status("wsrep_cluster_state_uuid")
	for i, dsn := range g.DSNs("d") {
		dbs[i] = open(t, dsn)
		id, err := Detect(ctx, dbs[i])
		if err != nil {
			t.Fatal(err)
		}
		if id.Kind != Galera || !id.withGen {
			t.Fatalf("node %d: kind %v (generations %v), want galera with generations", i, id.Kind, id.withGen)
		}
		idents[i] = id
		a, b, c := ident(t, dbs[i], id)
		if a != c || a < 1<<60 || !IsGalera(b) || b != "galera:"+uuid {
			t.Fatalf("node %d: identity %d %q %d", i, a, b, c)
		}
	}
	gen0 := read(0)
	if r := read(1); r != gen0 {
		t.Fatalf("members' identities differ: %v and %v", gen0, r)
	}
	var st State
	if err := dbs[1].QueryRow("SELECT " + idents[1].State).Scan(&st); err != nil {
		t.Fatal(err)
	}
	if st.UUID != uuid || st.Seqno <= 0 || st.Local != Synced || st.Gen != 0 {
		t.Fatalf("state %+v, want uuid %s, a seqno, Synced, generation 0", st, uuid)
	}
	src := idents[1].On(dbs[1])
	c, err := src.Confirm(ctx)
	if err != nil || c.UUID != uuid || c.Seqno < st.Seqno || c.Local != Synced {
		t.Fatalf("causal read: %+v, %v", c, err)
	}
	if err := src.Begin(ctx, "00000000-1111-2222-3333-444444444444", 5, 1); err != nil {
		t.Fatal(err)
	}
	if err := src.Begin(ctx, uuid, 1, c.Seqno); err != nil {
		t.Fatal(err)
	}
	if err := src.Begin(ctx, uuid, 0, 1); err != nil { // never lowers it
		t.Fatal(err)
	}
	var rows int
	if err := dbs[0].QueryRow("SET STATEMENT wsrep_sync_wait = 1 FOR SELECT COUNT(*) FROM leafd_generation").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("leafd_generation: %d rows (%v), want 1: a row only on a member of its cluster", rows, err)
	}
	for deadline := time.Now().Add(10 * time.Second); read(0) == gen0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("generation 1 not seen on member 0 within 10 s")
		}
	}
	gen1 := read(0)
	if r := read(1); r != gen1 || gen1[1] != "galera:"+uuid+"/1" || gen1[0] == gen0[0] || gen1[0].(int64) < 1<<60 {
		t.Fatalf("generation 1: identities %v and %v (generation 0: %v)", gen1, r, gen0)
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
