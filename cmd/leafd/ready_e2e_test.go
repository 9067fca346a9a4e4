package main

// Issue #8 on the built binary: readiness after a restart, the warm start, and a restored
// embedded store.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
)

// infoStat returns one numeric field of INFO section.
func infoStat(t *testing.T, l *leafd, section, field string) int64 {
	t.Helper()
	c := connClient(l.addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.Info(ctx, section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %s: %v", section, line, err)
			}
			return n
		}
	}
	t.Fatalf("INFO %s has no %s:\n%s", section, field, out)
	return 0
}

// waitReady polls /readyz until it answers 200 and returns how long that took from start.
func waitReady(t *testing.T, l *leafd, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	for {
		status, body, err := l.httpGet("/readyz")
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
func waitWarm(t *testing.T, l *leafd) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body, err := l.httpGet("/readyz")
		if err == nil && status == http.StatusOK && strings.Contains(body, `"warming":false`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm start not done within 30s: %d %s %v", status, body, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadyAndWarmRestartBinary, on both stores: leafd holding tags it served is restarted
// with no traffic; /readyz answers 200 within 2 s of the process listening (it used to stay
// 503 until every stored tag had been requested; the time from exec is logged). The warm
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
				args = []string{"--mysql-dsn", dsn}
			}
			l := startLeafd(t, append(args, "--log-level", "warn")...)
			warm := []string{"w1", "w2", "w3", "w4", "w5"}
			for _, tag := range warm {
				if _, err := do(l, "IDS.CREATE", tag, "STEP", 50); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 30 { // stored tags this instance never serves
				if _, err := do(l, "IDS.CREATE", fmt.Sprintf("cold%02d", i), "STEP", 50); err != nil {
					t.Fatal(err)
				}
			}
			last := map[string]int64{}
			for _, tag := range warm {
				v, err := incrOnce(l, tag)
				if err != nil {
					t.Fatal(err)
				}
				last[tag] = v
			}
			if err := l.stop(20 * time.Second); err != nil {
				t.Fatal(err)
			}

			start := time.Now()
			l.start() // returns once the RESP port answers
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
			if n := infoStat(t, l, "segment", "segment_warm_loads"); n != int64(len(warm)) {
				t.Errorf("segment_warm_loads %d, want %d (the tags served before the restart)", n, len(warm))
			}
			for _, tag := range warm {
				v, err := incrOnce(l, tag)
				if err != nil {
					t.Fatal(err)
				}
				if v <= last[tag] {
					t.Errorf("INCR %s after the restart: %d, not above %d", tag, v, last[tag])
				}
			}
			if n := infoStat(t, l, "segment", "segment_load_waits"); n != 0 {
				t.Errorf("segment_load_waits %d after the first INCRs of warmed tags, want 0", n)
			}
			if _, err := incrOnce(l, "cold00"); err != nil {
				t.Fatal(err)
			}
			if n := infoStat(t, l, "segment", "segment_load_waits"); n != 1 {
				t.Errorf("segment_load_waits %d after the first INCR of a tag not warmed, want 1", n)
			}
			if _, body, err := l.httpGet("/metrics"); err != nil || !strings.Contains(body, "\nleafd_segment_load_waits_total 1\n") {
				t.Errorf("/metrics: no leafd_segment_load_waits_total 1 (%v)", err)
			}

			if store == "mariadb" { // a fresh instance on a store with tags
				start := time.Now()
				f := startLeafd(t, args...)
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
	l := startLeafd(t, "--log-level", "error")
	dbPath := filepath.Join(l.dataDir, "leafd.db")
	if _, err := do(l, "IDS.CREATE", "a", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	issued := map[int64]bool{}
	incr := func(n int) {
		t.Helper()
		for range n {
			v, err := incrOnce(l, "a")
			if err != nil {
				t.Fatal(err)
			}
			issued[v] = true
		}
	}
	incr(3)
	if err := l.stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "leafd.db.bak")
	copyFileT(t, dbPath, backup)
	l.start()
	incr(25) // three more leases of 10
	top := int64(0)
	for v := range issued {
		top = max(top, v)
	}
	if err := l.stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	copyFileT(t, backup, dbPath) // the operator restores the copy, keeping marks.db

	l.start()
	for i := range 5 {
		v, err := incrOnce(l, "a")
		if code, _ := replyCode(err); code != "REGRESSION" {
			t.Fatalf("INCR #%d after restoring leafd.db: got %d %v, want REGRESSION (issued before: %v)", i, v, err, issued[v])
		}
	}
	if n := infoStat(t, l, "segment", "segment_regressions"); n < 1 {
		t.Errorf("segment_regressions %d, want at least 1", n)
	}

	raise := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(leafdBin, append([]string{"raise-max-id", "--data-dir", l.dataDir}, args...)...)
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
	if err := l.stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	if code, out := raise("--dry-run"); code != 0 || !strings.Contains(out, "dry run") {
		t.Fatalf("raise-max-id --dry-run: exit %d %q", code, out)
	}
	l.start()
	if _, err := incrOnce(l, "a"); err == nil {
		t.Fatal("INCR after a dry run served an ID, want REGRESSION still")
	}
	if err := l.stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	code, out := raise()
	t.Logf("raise-max-id --data-dir:\n%s", out)
	if code != 0 || !strings.Contains(out, "a ") {
		t.Fatalf("raise-max-id: exit %d %q", code, out)
	}
	l.start()
	for range 15 {
		v, err := incrOnce(l, "a")
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
	l := startLeafd(t, "--allow-create=false", "--log-level", "error")
	if _, err := do(l, "INCR", "newtag"); err == nil || !strings.HasPrefix(err.Error(), "NOTAG") {
		t.Errorf("INCR newtag: %v, want NOTAG", err)
	}
	if _, err := do(l, "INCRBY", "newtag", 5); err == nil || !strings.HasPrefix(err.Error(), "NOTAG") {
		t.Errorf("INCRBY newtag 5: %v, want NOTAG", err)
	}
	if _, err := do(l, "IDS.CREATE", "newtag"); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("IDS.CREATE newtag: %v, want NOPERM", err)
	}
	if v, err := do(l, "IDS.TAGS"); err != nil || len(v.([]any)) != 0 {
		t.Errorf("IDS.TAGS: %v %v, want none", v, err)
	}
	if v, err := do(l, "IDS.MARKS"); err != nil || len(v.([]any)) != 0 {
		t.Errorf("IDS.MARKS: %v %v, want none", v, err)
	}
	out, err := exec.Command(leafdBin, "--allow-create=false", "--auto-create", "on", "--data-dir", t.TempDir()).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--allow-create=false") {
		t.Errorf("--auto-create on --allow-create=false: %v %q, want exit 2 naming the contradiction", err, out)
	}
}
