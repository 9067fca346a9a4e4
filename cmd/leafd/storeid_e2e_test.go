package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/e2e"
)

// refusedStart runs the binary with args and wants it refused at start (exit 1; 2 for a
// configuration error) with an error containing want; a start that is not refused is killed
// after 30 s and fails the test.
func refusedStart(t *testing.T, want string, env []string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2e.Binary(), append(args, "--addr", "127.0.0.1:0", "--http-addr", "", "--log-format", "json")...)
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || (ee.ExitCode() != 1 && ee.ExitCode() != 2) {
		t.Fatalf("leafd %s: got %v, want refused (exit 1 or 2):\n%s", strings.Join(args, " "), err, e2e.Tail(string(out), 20))
	}
	if !strings.Contains(string(out), want) {
		t.Errorf("leafd %s: got\n%s\nwant an error with %q", strings.Join(args, " "), e2e.Tail(string(out), 20), want)
	}
}

// TestStoreSwitchRefused: a data dir records the store it served. A MySQL data dir started
// without its DSN (a misspelled variable, a lost secret) or with another database's is
// refused, naming --switch-store; the same database behind another address (a failover
// through a new proxy) is accepted; --switch-store serves the new store and records it. An
// embedded data dir started on MySQL is refused too; a fresh data dir takes any store.
func TestStoreSwitchRefused(t *testing.T) {
	t.Parallel()
	dsnA, dbA := e2e.SharedDB(t)
	dsnB, _ := e2e.SharedDB(t)
	dir := t.TempDir()
	l := e2e.StartMySQL(t, dsnA, "--data-dir", dir, "--addr", "127.0.0.1:0", "--http-addr", "")
	e2e.CreateTag(t, l, dbA, "orders", 100)
	if _, err := l.Incr("orders"); err != nil {
		t.Fatal(err)
	}
	if err := l.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	id := e2e.SQLInt(t, dbA, "SELECT COUNT(*) FROM leafd_identity WHERE id = 1 AND uuid <> ''")
	if id != 1 {
		t.Fatalf("leafd_identity of the database: %d rows, want 1", id)
	}

	refusedStart(t, "a MySQL data dir started without its DSN", nil, "--data-dir", dir)
	refusedStart(t, "did you mean LEAFD_MYSQL_DSN", []string{"LEAFD_MYSQL_DNS=" + dsnA}, "--data-dir", dir)
	refusedStart(t, "another database: its leafd_identity differs", nil, "--data-dir", dir, "--mysql-dsn", dsnB)

	// The same database through another address: the same identity, served.
	mc, err := mysql.ParseDSN(dsnA)
	if err != nil {
		t.Fatal(err)
	}
	px := e2e.StartProxy(t, mc.Addr)
	mc.Addr = px.Addr()
	l = e2e.StartMySQL(t, mc.FormatDSN(), "--data-dir", dir, "--addr", "127.0.0.1:0", "--http-addr", "")
	if _, err := l.Incr("orders"); err != nil {
		t.Fatalf("INCR on the same database at another address: %v", err)
	}
	l.WaitLog("the same database at another address", 10*time.Second)
	if err := l.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	// --switch-store: database B from now on; A is then the other one.
	l = e2e.StartMySQL(t, dsnB, "--data-dir", dir, "--switch-store", "--addr", "127.0.0.1:0", "--http-addr", "")
	l.WaitLog("serving another store (--switch-store)", 10*time.Second)
	if err := l.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	refusedStart(t, "another database", nil, "--data-dir", dir, "--mysql-dsn", dsnA)

	// An embedded data dir is not started on MySQL; a fresh one takes either.
	emb := e2e.Start(t, "--addr", "127.0.0.1:0", "--http-addr", "")
	if _, err := emb.Incr("orders"); err != nil {
		t.Fatal(err)
	}
	if err := emb.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	refusedStart(t, "the embedded store, not MySQL", nil, "--data-dir", emb.DataDir, "--mysql-dsn", dsnA)
	emb.Restart()
}
