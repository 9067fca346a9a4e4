package ordered

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/internal/testkit"
)

// TestMySQLLeaseRowWrites: Read and Write on MariaDB. The creating insert records the server;
// a write compares version, server and the server answering, and records the grant's length
// and the longest; a stale version changes nothing. Mutants: the version compare removed
// from the UPDATE: caught; the server compare removed: caught.
func TestMySQLLeaseRowWrites(t *testing.T) {
	m, db := openLeases(t, testenv.FreshDatabase(t, testenv.MySQLDSN(t)), "")
	ctx := context.Background()
	if _, err := m.Read(ctx, "plain"); !errors.Is(err, ErrNotOrdered) {
		t.Fatalf("Read of a tag not ordered: %v", err)
	}
	if err := m.MarkOrdered(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	r0, err := m.Read(ctx, "o")
	if err != nil || r0.Holder != "" || r0.Server == 0 || r0.Server != r0.At {
		t.Fatalf("new row: %+v %v, want free and the creating server recorded", r0, err)
	}
	ra, ok, err := m.Write(ctx, "o", r0, "a", true, 8*time.Second)
	if err != nil || !ok || ra.Epoch != 1 || ra.Version != 1 || ra.Longest != 8*time.Second {
		t.Fatalf("take: %+v %v %v", ra, ok, err)
	}
	if got, _ := m.Read(ctx, "o"); got.Expires == "" || withoutExpires(got) != ra {
		t.Fatalf("row read %+v, want what the write returned %+v", got, ra)
	}
	if _, ok, err := m.Write(ctx, "o", r0, "b", true, time.Second); err != nil || ok {
		t.Fatalf("write on a stale version: %v %v, want refused", ok, err)
	}
	rb, ok, err := m.Write(ctx, "o", ra, "a", false, 2*time.Second)
	if err != nil || !ok || rb.Epoch != 1 || rb.Longest != 8*time.Second {
		t.Fatalf("renewal with a shorter lease: %+v %v %v", rb, ok, err)
	}
	var lease, longest int64
	if err := db.QueryRowContext(ctx, "SELECT lease_us, longest_us FROM leafd_leader WHERE biz_tag = 'o'").Scan(&lease, &longest); err != nil || lease != 2e6 || longest != 8e6 {
		t.Fatalf("lease_us %d longest_us %d (%v), want 2e6 and 8e6", lease, longest, err)
	}
	// Another server wrote the row (a failover): a renewal from the row as we wrote it is
	// refused.
	if _, err := db.ExecContext(ctx, "UPDATE leafd_leader SET server_id = server_id + 1000"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := m.Write(ctx, "o", rb, "a", false, 2*time.Second); err != nil || ok {
		t.Fatalf("renewal after the server changed: %v %v, want refused", ok, err)
	}
	moved, _ := m.Read(ctx, "o")
	if moved.Server == moved.At {
		t.Fatalf("row after the server change: %+v", moved)
	}
	rc, ok, err := m.Write(ctx, "o", moved, "c", true, time.Second)
	if err != nil || !ok || rc.Server != rc.At {
		t.Fatalf("take of the moved row: %+v %v %v", rc, ok, err)
	}
	// Writes of a leafd that does not count versions: a renewal (expires moved) refuses a
	// take from the row read before it; a take (holder and epoch changed) refuses the
	// holder's renewal. Mutants: the expires or the holder compare removed: caught.
	seen, _ := m.Read(ctx, "o")
	if _, err := db.ExecContext(ctx, "UPDATE leafd_leader SET expires = expires + INTERVAL 1 SECOND"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := m.Write(ctx, "o", seen, "d", true, time.Second); err != nil || ok {
		t.Fatalf("take across an unversioned renewal: %v %v, want refused", ok, err)
	}
	if _, err := db.ExecContext(ctx, "UPDATE leafd_leader SET holder = 'old', epoch = epoch + 1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := m.Write(ctx, "o", rc, "c", false, time.Second); err != nil || ok {
		t.Fatalf("renewal across an unversioned take: %v %v, want refused", ok, err)
	}
	if _, err := db.ExecContext(ctx, "UPDATE leafd_leader SET holder = 'c', epoch = epoch - 1"); err != nil {
		t.Fatal(err)
	}
	// Release frees only the holder's own latest row.
	if err := m.Release(ctx, "o", rb); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Read(ctx, "o"); got.Holder != "c" {
		t.Fatalf("a stale release freed the row: %+v", got)
	}
	if err := m.Release(ctx, "o", rc); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Read(ctx, "o"); got.Holder != "" || got.Version != rc.Version+1 || got.Server != got.At {
		t.Fatalf("released row: %+v", got)
	}
}

// TestMySQLLeaderColumnsAdded: a leafd_leader of the earlier layout (no version, lease_us,
// longest_us) gets the columns at EnsureTable, twice without error; its rows read as
// version 0 and no recorded server (a failover to be settled).
func TestMySQLLeaderColumnsAdded(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE leafd_leader (biz_tag varchar(128) NOT NULL, holder varchar(255) NOT NULL DEFAULT '', epoch bigint NOT NULL DEFAULT 0, " +
			"expires datetime(3) NOT NULL DEFAULT '1970-01-02 00:00:00.000', server_id bigint NOT NULL DEFAULT 0, PRIMARY KEY (biz_tag)) ENGINE=InnoDB",
		"INSERT INTO leafd_leader (biz_tag) VALUES ('old')",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	m := NewMySQLLeases(db, 5*time.Second)
	defer m.Close()
	for range 2 {
		if err := m.EnsureTable(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r, err := m.Read(ctx, "old")
	if err != nil || r.Version != 0 || r.Server != 0 || r.At == 0 {
		t.Fatalf("old row: %+v %v", r, err)
	}
}

// TestMySQLLeaseTakeover: two leases on the database: b takes a's row only after it has read
// it unchanged for a lease on its own clock, once a stopped renewing; a is then refused.
func TestMySQLLeaseTakeover(t *testing.T) {
	m, _ := openLeases(t, testenv.FreshDatabase(t, testenv.MySQLDSN(t)), "")
	ctx := context.Background()
	if err := m.MarkOrdered(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Tag: "o", Length: 400 * time.Millisecond, Margin: 40 * time.Millisecond}
	cfg.Holder = "a"
	a, _ := New(cfg, m)
	cfg.Holder = "b"
	b, _ := New(cfg, m)
	sa, err := a.Renew(ctx)
	if err != nil || !sa.Leader {
		t.Fatalf("a: %+v, %v", sa, err)
	}
	first := time.Now()
	if sb, err := b.Renew(ctx); err != nil || sb.Leader || sb.Holder != "a" {
		t.Fatalf("b while a holds: %+v, %v", sb, err)
	}
	var sb State
	testkit.Poll(10*time.Second-time.Since(first), func() bool { // sb is checked below either way
		if sb, err = b.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if sb.Leader {
			if _, ok := a.Valid(); ok {
				t.Fatal("b was granted the lease while a still counts itself leader")
			}
		}
		return sb.Leader
	})
	if !sb.Leader || sb.Epoch != sa.Epoch+1 || !sb.NewTerm || time.Since(first) < cfg.Length {
		t.Fatalf("b after a stopped: %+v (a had %+v) after %v", sb, sa, time.Since(first))
	}
	if s, err := a.Renew(ctx); err != nil || s.Leader || s.Holder != "b" {
		t.Fatalf("a after b took over: %+v, %v", s, err)
	}
}

// TestMySQLLeaseTimeZones (fence: the lease is judged in UTC). The hazard: a lease row judged
// by NOW(3) against a DATETIME lets an instance whose sessions run in another time zone (a
// DSN's time_zone, or SET GLOBAL time_zone, or a DST change under SYSTEM) see a live lease as
// lapsed and take it: two leaders at once. Two instances with sessions ten hours apart:
// the second is refused while the first holds. Mutant: NOW(3) back in Acquire: caught.
func TestMySQLLeaseTimeZones(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	ctx := context.Background()
	west, _ := openLeases(t, dsn, "time_zone="+url.QueryEscape("'-05:00'"))
	east, _ := openLeases(t, dsn, "time_zone="+url.QueryEscape("'+05:00'"))
	if err := west.MarkOrdered(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Tag: "o", Length: 5 * time.Second, Margin: 500 * time.Millisecond}
	cfg.Holder = "a"
	a, _ := New(cfg, west)
	cfg.Holder = "b"
	b, _ := New(cfg, east)
	if sa, err := a.Renew(ctx); err != nil || !sa.Leader {
		t.Fatalf("a: %+v, %v", sa, err)
	}
	if sb, err := b.Renew(ctx); err != nil || sb.Leader || sb.Holder != "a" {
		t.Fatalf("b, in a session ten hours ahead, while a holds: %+v, %v (want refused, holder a)", sb, err)
	}
	if _, ok := a.Valid(); !ok {
		t.Fatal("a lost its lease")
	}
}

// TestMySQLOrderedOneSpelling (fence: an ordered tag answers to its stored spelling only). On
// a case-insensitive collation "mx" finds the leafd_leader row of "MX" (and the same
// leaf_alloc row): taken as ordered under its own name it would get a lease of its own, a
// second leader of one counter, and IDs would go back across the spellings. So the other
// spelling is ErrOtherSpelling, which Admit passes on (BADTAG). Mutant: the
// spelling compare removed: caught.
func TestMySQLOrderedOneSpelling(t *testing.T) {
	m, db := openLeases(t, testenv.FreshDatabase(t, testenv.MySQLDSN(t)), "")
	ctx := context.Background()
	if err := m.MarkOrdered(ctx, "MX"); err != nil {
		t.Fatal(err)
	}
	var collation string
	if err := db.QueryRowContext(ctx, "SELECT COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leafd_leader' AND COLUMN_NAME = 'biz_tag'").Scan(&collation); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.IsOrdered(ctx, "MX"); !ok || err != nil {
		t.Fatalf("IsOrdered(MX) = %v, %v", ok, err)
	}
	ok, err := m.IsOrdered(ctx, "mx")
	if strings.HasSuffix(collation, "_bin") {
		if ok || err != nil {
			t.Fatalf("IsOrdered(mx) on %s = %v, %v; want false", collation, ok, err)
		}
		return
	}
	if ok || !errors.Is(err, ErrOtherSpelling) {
		t.Fatalf("IsOrdered(mx) on %s = %v, %v; want ErrOtherSpelling", collation, ok, err)
	}
}

// openLeases opens dsn (with params added, if any) as the leases of one instance, with the
// table ensured.
func openLeases(t *testing.T, dsn, params string) (*MySQLLeases, *sql.DB) {
	t.Helper()
	if params != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + params
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	m := NewMySQLLeases(db, 5*time.Second)
	t.Cleanup(func() { _ = m.Close() }) // before db.Close: the lease statements' connection
	if err := m.EnsureTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, db
}

func withoutExpires(r Row) Row { r.Expires = ""; return r }
