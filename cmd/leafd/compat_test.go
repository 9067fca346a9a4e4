package main

// The client compatibility suite (README "Client notes"): every mainstream Redis client,
// each with its default settings (plus the password), against a real leafd started with
// --requirepass. Each client connects, runs INCR, a pipeline of 1000 INCRs, IDS.SEGMENT,
// IDS.SNOWFLAKE (one, and a batch of 1000, read exactly), IDS.DECODE (RESP2, and RESP3 where
// the client speaks it), an error reply, AUTH, a transaction, and a command after leafd was
// killed and restarted. Every ID any client saw must be unique.
//
// The Go clients run in this process. The others are scripts in testdata/clients, run as
// child processes that report on stdout, one line each:
//
//	ID <kind> <decimal>                          an ID the client read (kind: tag or "snowflake")
//	DECODE <2|3> <id> <timestamp_ms> <worker_id> <sequence>
//	PASS <check>                                 a check the script made itself
//	RESTART                                      wait until leafd restarted, then a line on stdin
//
// scripts/test.sh installs what the scripts need (python3-redis, ruby-redis, npm ci).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

const compatPass = "s3cret pass" // a space, so clients must quote or send it as one bulk

// compatChecks are what every client must show, besides decode2 / decode3 (finish).
var compatChecks = []string{"connect", "incr", "pipeline", "segment", "snowflake", "error", "auth", "transaction", "reconnect"}

// compatRun records what one client did.
type compatRun struct {
	t      *testing.T
	l      *e2e.Leafd
	mu     sync.Mutex
	ids    map[string]map[int64]bool
	checks map[string]bool
}

func newCompatRun(t *testing.T) *compatRun {
	return &compatRun{
		t: t, l: e2e.Start(t, "--requirepass", compatPass, "--http-addr", ""),
		ids: map[string]map[int64]bool{}, checks: map[string]bool{},
	}
}

// id records an ID; a second sighting of the same ID fails the test.
func (r *compatRun) id(kind string, v int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids[kind] == nil {
		r.ids[kind] = map[int64]bool{}
	}
	if r.ids[kind][v] {
		r.t.Errorf("duplicate %s ID %d", kind, v)
	}
	r.ids[kind][v] = true
}

func (r *compatRun) pass(check string) {
	r.mu.Lock()
	r.checks[check] = true
	r.mu.Unlock()
}

// decoded checks an IDS.DECODE reply against the ID's bits (layout 41/10/12, Leaf's epoch).
func (r *compatRun) decoded(proto int, id, tsMS, worker, seq int64) {
	r.t.Helper()
	wantTS := id>>22 + 1288834974657
	if tsMS != wantTS || worker != (id>>12)&1023 || seq != id&4095 {
		r.t.Errorf("IDS.DECODE %d (RESP%d): got timestamp_ms %d worker_id %d sequence %d, want %d %d %d",
			id, proto, tsMS, worker, seq, wantTS, (id>>12)&1023, id&4095)
		return
	}
	r.pass(fmt.Sprintf("decode%d", proto))
}

// restart kills leafd (SIGKILL) and starts it again on the same port and data dir.
func (r *compatRun) restart() {
	r.l.Kill()
	r.l.Restart()
	r.pass("reconnect-restarted")
}

// finish checks that every required check passed; protos are the protocols whose
// IDS.DECODE the client must have read.
func (r *compatRun) finish(protos ...int) {
	r.t.Helper()
	want := append([]string(nil), compatChecks...)
	for _, p := range protos {
		want = append(want, fmt.Sprintf("decode%d", p))
	}
	var missing []string
	for _, c := range want {
		if !r.checks[c] {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		r.t.Errorf("checks not passed: %s", strings.Join(missing, ", "))
	}
	if n := len(r.ids["snowflake"]); n < 1001 {
		r.t.Errorf("got %d distinct snowflake IDs, want at least 1001 (one plus a batch of 1000)", n)
	}
	if n := len(r.ids["order"]); n < 1000 {
		r.t.Errorf("got %d distinct order IDs, want at least 1000", n)
	}
}

// increasing checks a batch is strictly increasing and records it.
func (r *compatRun) batch(kind string, ids []int64) {
	r.t.Helper()
	for i, v := range ids {
		if i > 0 && v <= ids[i-1] {
			r.t.Errorf("%s batch: ID %d after %d, want strictly increasing", kind, v, ids[i-1])
		}
		r.id(kind, v)
	}
}

// runScript runs an external client and feeds its report into r.
func (r *compatRun) runScript(name string, args ...string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	host, port := splitAddr(r.l.Addr)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LEAFD_HOST="+host, "LEAFD_PORT="+port, "LEAFD_PASSWORD="+compatPass)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("%s: %v", name, err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		nums := make([]int64, 0, len(f))
		for _, s := range f[1:] {
			if v, err := strconv.ParseInt(s, 10, 64); err == nil {
				nums = append(nums, v)
			}
		}
		switch {
		case f[0] == "ID" && len(f) == 3 && len(nums) == 1:
			r.id(f[1], nums[0])
		case f[0] == "DECODE" && len(nums) == 5:
			r.decoded(int(nums[0]), nums[1], nums[2], nums[3], nums[4])
		case f[0] == "PASS" && len(f) == 2:
			r.pass(f[1])
		case f[0] == "RESTART":
			r.restart()
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				r.t.Errorf("%s: writing to stdin: %v", name, err)
			}
		default:
			r.t.Errorf("%s: unexpected report line %q", name, sc.Text())
		}
	}
	if err := cmd.Wait(); err != nil {
		r.t.Errorf("%s exited: %v\nstderr:\n%s", name, err, stderr.String())
	}
}

func splitAddr(addr string) (string, string) {
	i := strings.LastIndexByte(addr, ':')
	return addr[:i], addr[i+1:]
}

// needCompatTool fails under LEAFD_TEST_REQUIRE (CI) or skips when a client's runtime or
// library is missing, saying how to get it.
func needCompatTool(t *testing.T, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	msg := what + " missing: run bash scripts/test.sh, which installs it"
	if os.Getenv("LEAFD_TEST_REQUIRE") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func TestCompatPython(t *testing.T) {
	t.Parallel()
	err := exec.Command("/usr/bin/python3", "-c", "import redis").Run()
	needCompatTool(t, err == nil, "Debian's python3-redis for /usr/bin/python3")
	r := newCompatRun(t)
	r.runScript("/usr/bin/python3", filepath.Join("testdata", "clients", "redis_py.py"))
	r.finish(2)
}

func TestCompatRuby(t *testing.T) {
	t.Parallel()
	err := exec.Command("ruby", "-e", "require 'redis'").Run()
	needCompatTool(t, err == nil, "ruby and Debian's ruby-redis")
	r := newCompatRun(t)
	r.runScript("ruby", filepath.Join("testdata", "clients", "redis_rb.rb"))
	r.finish(2)
}

func TestCompatHiredis(t *testing.T) {
	t.Parallel()
	_, err := os.Stat("/usr/include/hiredis/hiredis.h")
	_, gccErr := exec.LookPath("gcc")
	needCompatTool(t, err == nil && gccErr == nil, "gcc and libhiredis-dev")
	bin := filepath.Join(t.TempDir(), "hiredis-client")
	out, err := exec.Command("gcc", "-O1", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "clients", "hiredis.c"), "-lhiredis").CombinedOutput()
	if err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	r := newCompatRun(t)
	r.runScript(bin)
	r.finish(2)
}

// nodeDir holds the Node clients; scripts/test.sh runs npm ci there.
var nodeDir = filepath.Join("testdata", "clients", "node")

func TestCompatNode(t *testing.T) {
	t.Parallel()
	_, err := os.Stat(filepath.Join(nodeDir, "node_modules", "ioredis"))
	needCompatTool(t, err == nil, "node and "+nodeDir+"/node_modules (npm ci)")
	tests := []struct {
		script string
		protos []int // IDS.DECODE read in
	}{
		{"ioredis.js", []int{2, 3}},
		{"node_redis4.js", []int{2}},
		{"node_redis.js", []int{2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			r := newCompatRun(t)
			r.runScript("node", filepath.Join(nodeDir, tt.script))
			r.finish(tt.protos...)
			// Each script also shows that its default integer reply is past 2^53 (the
			// README's warning), before reading IDs exactly.
			if !r.checks["default-rounds"] {
				t.Error("check default-rounds not passed")
			}
		})
	}
}

// retry runs f up to n times until it succeeds: after leafd restarted, a client may hand
// out pooled connections that are dead, and an application retries (README "Client notes").
func retry[T any](n int, f func() (T, error)) (v T, err error) {
	for i := 0; i < n; i++ {
		if v, err = f(); err == nil {
			return v, nil
		}
		// A pool may hold several connections to the dead process; each failed call drops
		// one. Pace the attempts so a slow restart is not counted as a failure.
		time.Sleep(100 * time.Millisecond)
	}
	return v, err
}
