package main

// --modes, per-mode readiness and the data dir on the built binary.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// deadZK is a ZooKeeper address that refuses connections (nothing listens on it).
func deadZK(t *testing.T) string {
	t.Helper()
	return e2e.RefusedAddr(t)
}

// TestModesSegmentOnlyZKDown: --modes segment with --zk-addrs pointing at nothing starts,
// serves INCR, is ready (plain and ?mode=segment), answers IDS.SNOWFLAKE with DISABLED
// naming --modes, and never contacts the worker-id source (no ZooKeeper line in its log).
func TestModesSegmentOnlyZKDown(t *testing.T) {
	l := e2e.Start(t, "--modes", "segment", "--zk-addrs", deadZK(t), "--auto-create", "on")
	if v, err := l.Incr("order"); err != nil || v != 1 {
		t.Fatalf("INCR: got %d, %v, want 1", v, err)
	}
	for _, path := range []string{"/readyz", "/readyz?mode=segment"} {
		if st := l.HTTPStatus(path); st != 200 {
			t.Errorf("%s: got %d, want 200 (ZooKeeper is not needed)", path, st)
		}
	}
	if st := l.HTTPStatus("/readyz?mode=snowflake"); st != 501 {
		t.Errorf("/readyz?mode=snowflake: got %d, want 501 DISABLED", st)
	}
	_, err := l.Do("IDS.SNOWFLAKE")
	if code, _ := e2e.ReplyCode(err); code != "DISABLED" || !strings.Contains(err.Error(), "--modes") {
		t.Errorf("IDS.SNOWFLAKE: got %v, want DISABLED naming --modes", err)
	}
	for _, line := range strings.Split(l.Log(), "\n") {
		if strings.Contains(strings.ToLower(line), "zookeeper") && !strings.Contains(line, "worker-id options are ignored") {
			t.Errorf("segment-only instance logged about ZooKeeper: %s", line)
		}
	}
}

// TestModesPerModeProbeZKDown: both modes, ZooKeeper unreachable: INCR serves, the segment
// probe (/readyz?mode=segment) is ready while the plain /readyz and ?mode=snowflake are not
// (no worker id): a segment Service stays up.
func TestModesPerModeProbeZKDown(t *testing.T) {
	t.Parallel()
	l := e2e.Start(t, "--zk-addrs", deadZK(t), "--auto-create", "on")
	if v, err := l.Incr("order"); err != nil || v != 1 {
		t.Fatalf("INCR: got %d, %v, want 1", v, err)
	}
	if st := l.HTTPStatus("/readyz?mode=segment"); st != 200 {
		t.Errorf("/readyz?mode=segment: got %d, want 200", st)
	}
	for _, path := range []string{"/readyz", "/readyz?mode=snowflake"} {
		if st := l.HTTPStatus(path); st != 503 {
			t.Errorf("%s with ZooKeeper down: got %d, want 503", path, st)
		}
	}
}

// TestModesSnowflakeOnly: --modes snowflake serves IDS.SNOWFLAKE, refuses INCR and the Leaf
// segment API with DISABLED, is ready, and opens no segment store in the data dir.
func TestModesSnowflakeOnly(t *testing.T) {
	l := e2e.Start(t, "--modes", "snowflake")
	if _, err := l.Do("IDS.SNOWFLAKE"); err != nil {
		t.Fatalf("IDS.SNOWFLAKE: %v", err)
	}
	_, err := l.Incr("order")
	if code, _ := e2e.ReplyCode(err); code != "DISABLED" {
		t.Fatalf("INCR: got %v, want DISABLED", err)
	}
	if st := l.HTTPStatus("/api/segment/get/order"); st != 501 {
		t.Errorf("/api/segment/get: got %d, want 501", st)
	}
	if st := l.HTTPStatus("/readyz"); st != 200 {
		t.Errorf("/readyz: got %d, want 200", st)
	}
	if _, err := os.Stat(filepath.Join(l.DataDir, "leafd.db")); !os.IsNotExist(err) {
		t.Errorf("snowflake-only opened the segment store: %v", err)
	}
	// A graceful stop has no segment remainder to save and says nothing about one.
	if err := l.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if log := l.Log(); strings.Contains(log, "remainder") {
		t.Errorf("snowflake-only stop logged about a segment remainder:\n%s", e2e.Tail(log, 10))
	}
}

// TestRelativeDataDir: a relative --data-dir is logged as its absolute path at start, and
// the files are there.
func TestRelativeDataDir(t *testing.T) {
	wd := t.TempDir()
	l := &e2e.Leafd{Prefix: []string{"sh", "-c", `cd "$1" && shift && exec "$@"`, "sh", wd}}
	e2e.StartAs(t, l, "--data-dir", "rel-data", "--auto-create", "on")
	if _, err := l.Incr("t"); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(wd, "rel-data")
	ready := l.WaitLog(e2e.ReadyMsg, 5*time.Second)
	if ready["data_dir"] != want {
		t.Fatalf("ready line: data_dir %v, want %s\n%s", ready["data_dir"], want, e2e.Tail(l.Log(), 10))
	}
	if !strings.Contains(l.Log(), "data dir is relative") {
		t.Errorf("no log line saying the data dir is relative")
	}
	if _, err := os.Stat(filepath.Join(want, "leafd.db")); err != nil {
		t.Errorf("store not in %s: %v", want, err)
	}
}

// TestLeafAPICreateFlags: the admin port's Leaf API creates a tag only as RESP would:
// auto-create on creates it; auto-create off and --allow-create=false answer 404 NOTAG and
// create nothing.
func TestLeafAPICreateFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--auto-create", "on"}, 200},
		{[]string{"--auto-create", "off"}, 404},
		{[]string{"--allow-create=false"}, 404},
	} {
		l := startInProcess(t, c.args...)
		if st := l.HTTPStatus("/api/segment/get/newtag"); st != c.want {
			t.Errorf("%v: /api/segment/get/newtag: got %d, want %d", c.args, st, c.want)
		}
		_, err := l.Incr("newtag")
		if code, _ := e2e.ReplyCode(err); (c.want == 404) != (code == "NOTAG") {
			t.Errorf("%v: INCR after the HTTP get: got %v (a 404 must not have created it)", c.args, err)
		}
	}
}
