package main

// On the built binary: readiness after a restart, the warm start, and a restored
// embedded store.

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// waitReady polls /readyz until it answers 200 and returns how long that took from start.
func waitReady(t *testing.T, l *e2e.Leafd, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	for {
		status, body, err := l.HTTPGet("/readyz", "")
		if err == nil && status == http.StatusOK {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("/readyz not 200 within %v of start: %d %s %v\n%s", limit, status, body, err, l.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitWarm polls /readyz until the warm start has ended ("warming": false).
func waitWarm(t *testing.T, l *e2e.Leafd) {
	t.Helper()
	var status int
	var body string
	var err error
	if !e2e.Poll(30*time.Second, func() bool {
		status, body, err = l.HTTPGet("/readyz", "")
		return err == nil && status == http.StatusOK && strings.Contains(body, `"warming":false`)
	}) {
		t.Fatalf("warm start not done within 30s: %d %s %v", status, body, err)
	}
}

// TestReadyAndWarmRestartBinary, on both stores: leafd holding tags it served is restarted
// with no traffic; /readyz answers 200 within 2 s of the process listening (readiness never
// waits for stored tags to be requested; the time from exec is logged). The warm
// start loads the first segment of the tags served before, so their first INCRs wait for no
// load: INFO segment_load_waits (and leafd_segment_load_waits_total) stays 0, while a tag not
// served before does wait (the counter works). A fresh instance (empty data dir) on the MySQL
// store with its tags is ready within 2 s too.
func TestReadyAndWarmRestartBinary(t *testing.T) {
	for _, store := range []string{"embedded", "mariadb"} {
		t.Run(store, func(t *testing.T) {
			var args []string
			if store == "mariadb" {
				dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
				// The file worker source: with MySQL worker ids (the default with --mysql-dsn)
				// /readyz waits for the snowflake lease, i.e. the taker's wait of lease + 1s
				// (docs/SNOWFLAKE.md); this test is about the segment warm start.
				args = []string{"--mysql-dsn", dsn, "--worker-source", "file"}
			}
			l := e2e.Start(t, args...)
			warm := []string{"w1", "w2", "w3", "w4", "w5"}
			for _, tag := range warm {
				if _, err := l.Do("IDS.CREATE", tag, "STEP", 50); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 30 { // stored tags this instance never serves
				if _, err := l.Do("IDS.CREATE", fmt.Sprintf("cold%02d", i), "STEP", 50); err != nil {
					t.Fatal(err)
				}
			}
			last := map[string]int64{}
			for _, tag := range warm {
				v, err := l.Incr(tag)
				if err != nil {
					t.Fatal(err)
				}
				last[tag] = v
			}
			if err := l.Stop(20 * time.Second); err != nil {
				t.Fatal(err)
			}
			// The graceful stop saved the tags' rest, which the start would serve first
			// (remainder.go); without it the start warms them, as after a kill -9.
			if err := os.Remove(filepath.Join(l.DataDir, "remainder.json")); err != nil {
				t.Fatal(err)
			}

			start := time.Now()
			l.Restart() // returns once the RESP port answers
			listening := time.Now()
			took := waitReady(t, l, start, 20*time.Second)
			t.Logf("%s: ready %v after the process start, %v after it listened (race-enabled binary, loaded machine)",
				store, took, time.Since(listening))
			// Within 2 s of serving: the start of a race-enabled binary itself (before leafd
			// runs) takes up to seconds on the shared 2-core machine.
			if d := time.Since(listening); d > 2*time.Second {
				t.Errorf("ready %v after it listened (%v after the process start), want within 2s", d, took)
			}
			waitWarm(t, l)
			if n := l.InfoInt("segment", "segment_warm_loads"); n != int64(len(warm)) {
				t.Errorf("segment_warm_loads %d, want %d (the tags served before the restart)", n, len(warm))
			}
			for _, tag := range warm {
				v, err := l.Incr(tag)
				if err != nil {
					t.Fatal(err)
				}
				if v <= last[tag] {
					t.Errorf("INCR %s after the restart: %d, not above %d", tag, v, last[tag])
				}
			}
			if n := l.InfoInt("segment", "segment_load_waits"); n != 0 {
				t.Errorf("segment_load_waits %d after the first INCRs of warmed tags, want 0", n)
			}
			if _, err := l.Incr("cold00"); err != nil {
				t.Fatal(err)
			}
			if n := l.InfoInt("segment", "segment_load_waits"); n != 1 {
				t.Errorf("segment_load_waits %d after the first INCR of a tag not warmed, want 1", n)
			}
			if _, body, err := l.HTTPGet("/metrics", ""); err != nil || !strings.Contains(body, "\nleafd_segment_load_waits_total 1\n") {
				t.Errorf("/metrics: no leafd_segment_load_waits_total 1 (%v)", err)
			}

			if store == "mariadb" { // a fresh instance on a store with tags
				start := time.Now()
				f := e2e.Start(t, args...)
				listening := time.Now()
				took := waitReady(t, f, start, 20*time.Second)
				t.Logf("fresh instance: ready %v after the process start, %v after it listened", took, time.Since(listening))
				if d := time.Since(listening); d > 2*time.Second {
					t.Errorf("fresh instance ready %v after it listened, want within 2s", d)
				}
			}
		})
	}
}

// TestRestoredBoltBackupBinary: on the built binary with the embedded store, a copy of
// leafd.db taken while leafd was stopped is restored after more IDs were issued: every INCR
// of the tag then answers REGRESSION, never an ID issued before. leafd raise-max-id
// --data-dir refuses to run while leafd holds the files, changes nothing with --dry-run, and
// then raises max_id to the marks, after which the tag serves again above every ID issued.
func TestRestoredBoltBackupBinary(t *testing.T) {
	t.Parallel()
	// --max-step 10: the segments stay at the stored step, so the restored leafd.db is
	// several steps behind the marks (the graceful stops' remainders save the rest of each
	// life, and a grown step would make the first refused lease jump past the marks).
	l := e2e.Start(t, "--max-step", "10")
	dbPath := filepath.Join(l.DataDir, "leafd.db")
	if _, err := l.Do("IDS.CREATE", "a", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	issued := map[int64]bool{}
	incr := func(n int) {
		t.Helper()
		for range n {
			v, err := l.Incr("a")
			if err != nil {
				t.Fatal(err)
			}
			issued[v] = true
		}
	}
	incr(3)
	if err := l.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "leafd.db.bak")
	copyFileT(t, dbPath, backup)
	l.Restart()
	incr(25) // three more leases of 10
	top := int64(0)
	for v := range issued {
		top = max(top, v)
	}
	if err := l.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	copyFileT(t, backup, dbPath) // the operator restores the copy, keeping marks.db

	l.Restart()
	for i := range 5 {
		v, err := l.Incr("a")
		if code, _ := e2e.ReplyCode(err); code != "REGRESSION" {
			t.Fatalf("INCR #%d after restoring leafd.db: got %d %v, want REGRESSION (issued before: %v)", i, v, err, issued[v])
		}
	}
	if n := l.InfoInt("segment", "segment_regressions"); n < 1 {
		t.Errorf("segment_regressions %d, want at least 1", n)
	}

	raise := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(e2e.Binary(), append([]string{"raise-max-id", "--data-dir", l.DataDir}, args...)...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	if code, out := raise(); code != 1 || !strings.Contains(out, "in use") {
		t.Errorf("raise-max-id while leafd runs: exit %d %q, want 1 saying the data dir is in use", code, out)
	}
	if err := l.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if code, out := raise("--dry-run"); code != 0 || !strings.Contains(out, "dry run") {
		t.Fatalf("raise-max-id --dry-run: exit %d %q", code, out)
	}
	l.Restart()
	if _, err := l.Incr("a"); err == nil {
		t.Fatal("INCR after a dry run served an ID, want REGRESSION still")
	}
	if err := l.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	code, out := raise()
	t.Logf("raise-max-id --data-dir:\n%s", out)
	if code != 0 || !strings.Contains(out, "a ") {
		t.Fatalf("raise-max-id: exit %d %q", code, out)
	}
	l.Restart()
	for range 15 {
		v, err := l.Incr("a")
		if err != nil {
			t.Fatalf("INCR after raise-max-id: %v", err)
		}
		if v <= top || issued[v] {
			t.Fatalf("INCR after raise-max-id: %d, not above %d issued before the restore", v, top)
		}
	}
}

func copyFileT(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAllowCreateFalseBinary: --allow-create=false locks tag creation to the operator on the
// embedded store (where auto-create is otherwise on): INCR of an unknown tag is NOTAG,
// IDS.CREATE is NOPERM, and neither leaves a tag or a mark behind; --auto-create on with it
// is a configuration error.
func TestAllowCreateFalseBinary(t *testing.T) {
	l := e2e.Start(t, "--allow-create=false")
	if _, err := l.Do("INCR", "newtag"); err == nil || !strings.HasPrefix(err.Error(), "NOTAG") {
		t.Errorf("INCR newtag: %v, want NOTAG", err)
	}
	if _, err := l.Do("INCRBY", "newtag", 5); err == nil || !strings.HasPrefix(err.Error(), "NOTAG") {
		t.Errorf("INCRBY newtag 5: %v, want NOTAG", err)
	}
	if _, err := l.Do("IDS.CREATE", "newtag"); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("IDS.CREATE newtag: %v, want NOPERM", err)
	}
	if v, err := l.Do("IDS.TAGS"); err != nil || len(v.([]any)) != 0 {
		t.Errorf("IDS.TAGS: %v %v, want none", v, err)
	}
	if v, err := l.Do("IDS.MARKS"); err != nil || len(v.([]any)) != 0 {
		t.Errorf("IDS.MARKS: %v %v, want none", v, err)
	}
	out, err := exec.Command(e2e.Binary(), "--allow-create=false", "--auto-create", "on", "--data-dir", t.TempDir()).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--allow-create=false") {
		t.Errorf("--auto-create on --allow-create=false: %v %q, want exit 2 naming the contradiction", err, out)
	}
}
