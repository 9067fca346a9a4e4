package bench

// TestRefillTail measures the INCR tail through segment refills when the
// database is far away. It is a benchmark, not a check, so it runs only when asked:
//
//	LEAFD_REFILL_BENCH=1 go test ./bench/ -run TestRefillTail -v -timeout 30m
//
// (bench/all.sh's "refill" section runs it). It starts a private MariaDB (internal/testenv),
// and for each run and each added delay (REFILL_DELAYS, default "0 50ms 200ms", alternating
// within each run) a proxy in front of it that holds every reply for the delay (e2e.Proxy.SetLag)
// (so every round trip takes that much longer), and a leafd on it (REFILL_LEAFD, else built
// here) with --max-step REFILL_MAX_STEP (default 100000: on the quiet 2-core test machine 50
// connections make 50–90k INCR/s, so segments switch every 1–2 s, and a segment of the
// largest step outlasts an allocation 200 ms away — 6 round trips, about 1.2 s; with 50000
// it does not, and no double buffer can hide the load: segment_step_capped counts it),
// auto-create on and
// REFILL_FLAGS (default --load-timeout 10s). Phases, each
// measured with this package's client (REFILL_CLIENTS connections, default 50, unpipelined
// INCR):
//
//	new      the first REFILL_REQUESTS (200 000) INCRs of a tag that does not exist yet: its
//	         auto-creation and first loads happen under the full load
//	ramp     the first REFILL_REQUESTS INCRs of the tag "steady", created (IDS.CREATE) with
//	         step 1000 like a default tag: the dynamic step grows from there
//	steady   the same tag after the ramp, for REFILL_DUR (5s)
//	restart  leafd is stopped (SIGTERM) and started again on the same data dir; the first
//	         REFILL_REQUESTS INCRs of "steady" from the moment it is ready (its ready line)
//
// Each phase's result is written as leafd-bench JSON to REFILL_OUT/raw/refill<delay>-<phase>.<run>.json
// (bench/summarize.py turns them into a table: p999 against the same phase without added
// delay, errors), with the number of segment loads and the server's step in a .loads file.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func TestRefillTail(t *testing.T) {
	if os.Getenv("LEAFD_REFILL_BENCH") == "" {
		t.Skip("a benchmark: set LEAFD_REFILL_BENCH=1 (bench/all.sh's refill section)")
	}
	runs, _ := strconv.Atoi(envOr("RUNS", "3"))
	maxStep := envOr("REFILL_MAX_STEP", "100000")
	// A database 200 ms away needs more than the default 3s for one load: auto-creating a tag
	// takes about 14 round trips, plus the connection's own handshake.
	flags := strings.Fields(envOr("REFILL_FLAGS", "--load-timeout 10s"))
	clients, _ := strconv.Atoi(envOr("REFILL_CLIENTS", "50"))
	requests, _ := strconv.ParseInt(envOr("REFILL_REQUESTS", "200000"), 10, 64)
	dur, err := time.ParseDuration(envOr("REFILL_DUR", "5s"))
	if err != nil {
		t.Fatal(err)
	}
	var delays []time.Duration
	for _, f := range strings.Fields(envOr("REFILL_DELAYS", "0 50ms 200ms")) {
		d, err := time.ParseDuration(f)
		if err != nil {
			t.Fatal(err)
		}
		delays = append(delays, d)
	}
	out := envOr("REFILL_OUT", t.TempDir())
	if err := os.MkdirAll(filepath.Join(out, "raw"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("REFILL_LEAFD")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "leafd")
		cmd := exec.Command("go", "build", "-o", bin, "../cmd/leafd")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, b)
		}
	}

	m := testenv.StartMariaDB(t)
	admin, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	for run := 1; run <= runs; run++ {
		for _, delay := range delays {
			name := "refill" + delayLabel(delay)
			db := fmt.Sprintf("refill_%d_%s", run, delayLabel(delay))
			if _, err := admin.Exec("CREATE DATABASE " + db); err != nil {
				t.Fatal(err)
			}
			px := e2e.StartProxy(t, m.Addr())
			px.SetLag(delay)
			cfg, _ := mysql.ParseDSN(m.DSN(db))
			cfg.Addr = px.Addr()
			l := &refillLeafd{t: t, bin: bin, dir: t.TempDir(), dsn: cfg.FormatDSN(), maxStep: maxStep, flags: flags}
			l.start()
			if err := l.rc.Do(context.Background(), "IDS.CREATE", "steady", "STEP", 1000).Err(); err != nil {
				t.Fatalf("IDS.CREATE steady: %v", err)
			}
			measure := func(phase string, c Config) {
				c.Addrs = []string{l.addr}
				c.Clients = clients
				c.Timeout = 60 * time.Second
				loads0 := l.info("segment_loads_ok")
				res, err := Run(context.Background(), c)
				if err != nil {
					t.Fatalf("%s %s: %v", name, phase, err)
				}
				loads := l.info("segment_loads_ok") - loads0
				label := fmt.Sprintf("%s-%s.%d", name, phase, run)
				f, err := os.Create(filepath.Join(out, "raw", label+".json"))
				if err != nil {
					t.Fatal(err)
				}
				if err := res.WriteJSON(f); err != nil {
					t.Fatal(err)
				}
				f.Close()
				step := l.tagStep(c.Tag)
				_ = os.WriteFile(filepath.Join(out, "raw", label+".loads"),
					[]byte(fmt.Sprintf("loads=%d seconds=%.3f step=%d\n", loads, res.Seconds, step)), 0o644)
				t.Logf("run %d delay %v %-8s %8.0f req/s p50 %7.3f p99 %7.3f p999 %8.3f max %8.3f ms errors %d (%s) loads %d step %d",
					run, delay, phase, res.RequestsPerSec, res.Latency.P50, res.Latency.P99, res.Latency.P999, res.Latency.Max,
					res.Errors, res.FirstError, loads, step)
			}
			measure("new", Config{Tag: fmt.Sprintf("new%d", run), Requests: requests})
			measure("ramp", Config{Tag: "steady", Requests: requests}) // the dynamic step's ramp from 1000
			measure("steady", Config{Tag: "steady", Duration: dur})
			l.stop()
			l.start()
			measure("restart", Config{Tag: "steady", Requests: requests})
			l.stop()
			px.Close()
		}
	}
}

func delayLabel(d time.Duration) string {
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// refillLeafd is one leafd process on MySQL (the e2e harness's, on the binary under
// measurement); start and stop reuse its data dir and its port.
type refillLeafd struct {
	t       *testing.T
	bin     string
	dir     string
	dsn     string
	maxStep string
	flags   []string
	addr    string
	l       *e2e.Leafd
	rc      *redis.Client
}

// start starts the process, the first time on a port the kernel chooses (no ORDERED tags
// here: the address needs no advertising), then on that port again.
func (l *refillLeafd) start() {
	if l.l == nil {
		args := append([]string{"--addr", "127.0.0.1:0", "--http-addr", "", "--data-dir", filepath.Join(l.dir, "data"),
			"--mysql-dsn", l.dsn, "--max-step", l.maxStep, "--auto-create", "on"}, l.flags...)
		l.l = e2e.StartAs(l.t, &e2e.Leafd{Bin: l.bin}, args...)
		l.addr = l.l.Addr
	} else {
		l.l.Restart()
	}
	l.rc = redis.NewClient(&redis.Options{Addr: l.addr, Protocol: 2, PoolSize: 1, MaxRetries: -1})
}

func (l *refillLeafd) stop() {
	_ = l.rc.Close()
	if err := l.l.Stop(30 * time.Second); err != nil {
		l.t.Logf("leafd stop: %v", err)
	}
}

// info returns an integer field of INFO segment.
func (l *refillLeafd) info(field string) int64 {
	s, err := l.rc.Info(context.Background(), "segment").Result()
	if err != nil {
		l.t.Fatalf("INFO segment: %v", err)
	}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	l.t.Fatalf("INFO segment: no %s", field)
	return 0
}

// tagStep returns the tag's current step from IDS.INFO (0 when it cannot be read).
func (l *refillLeafd) tagStep(tag string) int64 {
	v, err := l.rc.Do(context.Background(), "IDS.INFO", tag).Result()
	if err != nil {
		return 0
	}
	return findStep(v)
}

// findStep looks for a "step" key in IDS.INFO's reply (a flat array of key, value or a map).
func findStep(v any) int64 {
	switch x := v.(type) {
	case []any:
		for i := 0; i+1 < len(x); i++ {
			if k, ok := x[i].(string); ok && k == "step" {
				if n, ok := x[i+1].(int64); ok {
					return n
				}
			}
		}
	case map[any]any:
		if n, ok := x["step"].(int64); ok {
			return n
		}
	}
	return 0
}
