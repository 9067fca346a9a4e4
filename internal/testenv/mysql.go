package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQLDSN returns the DSN in LEAFD_TEST_MYSQL_DSN (a server started by scripts/test.sh or
// by the developer). When it is unset the test is skipped, or fails under CI or
// LEAFD_TEST_REQUIRE. Use FreshDatabase for a database of the test's own.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvMySQLDSN)
	if dsn == "" {
		missing(t, "%s is not set (a go-sql-driver DSN such as root@tcp(127.0.0.1:3306)/ of a MySQL or MariaDB server)", EnvMySQLDSN)
	}
	if _, err := mysql.ParseDSN(dsn); err != nil {
		t.Fatalf("testenv: %s: %v", EnvMySQLDSN, err)
	}
	return dsn
}

// FreshDatabase creates a database named leafd_t_<random> on the server of dsn and returns
// dsn pointing at it. The database is dropped when the test ends (a failure to drop, e.g.
// because the test stopped the server, is only logged).
func FreshDatabase(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("testenv: bad DSN: %v", err)
	}
	name := fmt.Sprintf("leafd_t_%016x", rand.Uint64())
	admin := cfg.Clone()
	admin.DBName = ""
	if admin.Timeout == 0 {
		admin.Timeout = 5 * time.Second
	}
	exec := func(ctx context.Context, stmt string) error {
		db, err := sql.Open("mysql", admin.FormatDSN())
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, stmt)
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := exec(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := exec(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// MariaDB is a private mariadbd for one test: a fresh data directory, root without password
// over TCP on a free 127.0.0.1 port, durable commits (innodb_flush_log_at_trx_commit=1).
// It is killed and its files removed when the test ends.
type MariaDB struct {
	t    testing.TB
	port int
	dir  string
	proc *proc
}

// mariadbOpts are given to both mariadb-install-db and mariadbd: the log file size must
// agree, and small files keep the data directory about 25 MB.
var mariadbOpts = []string{
	"--innodb-log-file-size=8M",
	"--innodb-buffer-pool-size=64M",
	"--innodb-flush-log-at-trx-commit=1",
	"--skip-name-resolve",
}

// StartMariaDB installs a data directory with mariadb-install-db (or mysql_install_db) and
// starts mariadbd (or mysqld) on it, waiting until it answers. extra are more mariadbd
// options (e.g. --server-id=2 --log-bin). Missing binaries skip the test, or fail it under CI
// or LEAFD_TEST_REQUIRE.
func StartMariaDB(t testing.TB, extra ...string) *MariaDB {
	t.Helper()
	return StartMariaDBEnv(t, nil, extra...)
}

// StartMariaDBEnv is StartMariaDB with env added to the server's environment (e.g.
// FakeTime.Env: a server whose clock the test steps).
func StartMariaDBEnv(t testing.TB, env []string, extra ...string) *MariaDB {
	t.Helper()
	sbin := []string{"/usr/sbin", "/usr/libexec", "/usr/local/sbin", "/usr/local/mysql/bin"}
	server, ok := lookBin([]string{"mariadbd", "mysqld"}, sbin...)
	if !ok {
		missing(t, "mariadbd not found (install the mariadb-server package)")
	}
	install, ok := lookBin([]string{"mariadb-install-db", "mysql_install_db"}, append([]string{"/usr/bin"}, sbin...)...)
	if !ok {
		missing(t, "mariadb-install-db not found (install the mariadb-server package)")
	}

	// Not t.TempDir: the socket path must stay under the 108-byte sun_path limit.
	dir, err := os.MkdirTemp("", "leafd-mariadb-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	datadir := filepath.Join(dir, "data")
	// A private tmpdir, as for the install (dataDirTemplate): servers of concurrent tests
	// (and other users of /tmp) must not remove each other's temporary tables.
	tmpdir := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmpdir, 0o700); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	opts := append(slices.Clone(mariadbOpts), "--tmpdir="+tmpdir)

	var user []string
	if os.Geteuid() == 0 {
		user = []string{"--user=root"} // mariadbd refuses to run as root otherwise
	}
	args := append([]string{"--no-defaults", "--auth-root-authentication-method=normal",
		"--skip-test-db"}, user...)
	args = append(args, mariadbOpts...)
	if err := installDataDir(install, server, datadir, args); err != nil {
		t.Fatal(err)
	}

	m := &MariaDB{t: t, dir: dir}
	// The free port can be taken by someone else before mariadbd binds it: retry a few times.
	for attempt := 1; ; attempt++ {
		m.port = freePort(t)
		argv := append([]string{server, "--no-defaults",
			"--datadir=" + datadir,
			"--socket=" + filepath.Join(dir, "mysqld.sock"),
			"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
			"--port=" + strconv.Itoa(m.port),
			"--bind-address=127.0.0.1",
		}, user...)
		argv = append(argv, opts...)
		argv = append(argv, extra...)
		m.proc = &proc{t: t, name: "mariadbd", argv: argv, env: env, logPath: filepath.Join(dir, "mariadbd.log")}
		err := m.start()
		if err == nil {
			break
		}
		m.proc.terminate(false, 0)
		if attempt == 3 || !strings.Contains(m.proc.logTail(), "Bind on TCP/IP port") {
			t.Fatalf("testenv: %v\n--- mariadbd log:\n%s", err, m.proc.logTail())
		}
	}
	t.Cleanup(func() { m.proc.terminate(false, 0) })
	return m
}

func (m *MariaDB) start() error {
	if err := m.proc.start(); err != nil {
		return err
	}
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = m.Addr()
	cfg.Timeout = time.Second
	cfg.ReadTimeout = time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	return m.proc.waitReady(time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return db.PingContext(ctx)
	})
}

// Addr is the server's host:port.
func (m *MariaDB) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.port) }

// DSN returns a go-sql-driver DSN for root on database db ("" for none). It stays valid
// across Kill and Start: the port and data directory do not change.
func (m *MariaDB) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = m.Addr()
	cfg.DBName = db
	return cfg.FormatDSN()
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing answers, like a
// hung or partitioned database.
func (m *MariaDB) Pause() { m.t.Helper(); m.proc.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (m *MariaDB) Resume() { m.t.Helper(); m.proc.signal(syscall.SIGCONT) }

// Kill ends the server with SIGKILL, like a crash; committed data survives for Start.
func (m *MariaDB) Kill() { m.proc.terminate(false, 0) }

// Stop shuts the server down cleanly (SIGTERM), killing it if that takes over 30s.
func (m *MariaDB) Stop() { m.proc.terminate(true, 30*time.Second) }

// Start restarts a killed or stopped server on the same port and data directory and waits
// until it answers. A server that dies during startup (crash recovery after Kill) is logged
// and started again, up to three times in all.
func (m *MariaDB) Start() {
	m.t.Helper()
	for attempt := 1; ; attempt++ {
		err := m.start()
		if err == nil {
			return
		}
		m.proc.terminate(false, 0)
		if attempt == 3 || !errors.Is(err, errExited) {
			m.t.Fatalf("testenv: restart: %v\n--- mariadbd log:\n%s", err, m.proc.logTail())
		}
		m.t.Logf("testenv: mariadbd died during restart, retrying\n--- mariadbd log:\n%s", m.proc.logTail())
	}
}
