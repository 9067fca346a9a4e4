package testenv

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func query(db *sql.DB, timeout time.Duration, q string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var s string
	err := db.QueryRowContext(ctx, q).Scan(&s)
	return s, err
}

func TestMySQLDSN(t *testing.T) {
	dsn := FreshDatabase(t, MySQLDSN(t))
	db := openDB(t, dsn)
	got, err := query(db, 10*time.Second, "SELECT DATABASE()")
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if !strings.HasPrefix(got, "leafd_t_") {
		t.Fatalf("got database %q, want leafd_t_*", got)
	}
}

func TestMariaDB(t *testing.T) {
	m := StartMariaDB(t)
	dsn := FreshDatabase(t, m.DSN(""))
	db := openDB(t, dsn)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE kv (k varchar(16) PRIMARY KEY, v bigint) ENGINE=InnoDB"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO kv VALUES ('a', 42)"); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if got, err := query(db, 5*time.Second, "SELECT @@innodb_flush_log_at_trx_commit"); err != nil || got != "1" {
		t.Fatalf("innodb_flush_log_at_trx_commit: got %q, %v, want 1", got, err)
	}

	m.Pause()
	start := time.Now()
	if _, err := query(db, 500*time.Millisecond, "SELECT v FROM kv"); err == nil {
		t.Fatal("query on a paused server succeeded")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("query on a paused server took %v, want about its 500ms timeout", d)
	}
	m.Resume()
	if got, err := query(db, 5*time.Second, "SELECT v FROM kv"); err != nil || got != "42" {
		t.Fatalf("after Resume: got %q, %v, want 42", got, err)
	}

	m.Kill()
	if _, err := query(db, 2*time.Second, "SELECT v FROM kv"); err == nil {
		t.Fatal("query on a killed server succeeded")
	}
	m.Start()
	if got, err := query(db, 5*time.Second, "SELECT v FROM kv"); err != nil || got != "42" {
		t.Fatalf("after kill and Start: got %q, %v, want the committed 42", got, err)
	}

	m.Stop()
	m.Start()
	if got, err := query(db, 5*time.Second, "SELECT v FROM kv"); err != nil || got != "42" {
		t.Fatalf("after Stop and Start: got %q, %v, want 42", got, err)
	}
}

func TestZKAddr(t *testing.T) {
	out, err := FourLetter(ZKAddr(t), "ruok", 5*time.Second)
	if err != nil || out != "imok" {
		t.Fatalf("ruok: got %q, %v, want imok", out, err)
	}
}

func TestZooKeeper(t *testing.T) {
	z := StartZooKeeper(t)
	if out, err := FourLetter(z.Addr(), "ruok", time.Second); err != nil || out != "imok" {
		t.Fatalf("ruok: got %q, %v, want imok", out, err)
	}
	c, _, err := zk.Connect([]string{z.Addr()}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close()
	if _, err := c.Create("/leafd-testenv", []byte("x"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatalf("create: %v", err)
	}

	z.Pause()
	if _, err := FourLetter(z.Addr(), "ruok", 300*time.Millisecond); err == nil {
		t.Fatal("paused server answered ruok")
	}
	z.Resume()
	if out, err := FourLetter(z.Addr(), "ruok", 5*time.Second); err != nil || out != "imok" {
		t.Fatalf("after Resume: got %q, %v, want imok", out, err)
	}

	z.Kill()
	if _, err := FourLetter(z.Addr(), "ruok", time.Second); err == nil {
		t.Fatal("killed server answered ruok")
	}
	z.Start()
	// The client reconnects by itself; the persistent node survived the kill.
	deadline := time.Now().Add(15 * time.Second)
	for {
		data, _, err := c.Get("/leafd-testenv")
		if err == nil {
			if string(data) != "x" {
				t.Fatalf("got %q, want x", data)
			}
			break
		}
		if time.Now().After(deadline) || !(errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)) {
			t.Fatalf("get after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	z.Stop()

	// Another listener holds the port for the first second of the restart: Start waits it out.
	l, err := net.Listen("tcp", z.Addr())
	if err != nil {
		t.Fatalf("hold the stopped server's port: %v", err)
	}
	time.AfterFunc(time.Second, func() { _ = l.Close() })
	z.Start()
	if out, err := FourLetter(z.Addr(), "ruok", 5*time.Second); err != nil || out != "imok" {
		t.Fatalf("after a restart whose port was taken for a second: got %q, %v, want imok", out, err)
	}
}

// TestReplication: lag on demand, promotion that loses exactly the unapplied transactions,
// and the old primary rejoining as a replica of the new one.
func TestReplication(t *testing.T) {
	r := StartReplication(t)
	r.Primary.Exec("CREATE DATABASE d", "CREATE TABLE d.t (n INT PRIMARY KEY) ENGINE=InnoDB", "INSERT INTO d.t VALUES (1)")
	r.WaitCaughtUp(30 * time.Second)
	r.StopApplier()
	r.Primary.Exec("INSERT INTO d.t VALUES (2)", "INSERT INTO d.t VALUES (3)", "INSERT INTO d.t VALUES (4)")
	if lag := r.Written() - r.Applied(); lag != 3 {
		t.Fatalf("lag: got %d transactions, want 3", lag)
	}
	old := r.Primary
	if lost := r.Promote(); lost != 3 {
		t.Fatalf("Promote: lost %d transactions, want 3", lost)
	}
	if r.Replica != old {
		t.Fatal("Promote did not swap the roles")
	}
	if got := r.Primary.QueryString("SELECT COUNT(*) FROM d.t"); got != "1" {
		t.Fatalf("promoted replica: got %s rows, want 1 (the 3 unapplied ones lost)", got)
	}
	r.Primary.Exec("INSERT INTO d.t VALUES (10)")
	r.Rejoin("d")
	r.WaitCaughtUp(30 * time.Second)
	if got := r.Replica.QueryString("SELECT GROUP_CONCAT(n ORDER BY n) FROM d.t"); got != "1,10" {
		t.Fatalf("rejoined old primary: got rows %s, want 1,10 (the new primary's data)", got)
	}
	// And back: the rejoined server can be promoted in turn.
	r.Primary.Exec("INSERT INTO d.t VALUES (11)")
	r.WaitCaughtUp(30 * time.Second)
	if lost := r.Promote(); lost != 0 {
		t.Fatalf("second Promote: lost %d, want 0", lost)
	}
	if got := r.Primary.QueryString("SELECT GROUP_CONCAT(n ORDER BY n) FROM d.t"); got != "1,10,11" {
		t.Fatalf("second promotion: got rows %s, want 1,10,11", got)
	}
}

// TestZKEnsemble: three members elect one leader; with the leader killed the other two elect
// another, and the killed one rejoins.
func TestZKEnsemble(t *testing.T) {
	start := time.Now()
	e := StartZKEnsemble(t, 3)
	t.Logf("ensemble of 3 ready in %v on %s", time.Since(start).Round(time.Millisecond), e.Connect())
	for _, z := range e.Members {
		if z.port >= 32768 {
			t.Errorf("member port %d: want below 32768", z.port)
		}
	}
	l := e.WaitLeader(-1, 30*time.Second)
	e.Members[l].Kill()
	killed := time.Now()
	nl := e.WaitLeader(l, 30*time.Second)
	t.Logf("leader %d killed; %d leads after %v", l, nl, time.Since(killed).Round(time.Millisecond))
	e.Members[l].Start()
	if got := e.Leader(); got != nl {
		t.Errorf("after the old leader rejoined: leader %d, want %d", got, nl)
	}
}

// TestServerPortBelowEphemeral: every port ServerPort picks is below the machine's ephemeral
// range (where no outgoing connection takes it as its source port) and free to bind.
func TestServerPortBelowEphemeral(t *testing.T) {
	eph := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > serverPortLow+1000 {
				eph = n
			}
		}
	}
	for range 100 {
		p := ServerPort(t)
		if p < serverPortLow || p >= eph || p >= serverPortHigh {
			t.Fatalf("ServerPort: %d, want in [%d, %d)", p, serverPortLow, min(eph, serverPortHigh))
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("ServerPort: %d is not free to bind: %v", p, err)
		}
		_ = l.Close()
	}
}
