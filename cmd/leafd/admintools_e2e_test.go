package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/leafd/leafd/internal/e2e"
)

// toolCmd runs `leafd args...` with only env beside PATH (none of the test's own variables),
// and returns its output and exit status.
func toolCmd(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	return e2e.RunTool(t, 90*time.Second, append([]string{}, env...), args...)
}

// TestAdminToolsReadServerOptions: adopt, raise-max-id and health read the database, the
// password and the admin address as the server does: adopt with only LEAFD_MYSQL_DSN set,
// raise-max-id with LEAFD_MYSQL_DSN_FILE and LEAFD_REQUIREPASS_FILE against an instance that
// requires the password, health with LEAFD_HTTP_ADDR and the password from LEAFD_CONFIG's file option.
func TestAdminToolsReadServerOptions(t *testing.T) {
	t.Parallel()
	dsn, db := e2e.SharedDB(t)
	e2e.SQLExec(t, db, e2e.LeafTableDDL)
	e2e.SQLExec(t, db, "INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('order', 5000001, 2000)")
	out, status := toolCmd(t, []string{"LEAFD_MYSQL_DSN=" + dsn}, "adopt", "--dry-run")
	if status != 0 || !strings.Contains(out, "would adopt") {
		t.Fatalf("adopt --dry-run with LEAFD_MYSQL_DSN: exit %d, want 0 listing order:\n%s", status, out)
	}
	out, status = toolCmd(t, []string{"LEAFD_MYSQL_DSN=" + dsn}, "adopt")
	if status != 0 || !strings.Contains(out, "adopted") {
		t.Fatalf("adopt with LEAFD_MYSQL_DSN: exit %d, want 0:\n%s", status, out)
	}
	if out, status := toolCmd(t, nil, "adopt"); status != 2 || !strings.Contains(out, "LEAFD_MYSQL_DSN") {
		t.Errorf("adopt without a database: exit %d, want 2 naming LEAFD_MYSQL_DSN:\n%s", status, out)
	}

	dir := t.TempDir()
	write := func(name, content string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	passFile, dsnFile := write("pass", "s3cret"), write("dsn", dsn)
	l := e2e.Start(t, "--mysql-dsn-file", dsnFile, "--requirepass-file", passFile, "--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0")
	c := redis.NewClient(&redis.Options{Addr: l.Addr, Password: "s3cret", MaxRetries: -1})
	defer c.Close()
	v, err := c.Incr(context.Background(), "order").Result()
	if err != nil || v != 5000001 {
		t.Fatalf("INCR order: got %d, %v; want 5000001", v, err)
	}
	env := []string{"LEAFD_MYSQL_DSN_FILE=" + dsnFile, "LEAFD_REQUIREPASS_FILE=" + passFile}
	out, status = toolCmd(t, env, "raise-max-id", "--instances", l.Addr, "--dry-run")
	if status != 0 || !strings.Contains(out, "order") || !strings.Contains(out, "dry run") {
		t.Fatalf("raise-max-id --dry-run with LEAFD_MYSQL_DSN_FILE and LEAFD_REQUIREPASS_FILE: exit %d, want 0 listing order:\n%s", status, out)
	}
	if out, status := toolCmd(t, []string{"LEAFD_MYSQL_DSN_FILE=" + dsnFile}, "raise-max-id", "--instances", l.Addr, "--dry-run"); status != 1 || !strings.Contains(out, "NOAUTH") {
		t.Errorf("raise-max-id without the password: exit %d, want 1 with NOAUTH:\n%s", status, out)
	}
	conf := write("leafd.conf", "requirepass-file "+passFile)
	if out, status := toolCmd(t, []string{"LEAFD_HTTP_ADDR=" + l.HTTPAddr, "LEAFD_CONFIG=" + conf}, "health"); status != 0 {
		t.Errorf("health with LEAFD_HTTP_ADDR and the password from LEAFD_CONFIG: exit %d, want 0:\n%s", status, out)
	}
	if out, status := toolCmd(t, []string{"LEAFD_HTTP_ADDR=" + l.HTTPAddr}, "health"); status != 1 {
		t.Errorf("health without the token: exit %d, want 1:\n%s", status, out)
	}
}

// TestAdoptGrants: adopt checks its privileges before it reads an instance or writes a row,
// and names the missing GRANT: SLAVE MONITOR (MariaDB) for the replication status, even for
// a dry run; CREATE for leafd_fence when it writes.
func TestAdoptGrants(t *testing.T) {
	t.Parallel()
	dsn, db := e2e.SharedDB(t)
	e2e.SQLExec(t, db, e2e.LeafTableDDL)
	e2e.SQLExec(t, db, "INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('order', 5000001, 2000)")
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	user := "u_" + strings.TrimPrefix(mc.DBName, "leafd_t_")
	if len(user) > 32 {
		user = user[:32]
	}
	e2e.SQLExec(t, db, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'")
	t.Cleanup(func() { _, _ = db.Exec("DROP USER '" + user + "'@'%'") })
	e2e.SQLExec(t, db, "GRANT SELECT ON `"+mc.DBName+"`.* TO '"+user+"'@'%'")
	mc.User, mc.Passwd = user, "pw"
	env := []string{"LEAFD_MYSQL_DSN=" + mc.FormatDSN()}

	out, status := toolCmd(t, env, "adopt", "--dry-run", "--instances", "127.0.0.1:1")
	if status != 1 || !strings.Contains(out, "GRANT SLAVE MONITOR ON *.*") || strings.Contains(out, "instance 127.0.0.1:1") {
		t.Fatalf("adopt --dry-run without SLAVE MONITOR: exit %d, want 1 naming GRANT SLAVE MONITOR before any instance is asked:\n%s", status, out)
	}
	e2e.SQLExec(t, db, "GRANT SLAVE MONITOR ON *.* TO '"+user+"'@'%'")
	if out, status := toolCmd(t, env, "adopt", "--dry-run"); status != 0 || !strings.Contains(out, "would adopt") {
		t.Fatalf("adopt --dry-run with SELECT and SLAVE MONITOR: exit %d, want 0:\n%s", status, out)
	}
	out, status = toolCmd(t, env, "adopt")
	if status != 1 || !strings.Contains(out, "GRANT CREATE ON `"+mc.DBName+"`.`leafd_fence`") {
		t.Fatalf("adopt without CREATE: exit %d, want 1 naming GRANT CREATE:\n%s", status, out)
	}
	if n := e2e.SQLInt(t, db, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leafd_fence'"); n != 0 {
		t.Fatalf("leafd_fence after the refused adopt: %d tables, want none", n)
	}
	e2e.SQLExec(t, db, "GRANT CREATE, INSERT, UPDATE ON `"+mc.DBName+"`.* TO '"+user+"'@'%'")
	if out, status := toolCmd(t, env, "adopt"); status != 0 || !strings.Contains(out, "adopted") {
		t.Fatalf("adopt with the grants docs/MYSQL.md lists: exit %d, want 0:\n%s", status, out)
	}
}
