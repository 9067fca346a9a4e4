package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// schemaTables are the tables docs/schema.sql defines: every table leafd uses on MySQL.
var schemaTables = []string{"leaf_alloc", "leafd_fence", "leafd_identity", "leafd_leader", "leafd_remainder", "leafd_tag_shape", "leafd_worker"}

// regionTable is docs/schema.sql's table of a regional deployment only (--region k/n).
const regionTable = "leafd_region"

// schemaFile returns docs/schema.sql's statements (comments dropped) and its grants by role
// (the "--   GRANT ..." lines under a "-- role: ..." line).
func schemaFile(t *testing.T) (stmts []string, grants map[string][]string) {
	t.Helper()
	b, err := os.ReadFile("../../docs/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	grants = map[string][]string{}
	var code []string
	role := ""
	roleLine := regexp.MustCompile(`^-- ([a-z-]+):`)
	for _, line := range strings.Split(string(b), "\n") {
		if m := roleLine.FindStringSubmatch(line); m != nil {
			role = m[1]
			continue
		}
		if g, ok := strings.CutPrefix(line, "--   GRANT "); ok && role != "" {
			grants[role] = append(grants[role], "GRANT "+strings.TrimSuffix(g, ";"))
			continue
		}
		if !strings.HasPrefix(line, "--") {
			code = append(code, line)
		}
	}
	return splitSQL(strings.Join(code, "\n")), grants
}

// splitSQL splits SQL text at the semicolons outside quotes.
func splitSQL(text string) []string {
	var out []string
	var quote byte
	start := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '\'' || c == '"' || c == '`'):
			quote = c
		case quote == 0 && c == ';':
			if s := strings.TrimSpace(text[start:i]); s != "" {
				out = append(out, s)
			}
			start = i + 1
		}
	}
	if s := strings.TrimSpace(text[start:]); s != "" {
		out = append(out, s)
	}
	return out
}

// showCreate is SHOW CREATE TABLE of every table of the database, by name.
func showCreate(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query("SHOW TABLES")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	out := map[string]string{}
	autoInc := regexp.MustCompile(` AUTO_INCREMENT=\d+`)
	for _, n := range names {
		var name, ddl string
		if err := db.QueryRow("SHOW CREATE TABLE `"+n+"`").Scan(&name, &ddl); err != nil {
			t.Fatal(err)
		}
		out[n] = autoInc.ReplaceAllString(ddl, "")
	}
	return out
}

// serveEveryMode asks l for IDs of every kind: a plain tag (created, then pruned rows of a
// periodic one), a shaped periodic tag, an ordered tag and snowflake IDs (MySQL worker ids).
func serveEveryMode(t *testing.T, l *e2e.Leafd, prefix string) {
	t.Helper()
	for _, c := range [][]any{
		{"IDS.CREATE", prefix + "plain", "STEP", 10},
		{"INCR", prefix + "plain"},
		{"IDS.SEGMENT", prefix + "plain", 20},
		{"IDS.CREATE", prefix + "shaped", "FORMAT", "S{yyyyMMdd}{seq:6}", "RESET", "day"},
		{"IDS.NEXT", prefix + "shaped", 3},
		{"IDS.PRUNE", prefix + "shaped", "20000101"},
		{"IDS.CREATE", prefix + "ordered", "ORDERED"},
		{"INCR", prefix + "ordered"},
	} {
		if _, err := l.Do(c...); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
	}
	var err error
	if !e2e.Poll(20*time.Second, func() bool {
		_, err = l.Do("IDS.SNOWFLAKE")
		if code, _ := e2e.ReplyCode(err); err != nil && code != "NOWORKER" {
			t.Fatalf("IDS.SNOWFLAKE: %v", err)
		}
		return err == nil
	}) {
		t.Fatalf("IDS.SNOWFLAKE: %v", err)
	}
}

// TestSchemaFile: docs/schema.sql is the code's DDL and its grants are enough. The DDL that
// leafd runs itself (on a database A, serving every mode) and docs/schema.sql (applied to an
// empty database B) give the same tables, column for column and index for index; then leafd
// serves every mode on B with --mysql-create-table=false as a user with exactly the
// server's documented grants, restarts gracefully (the remainder is consumed), and leafd
// adopt and leafd raise-max-id run as users with exactly theirs.
func TestSchemaFile(t *testing.T) {
	t.Parallel()
	e2e.NeedTool(t, "redis-cli")
	admin := testenv.MySQLDSN(t)
	cfg, err := mysql.ParseDSN(admin)
	if err != nil {
		t.Fatal(err)
	}
	// Short worker leases: an acquisition waits lease + 1 s before issuing.
	fast := []string{"--worker-lease", "1s", "--lease-window", "500ms"}

	dsnA := testenv.FreshDatabase(t, admin)
	a := e2e.StartMySQL(t, dsnA, fast...)
	serveEveryMode(t, a, "a-")
	if err := a.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	code := showCreate(t, e2e.OpenSQL(t, dsnA))

	dsnB := testenv.FreshDatabase(t, admin)
	bcfg, _ := mysql.ParseDSN(dsnB)
	dbB := e2e.OpenSQL(t, dsnB)
	stmts, grants := schemaFile(t)
	for _, s := range stmts {
		e2e.SQLExec(t, dbB, s)
	}
	file := showCreate(t, dbB)
	// The region table is created by a regional start only: compare it with one.
	dsnC := testenv.FreshDatabase(t, admin)
	c := e2e.StartMySQL(t, dsnC, append([]string{"--region", "0/2"}, fast...)...)
	if err := c.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got, want := file[regionTable], showCreate(t, e2e.OpenSQL(t, dsnC))[regionTable]; got != want || want == "" {
		t.Errorf("%s: docs/schema.sql gives\n%s\na regional start creates\n%s", regionTable, got, want)
	}
	delete(file, regionTable)
	for _, name := range schemaTables {
		if code[name] == "" {
			t.Errorf("leafd did not create %s serving every mode", name)
		}
		if file[name] != code[name] {
			t.Errorf("%s: docs/schema.sql gives\n%s\nthe code gives\n%s", name, file[name], code[name])
		}
	}
	var codeNames, fileNames []string
	for n := range code {
		codeNames = append(codeNames, n)
	}
	for n := range file {
		fileNames = append(fileNames, n)
	}
	slices.Sort(codeNames)
	slices.Sort(fileNames)
	if !slices.Equal(codeNames, schemaTables) || !slices.Equal(fileNames, schemaTables) {
		t.Errorf("tables: leafd created %v, docs/schema.sql %v, want %v", codeNames, fileNames, schemaTables)
	}

	// One user per role, with exactly the grants docs/schema.sql gives it.
	root := e2e.OpenSQL(t, strings.TrimSuffix(admin, "/"+cfg.DBName)+"/")
	user := func(role string) string {
		t.Helper()
		gs := grants[role]
		if len(gs) == 0 {
			t.Fatalf("docs/schema.sql: no grants for %s (have %v)", role, grants)
		}
		name := fmt.Sprintf("leafd_t_%010x", rand.Uint64()>>24)
		e2e.SQLExec(t, root, "CREATE USER '"+name+"'@'%' IDENTIFIED BY 'pw'")
		t.Cleanup(func() { _, _ = root.Exec("DROP USER IF EXISTS '" + name + "'@'%'") })
		for _, g := range gs {
			g = regexp.MustCompile(`\bids\b`).ReplaceAllString(g, bcfg.DBName)
			g = regexp.MustCompile(`TO '[^']+'@'%'`).ReplaceAllString(g, "TO '"+name+"'@'%'")
			e2e.SQLExec(t, root, g)
		}
		u := bcfg.Clone()
		u.User, u.Passwd = name, "pw"
		return u.FormatDSN()
	}

	server := user("server")
	b := e2e.StartMySQL(t, server, append([]string{"--mysql-create-table=false"}, fast...)...)
	serveEveryMode(t, b, "b-")
	last, err := b.Incr("b-plain")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(30 * time.Second); err != nil {
		t.Fatalf("graceful stop: %v\n%s", err, b.Log())
	}
	b.Restart()
	if next, err := b.Incr("b-plain"); err != nil || next != last+1 {
		t.Errorf("after a graceful restart: INCR got %d, %v; want %d (the remainder served)", next, err, last+1)
	}
	if n := e2e.SQLInt(t, dbB, "SELECT COUNT(*) FROM leafd_remainder WHERE token <> 'store'"); n != 1 {
		t.Errorf("leafd_remainder: %d consumed remainder rows, want 1", n)
	}
	if strings.Contains(b.Log(), "denied") {
		t.Errorf("the server's log has a refused statement:\n%s", b.Log())
	}

	run := func(dsn string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, e2e.Binary(), append(args[:1:1], append([]string{"--mysql-dsn", dsn}, args[1:]...)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("leafd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	e2e.SQLExec(t, dbB, "INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('b-leaf', 5000001, 2000)")
	if out := run(user("adopt"), "adopt", "--tags", "b-leaf"); !strings.Contains(out, "adopted") {
		t.Errorf("leafd adopt: %s", out)
	}
	if id, err := b.Incr("b-leaf"); err != nil || id != 5000001 {
		t.Errorf("INCR of the adopted row: got %d, %v; want 5000001", id, err)
	}
	before := e2e.SQLInt(t, dbB, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'b-plain'")
	run(user("raise-max-id"), "raise-max-id", "--instances", b.Addr, "--margin", "1000000")
	if after := e2e.SQLInt(t, dbB, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'b-plain'"); after < before+1000000 {
		t.Errorf("leafd raise-max-id: max_id %d -> %d, want at least +1000000", before, after)
	}
}
