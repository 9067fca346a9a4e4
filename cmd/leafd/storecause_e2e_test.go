package main

// Store failures on the built binary: a wrong password, a missing database, a revoked
// privilege, a stopped database and a full disk each reach INCR, IDS.INFO, IDS.CREATE,
// IDS.SNOWFLAKE, /readyz, the status page (headless Chromium) and the log with their cause,
// and never as "internal error".

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/storeerr"
	"github.com/leafd/leafd/internal/testenv"
)

// causeWant is what every surface must say of one failure.
type causeWant struct {
	classes []storeerr.Class // the cause (any of them: a stopped database is refused or unreachable)
	code    string           // the segment commands' code: STORE (a fix is needed) or UNAVAILABLE
}

func (w causeWant) names(s string) bool {
	for _, c := range w.classes {
		if strings.Contains(s, c.What()) {
			return true
		}
	}
	return false
}

func (w causeWant) isClass(name string) bool {
	for _, c := range w.classes {
		if c.String() == name {
			return true
		}
	}
	return false
}

// reply runs one command and returns its reply as text (an error's text, or the
// last_error of IDS.INFO's reply).
func reply(l *e2e.Leafd, args ...any) string {
	v, err := l.Do(args...)
	if err != nil {
		return err.Error()
	}
	if s, ok := v.([]any); ok { // IDS.INFO, RESP2: field, value, ...
		for i := 0; i+1 < len(s); i += 2 {
			if s[i] == "last_error" {
				return fmt.Sprint("last_error: ", s[i+1])
			}
		}
	}
	return fmt.Sprint(v)
}

// checkCause waits (at most 30 s) until INCR incrTag, IDS.INFO infoTag, IDS.CREATE of a new
// tag, IDS.SNOWFLAKE, /readyz and the log name the cause, then checks the status page.
func checkCause(t *testing.T, l *e2e.Leafd, incrTag, infoTag string, w causeWant) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last map[string]string
	for n := 0; ; n++ {
		got := map[string]string{
			"INCR":          reply(l, "INCR", incrTag),
			"IDS.INFO":      reply(l, "IDS.INFO", infoTag),
			"IDS.CREATE":    reply(l, "IDS.CREATE", fmt.Sprintf("new%d", n)),
			"IDS.SNOWFLAKE": reply(l, "IDS.SNOWFLAKE"),
		}
		for cmd, r := range got {
			if strings.Contains(r, "internal error") {
				t.Fatalf("%s answered %q", cmd, r)
			}
		}
		status, body, err := l.HTTPGet("/readyz", "")
		if err != nil {
			t.Fatal(err)
		}
		var rz struct {
			StoreCause string `json:"store_cause"`
			StoreError string `json:"store_error"`
		}
		_ = json.Unmarshal([]byte(body), &rz)
		got["/readyz"] = fmt.Sprintf("%d %s", status, body)
		ok := strings.HasPrefix(got["INCR"], w.code+" ") && w.names(got["INCR"]) &&
			w.names(got["IDS.INFO"]) && w.names(got["IDS.CREATE"]) &&
			strings.HasPrefix(got["IDS.SNOWFLAKE"], "NOWORKER ") && w.names(got["IDS.SNOWFLAKE"]) &&
			status == 503 && w.isClass(rz.StoreCause) && w.names(rz.StoreError)
		if ok {
			last = got
			break
		}
		if time.Now().After(deadline) {
			for k, v := range got {
				t.Errorf("%s: %s", k, v)
			}
			t.Fatalf("the replies do not all name %v within 30 s\n%s", w.classes, e2e.Tail(l.Log(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for k, v := range last {
		t.Logf("%s: %s", k, v)
	}
	logged := false
	for _, c := range w.classes {
		logged = logged || regexp.MustCompile(`"cause": ?"`+c.String()+`"`).MatchString(l.Log())
	}
	if !logged {
		t.Errorf("the log names no cause %v\n%s", w.classes, e2e.Tail(l.Log(), 20))
	}
	panel := statusPanel(t, "http://"+l.HTTPAddr+"/status")
	if !strings.Contains(panel, "failing (") || !w.names(panel) {
		t.Errorf("status page store panel: %q, want the cause %v", panel, w.classes)
	}
	t.Logf("status page: %s", panel)
}

// statusPanel loads the status page in headless Chromium and returns the text of its store
// panel after the first poll.
func statusPanel(t *testing.T, url string) string {
	t.Helper()
	chromium := testenv.Tool(t, "chromium", "chromium")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir="+filepath.Join(t.TempDir(), "profile"), "--virtual-time-budget=1500", "--dump-dom", url)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	m := regexp.MustCompile(`<div id="storepanel"[^>]*>([^<]*)</div>`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no store panel in the page:\n%.2000s", out)
	}
	return strings.ReplaceAll(string(m[1]), "&amp;", "&")
}

func randName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// mysqlUser creates a user with every privilege on db (reached as dsn) and returns its DSN.
func mysqlUser(t *testing.T, rootDSN, password string) (userDSN, user string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(rootDSN)
	if err != nil {
		t.Fatal(err)
	}
	root := e2e.OpenSQL(t, rootDSN)
	user = randName("errs_")
	e2e.SQLExec(t, root, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'good'", user))
	t.Cleanup(func() { _, _ = root.Exec(fmt.Sprintf("DROP USER '%s'@'%%'", user)) })
	e2e.SQLExec(t, root, fmt.Sprintf("GRANT ALL PRIVILEGES ON `%s`.* TO '%s'@'%%'", cfg.DBName, user))
	cfg.User, cfg.Passwd = user, password
	return cfg.FormatDSN(), user
}

// lean are the flags of these tests: a short worker-id lease, so that IDS.SNOWFLAKE fails
// soon after its store does, and a short wait for a segment.
var lean = []string{"--worker-lease", "2s", "--lease-window", "1s", "--wait-timeout", "300ms", "--load-timeout", "2s"}

// waitSnowflake waits (at most 15 s) until IDS.SNOWFLAKE serves: a worker id's first
// lease waits out the taker's margin.
func waitSnowflake(t *testing.T, l *e2e.Leafd) {
	t.Helper()
	var err error
	if !e2e.Poll(15*time.Second, func() bool { _, err = l.Do("IDS.SNOWFLAKE"); return err == nil }) {
		t.Fatalf("IDS.SNOWFLAKE before the failure: %v", err)
	}
}

func TestStoreCauseWrongPassword(t *testing.T) {
	t.Parallel()
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	userDSN, _ := mysqlUser(t, dsn, "wrong")
	l := e2e.StartMySQL(t, userDSN, lean...)
	if !strings.Contains(l.Log(), e2e.NotReadyMsg) || strings.Contains(l.Log(), e2e.ReadyMsg) {
		t.Errorf("start line: want %q, not %q\n%s", e2e.NotReadyMsg, e2e.ReadyMsg, e2e.Tail(l.Log(), 10))
	}
	checkCause(t, l, "t", "t", causeWant{classes: []storeerr.Class{storeerr.Auth}, code: "STORE"})
}

func TestStoreCauseMissingDatabase(t *testing.T) {
	t.Parallel()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = randName("errs_missing_")
	l := e2e.StartMySQL(t, cfg.FormatDSN(), lean...)
	checkCause(t, l, "t", "t", causeWant{classes: []storeerr.Class{storeerr.NoDatabase}, code: "STORE"})
}

// TestStoreCauseRevokedPrivilege: the privileges of a running instance's user are revoked
// and its connections ended (as a DBA does): new connections are refused the database.
func TestStoreCauseRevokedPrivilege(t *testing.T) {
	t.Parallel()
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	userDSN, user := mysqlUser(t, dsn, "good")
	l := e2e.StartMySQL(t, userDSN, lean...)
	if _, err := l.Do("IDS.CREATE", "u"); err != nil {
		t.Fatalf("IDS.CREATE u before the revocation: %v", err)
	}
	waitSnowflake(t, l)
	cfg, _ := mysql.ParseDSN(dsn)
	root := e2e.OpenSQL(t, dsn)
	e2e.SQLExec(t, root, fmt.Sprintf("REVOKE ALL PRIVILEGES ON `%s`.* FROM '%s'@'%%'", cfg.DBName, user))
	rows, err := root.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?", user)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		_, _ = root.Exec(fmt.Sprintf("KILL %d", id))
	}
	checkCause(t, l, "u", "u", causeWant{classes: []storeerr.Class{storeerr.Privilege}, code: "STORE"})
}

// TestStoreCauseStoppedDatabase: a private MariaDB stops under a running instance; after it
// starts again the instance serves by itself and no NOWORKER says another process took the
// worker id (nobody did).
func TestStoreCauseStoppedDatabase(t *testing.T) {
	t.Parallel()
	m := testenv.StartMariaDB(t)
	m.Exec("CREATE DATABASE leafd")
	l := e2e.StartMySQL(t, m.DSN("leafd"), lean...)
	if _, err := l.Do("IDS.CREATE", "u"); err != nil {
		t.Fatalf("IDS.CREATE u: %v", err)
	}
	waitSnowflake(t, l)
	m.Stop()
	checkCause(t, l, "u", "u", causeWant{classes: []storeerr.Class{storeerr.Refused, storeerr.Unreachable}, code: "UNAVAILABLE"})
	m.Start()
	var ierr, serr error
	if !e2e.Poll(30*time.Second, func() bool {
		var sv any
		_, ierr = l.Do("INCR", "u")
		sv, serr = l.Do("IDS.SNOWFLAKE")
		if serr != nil && strings.Contains(serr.Error(), "taken over") {
			t.Fatalf("after the outage: %v (nobody took the worker id over)", serr)
		}
		return ierr == nil && serr == nil && sv != nil
	}) {
		t.Fatalf("not serving 30 s after the database is back: INCR %v, IDS.SNOWFLAKE %v", ierr, serr)
	}
}

// TestStoreCauseFullDisk: the embedded store's data dir on a 1 MB tmpfs that is filled up
// (a real ENOSPC from the kernel; the test needs root to mount it).
func TestStoreCauseFullDisk(t *testing.T) {
	t.Parallel()
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	l := e2e.Start(t, append([]string{"--data-dir", filepath.Join(mnt, "d")}, lean[2:]...)...)
	if _, err := l.Do("INCR", "t"); err != nil {
		t.Fatal(err)
	}
	fill, err := os.Create(filepath.Join(mnt, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := fill.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	fill.Close()
	// The store's file still has free pages: creations succeed until it must grow.
	var err2 error
	for i := 0; i < 2000 && err2 == nil; i++ {
		_, err2 = l.Do("IDS.CREATE", fmt.Sprintf("grow%d", i), "STEP", 10)
	}
	if err2 == nil || !strings.HasPrefix(err2.Error(), "STORE ") {
		t.Fatalf("creations on a full disk: got %v, want STORE", err2)
	}
	// A new tag cannot be created: INCR fresh says why, and IDS.INFO fresh too. (Held tags
	// keep serving: the store's file reuses its own free pages for their allocations.)
	checkCause(t, l, "fresh", "fresh", causeWant{classes: []storeerr.Class{storeerr.DiskFull}, code: "STORE"})
}
