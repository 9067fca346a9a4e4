package e2e

// MySQL helpers: leafd on a MySQL DSN, a fresh database on the shared MariaDB of
// scripts/test.sh, and the test's own SQL for setup and fault injection.

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
)

// LeafTableDDL creates Leaf's own leaf_alloc table, as Leaf's schema has it: the table that
// `leafd adopt` takes over.
const LeafTableDDL = "CREATE TABLE `leaf_alloc` (`biz_tag` varchar(128) NOT NULL DEFAULT '', `max_id` bigint(20) NOT NULL DEFAULT '1'," +
	" `step` int(11) NOT NULL, `description` varchar(256) DEFAULT NULL," +
	" `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (`biz_tag`)) ENGINE=InnoDB"

// OpenSQL opens dsn for the test's own SQL; it is closed at cleanup.
func OpenSQL(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// SQLExec runs q or fails the test.
func SQLExec(t testing.TB, db *sql.DB, q string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// SQLInt runs a query for one integer or fails the test.
func SQLInt(t testing.TB, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var v int64
	if err := db.QueryRowContext(ctx, q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

// StartMySQL starts leafd (the binary) on dsn with extra flags.
func StartMySQL(t testing.TB, dsn string, extra ...string) *Leafd {
	t.Helper()
	return Start(t, append([]string{"--mysql-dsn", dsn}, extra...)...)
}

// SharedDB is a fresh database on the shared server of scripts/test.sh.
func SharedDB(t *testing.T) (string, *sql.DB) {
	t.Helper()
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	return dsn, OpenSQL(t, dsn)
}

// CreateTag creates tag through leafd (IDS.CREATE) and checks the row.
func CreateTag(t testing.TB, l *Leafd, db *sql.DB, tag string, step int64) {
	t.Helper()
	if _, err := l.Do("IDS.CREATE", tag, "STEP", step); err != nil {
		t.Fatalf("IDS.CREATE %s STEP %d: %v", tag, step, err)
	}
	if got := SQLInt(t, db, "SELECT step FROM leaf_alloc WHERE biz_tag = ?", tag); got != step {
		t.Fatalf("leaf_alloc.step of %s: got %d, want %d", tag, got, step)
	}
}

// Replicated starts a private MariaDB primary replicating to a replica, with database leafd
// created and replicated, and a proxy in front of the primary that moves like a virtual IP
// on failover. dsn reaches database leafd through the proxy.
func Replicated(t testing.TB) (r *testenv.Replication, px *Proxy, dsn string) {
	t.Helper()
	return ReplicatedEnv(t, nil, nil)
}

// ReplicatedEnv is Replicated with primaryEnv and replicaEnv added to each server's
// environment (e.g. testenv.FakeTime.Env: a replica whose clock is off).
func ReplicatedEnv(t testing.TB, primaryEnv, replicaEnv []string) (r *testenv.Replication, px *Proxy, dsn string) {
	t.Helper()
	r = testenv.StartReplicationEnv(t, primaryEnv, replicaEnv)
	r.Primary.Exec("CREATE DATABASE leafd")
	r.WaitCaughtUp(30 * time.Second)
	px = StartProxy(t, r.Primary.Addr())
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", px.Addr(), "leafd"
	return r, px, cfg.FormatDSN()
}
