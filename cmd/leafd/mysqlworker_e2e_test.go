package main

// Binary tests of the MySQL worker-id source: several instances on one MariaDB with no other
// flag than --mysql-dsn, kill -9 and a restart on a wiped data dir, a holder paused past its
// lease while another takes its id, the database connection cut and delayed by a proxy, and a
// failover to a lagging replica. Every test checks that no ID is issued twice.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// Short leases for the fault tests: a taker waits 2s + 1s.
var fastLease = []string{"--worker-lease", "2s", "--lease-window", "1s"}

// twoIDs is a layout with worker ids 0 and 1 only, so that a third instance must take over.
var twoIDs = []string{"--snowflake-bits", "41/1/21"}

// mwLoad is snowflake load (IDS.SNOWFLAKE 20 on two connections) on several instances into
// one IDSet, each instance's load with its own stop.
type mwLoad struct {
	ids   *e2e.IDSet
	wg    sync.WaitGroup
	loads map[string]*e2e.BatchLoad
	stops []context.CancelFunc
}

func newMWLoad() *mwLoad { return &mwLoad{ids: e2e.NewIDSet(), loads: map[string]*e2e.BatchLoad{}} }

func (s *mwLoad) run(who string, l *e2e.Leafd) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stops = append(s.stops, cancel)
	bl := &e2e.BatchLoad{}
	s.loads[who] = bl
	bl.Run(ctx, &s.wg, l.Client(2), who, s.ids, 2, false, "IDS.SNOWFLAKE", 20)
}

func (s *mwLoad) stop() {
	for _, c := range s.stops {
		c()
	}
	s.wg.Wait()
}

// served waits until who's load has served n more batches.
func (s *mwLoad) served(t *testing.T, who string, n int64, d time.Duration) {
	t.Helper()
	bl := s.loads[who]
	e2e.Eventually(t, d, who+" serving snowflake IDs", e2e.Grown(&bl.OK, n))
}

func workerSource(t *testing.T, l *e2e.Leafd) string {
	t.Helper()
	return e2e.SFInfo(t, l.Client(3))["snowflake_worker_source"]
}

// TestMySQLWorkerIDs: two, then three instances on one MariaDB with only --mysql-dsn, under
// snowflake load: distinct worker ids from leafd_worker (not all worker 0), 0 duplicates.
func TestMySQLWorkerIDs(t *testing.T) {
	t.Parallel()
	dsn, db := e2e.SharedDB(t)
	ls := e2e.StartMany(t, []string{"--mysql-dsn", dsn}, []string{"--mysql-dsn", dsn})
	load := newMWLoad()
	defer load.stop()
	load.run("a", ls[0])
	load.run("b", ls[1])
	workers := map[int64]string{}
	add := func(who string, l *e2e.Leafd) {
		w := e2e.WorkerOf(t, l)
		if prev, ok := workers[w]; ok {
			t.Fatalf("%s and %s both have worker id %d", prev, who, w)
		}
		workers[w] = who
		if src := workerSource(t, l); src != "mysql" {
			t.Errorf("%s: snowflake_worker_source %q, want mysql", who, src)
		}
	}
	add("a", ls[0])
	add("b", ls[1])
	c := e2e.StartMySQL(t, dsn)
	load.run("c", c)
	add("c", c)
	load.served(t, "a", 200, 20*time.Second)
	load.served(t, "c", 200, 20*time.Second)
	checkLeaseReported(t, ls[0], 6000)
	load.stop()
	load.ids.Check(t, 20000)
	if n := e2e.SQLInt(t, db, "SELECT COUNT(*) FROM leafd_worker WHERE token <> ''"); n != 3 {
		t.Errorf("%d held rows in leafd_worker, want 3", n)
	}
	for who, bl := range load.loads {
		if o := bl.Other(); len(o) > 0 {
			t.Errorf("%s: unexpected errors %v", who, o[:min(len(o), 3)])
		}
	}
	for _, l := range append(ls, c) {
		if err := l.Stop(10 * time.Second); err != nil {
			t.Errorf("clean stop: %v", err)
		}
	}
	if n := e2e.SQLInt(t, db, "SELECT COUNT(*) FROM leafd_worker WHERE token <> ''"); n != 0 {
		t.Errorf("%d rows still held after clean stops, want 0 (released)", n)
	}
}

// checkLeaseReported: INFO snowflake, /status.json and /metrics show the worker lease, its
// deadline ahead and renewals done.
func checkLeaseReported(t *testing.T, l *e2e.Leafd, leaseMs int64) {
	t.Helper()
	c := l.Client(3)
	info := e2e.SFInfo(t, c)
	if info["snowflake_worker_lease_ms"] != strconv.FormatInt(leaseMs, 10) {
		t.Errorf("INFO snowflake_worker_lease_ms %q, want %d", info["snowflake_worker_lease_ms"], leaseMs)
	}
	if e2e.SFInfoInt(t, c, "snowflake_worker_renewals") < 1 || e2e.SFInfoInt(t, c, "snowflake_worker_acquisitions") < 1 {
		t.Errorf("INFO: want renewals and an acquisition: %v", info)
	}
	now := time.Now().UnixMilli()
	if d := e2e.SFInfoInt(t, c, "snowflake_worker_lease_deadline_ms"); d <= now || d > now+leaseMs {
		t.Errorf("INFO snowflake_worker_lease_deadline_ms %d not within the lease ahead of %d", d, now)
	}
	if r := e2e.SFInfoInt(t, c, "snowflake_worker_last_renewal_ms"); r > now || r < now-leaseMs {
		t.Errorf("INFO snowflake_worker_last_renewal_ms %d not within the lease before %d", r, now)
	}
	if code, body, err := l.HTTPGet("/status.json", ""); err != nil || code != 200 || !strings.Contains(body, `"worker_lease":{"lease_ms":`+strconv.FormatInt(leaseMs, 10)) {
		t.Errorf("/status.json: %d %v, want worker_lease: %s", code, err, e2e.Tail(body, 3))
	}
	if code, body, err := l.HTTPGet("/metrics", ""); err != nil || code != 200 || !strings.Contains(body, "leafd_snowflake_worker_renewals_total") ||
		!strings.Contains(body, "leafd_snowflake_worker_lease_deadline_seconds") {
		t.Errorf("/metrics: %d %v, want the worker lease metrics", code, err)
	}
}

// TestMySQLWorkerKillWipe: two instances, two worker ids. One is killed -9 under load and
// restarted on a wiped data dir (a new instance to the table): it waits until the dead one's
// lease has run out, takes the id over, waits the taker's wait and serves; 0 duplicates.
func TestMySQLWorkerKillWipe(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	args := append(append([]string{"--mysql-dsn", dsn}, fastLease...), twoIDs...)
	ls := e2e.StartMany(t, args, args)
	a, b := ls[0], ls[1]
	load := newMWLoad()
	defer load.stop()
	load.run("a", a)
	load.run("b", b)
	wa, wb := e2e.WorkerOf(t, a), e2e.WorkerOf(t, b)
	if wa == wb {
		t.Fatalf("both have worker id %d", wa)
	}
	load.served(t, "a", 100, 20*time.Second)
	a.Kill()
	entries, _ := os.ReadDir(a.DataDir)
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(a.DataDir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	a.Restart()
	start := time.Now()
	okBefore := load.loads["a"].OK.Load()
	load.served(t, "a", 100, 30*time.Second)
	t.Logf("restarted on a wiped data dir: serving again after %v", time.Since(start).Round(100*time.Millisecond))
	if got := e2e.WorkerOf(t, a); got != wa {
		t.Errorf("restarted instance has worker id %d, want the dead one's %d", got, wa)
	}
	if okBefore == load.loads["a"].OK.Load() {
		t.Error("no load served after the restart")
	}
	load.served(t, "b", 100, 20*time.Second)
	load.stop()
	load.ids.Check(t, 20000)
}

// TestMySQLWorkerPausedHolder: two instances hold the two worker ids; a third waits
// (NOWORKER: ids exhausted). The first is frozen (SIGSTOP) past its lease: the third takes its
// id over and serves after the taker's wait. Woken, the old holder issues nothing more (its
// fenced renewal finds the id held by the third: NOWORKER), and no ID is issued twice.
func TestMySQLWorkerPausedHolder(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	args := append(append([]string{"--mysql-dsn", dsn}, fastLease...), twoIDs...)
	ls := e2e.StartMany(t, args, args)
	a, b := ls[0], ls[1]
	wa, wb := e2e.WorkerOf(t, a), e2e.WorkerOf(t, b)
	if wa == wb {
		t.Fatalf("both have worker id %d", wa)
	}
	c := e2e.StartMySQL(t, dsn, append(fastLease, twoIDs...)...)
	load := newMWLoad()
	defer load.stop()
	load.run("b", b)
	load.run("c", c)
	cc := c.Client(3)
	ctx := context.Background()
	if _, err := cc.Do(ctx, "IDS.SNOWFLAKE").Int64(); err == nil || !strings.Contains(err.Error(), "NOWORKER") {
		t.Fatalf("third instance with both ids held: want NOWORKER, got %v", err)
	}
	if st := e2e.SFInfo(t, cc)["snowflake_status"]; !strings.Contains(st, "every worker id of the layout is leased") {
		t.Errorf("third instance's INFO snowflake_status %q, want the ids-exhausted reason", st)
	}
	before, err := a.Client(3).Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	load.ids.Add("a", before...)
	a.Pause()
	paused := time.Now()
	load.served(t, "c", 50, 30*time.Second)
	t.Logf("third instance serving %v after the holder froze", time.Since(paused).Round(100*time.Millisecond))
	if got := e2e.SFInfoInt(t, cc, "snowflake_worker_id"); got != wa {
		t.Fatalf("third instance has worker id %d, want the frozen holder's %d", got, wa)
	}
	a.Resume()
	after, noWorker, lastErr := e2e.DrainUntilNoWorker(a.Client(3), 10*time.Second)
	load.ids.Add("a-woken", after...)
	if !noWorker {
		t.Errorf("woken holder never answered NOWORKER (last error %v, %d IDs)", lastErr, len(after))
	}
	if len(after) > 0 {
		t.Errorf("woken holder issued %d IDs after its lease ran out, want 0", len(after))
	}
	load.served(t, "c", 50, 10*time.Second)
	load.stop()
	load.ids.Check(t, 5000)
	if !strings.Contains(a.Log(), "held by") {
		t.Errorf("the woken holder's log does not say who holds its id:\n%s", e2e.Tail(a.Log(), 20))
	}
}

// proxiedDSN is dsn with its address replaced by the proxy's.
func proxiedDSN(t *testing.T, dsn string, px *e2e.Proxy) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = px.Addr()
	return cfg.FormatDSN()
}

// TestMySQLWorkerProxy: two instances reach the database through a proxy that delays every
// chunk, then cuts every connection, then swallows everything for longer than the lease (the
// instances self-fence: NOWORKER), then passes again: both serve again with their ids after
// re-acquiring, and no ID is issued twice.
func TestMySQLWorkerProxy(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	cfg, _ := mysql.ParseDSN(dsn)
	px := e2e.StartProxy(t, cfg.Addr)
	args := append([]string{"--mysql-dsn", proxiedDSN(t, dsn, px)}, fastLease...)
	ls := e2e.StartMany(t, args, args)
	wa, wb := e2e.WorkerOf(t, ls[0]), e2e.WorkerOf(t, ls[1])
	load := newMWLoad()
	defer load.stop()
	load.run("a", ls[0])
	load.run("b", ls[1])
	load.served(t, "a", 50, 10*time.Second)

	px.SetMode(e2e.ProxyDelay, 300*time.Millisecond)
	time.Sleep(3 * time.Second) // a phase of the fault: renewals answered late
	px.SetMode(e2e.ProxyReset, 0)
	time.Sleep(500 * time.Millisecond)
	px.SetMode(e2e.ProxyPass, 0)
	load.served(t, "a", 50, 20*time.Second)
	// Each instance against its own count before the blackhole (the sum of both made the bound
	// depend on how many refusals the other had seen in the earlier phases).
	noA, noB := load.loads["a"].NoWorker.Load(), load.loads["b"].NoWorker.Load()
	px.SetMode(e2e.ProxyBlackhole, 0)
	e2e.Eventually(t, 30*time.Second, "both instances refusing (self-fenced) while the database is unreachable", func() bool {
		return load.loads["a"].NoWorker.Load() > noA+10 && load.loads["b"].NoWorker.Load() > noB+10
	})
	time.Sleep(time.Second) // both lapsed
	px.SetMode(e2e.ProxyPass, 0)
	load.served(t, "a", 50, 30*time.Second)
	load.served(t, "b", 50, 30*time.Second)
	if ga, gb := e2e.WorkerOf(t, ls[0]), e2e.WorkerOf(t, ls[1]); ga != wa || gb != wb {
		t.Errorf("worker ids after the faults %d, %d; want %d, %d", ga, gb, wa, wb)
	}
	load.stop()
	load.ids.Check(t, 10000)
	if n := e2e.SFInfoInt(t, ls[0].Client(3), "snowflake_worker_self_fences"); n < 1 {
		t.Errorf("INFO snowflake_worker_self_fences %d after a blackhole longer than the lease, want at least 1", n)
	}
	if !strings.Contains(ls[0].Log(), "re-acquired") {
		t.Errorf("no re-acquisition logged after the lease lapsed:\n%s", e2e.Tail(ls[0].Log(), 20))
	}
}

// TestMySQLWorkerFailover: real MariaDB replication, a proxy that moves like a virtual IP,
// four worker ids. Three instances serve; the replica's applier stops (it falls behind by
// every later renewal and bound) and a fourth instance acquires the last id on the primary
// only. The fourth is frozen, the database fails over to the lagging replica (which never saw
// the fourth's acquisition), and a fifth instance takes that id on the new primary at once.
// The lagging replica also shows the three others' leases older than they are: the fifth may
// take one of those ids instead (its holder then loses it: NOWORKER). Either way the fifth's
// taker's wait must put its IDs above the previous holder's. 0 duplicates.
func TestMySQLWorkerFailover(t *testing.T) {
	t.Parallel()
	r, px, dsn := e2e.Replicated(t)
	args := append(append([]string{"--mysql-dsn", dsn}, fastLease...), "--snowflake-bits", "41/2/20")
	ls := e2e.StartMany(t, args, args, args)
	load := newMWLoad()
	defer load.stop()
	for i, l := range ls {
		e2e.WorkerOf(t, l)
		load.run(string(rune('a'+i)), l)
	}
	r.WaitCaughtUp(30 * time.Second)
	r.StopApplier()
	d := e2e.StartMySQL(t, dsn, args[2:]...)
	wd := e2e.WorkerOf(t, d)
	load.run("d", d)
	load.served(t, "d", 50, 10*time.Second)
	load.served(t, "a", 50, 10*time.Second) // renewals and bounds the replica misses
	d.Pause()
	lost := r.Promote()
	px.SetTarget(r.Primary.Addr())
	t.Logf("failover: the new primary lacks %d transactions", lost)
	e := e2e.StartMySQL(t, dsn, args[2:]...)
	load.run("e", e)
	load.served(t, "e", 50, 30*time.Second)
	// e took an id whose rows the failover lost: the lost acquisition's (wd), or one whose
	// renewals were lost so that its lease looked expired on the new primary.
	we := e2e.WorkerOf(t, e)
	t.Logf("fifth instance took worker id %d (the lost acquisition was %d)", we, wd)
	d.Resume()
	after, _, _ := e2e.DrainUntilNoWorker(d.Client(3), 10*time.Second)
	load.ids.Add("d-woken", after...)
	// Each of the three either serves again (its row survived, or it re-took it) or has lost
	// its id to e, which it says (NOWORKER until a restart).
	for i, who := range []string{"a", "b", "c"} {
		bl := load.loads[who]
		if !e2e.Poll(20*time.Second, e2e.Grown(&bl.OK, 50)) && !strings.Contains(ls[i].Log(), "worker id lost") {
			t.Errorf("%s neither serving after the failover nor reporting its id lost:\n%s", who, e2e.Tail(ls[i].Log(), 15))
		}
	}
	load.stop()
	load.ids.Check(t, 20000)
	_ = testenv.EnvRequire
}

// TestStatefulSetSourceBinary: --worker-source statefulset takes offset + ordinal (INFO says
// source statefulset, IDS.DECODE the id), the bound stays in the data dir across a restart, and
// an ordinal beyond the layout refuses the start naming the flags.
func TestStatefulSetSourceBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := e2e.Start(t, "--worker-source", "statefulset", "--pod-ordinal", "3", "--worker-offset", "100", "--data-dir", dir)
	if w := e2e.WorkerOf(t, l); w != 103 {
		t.Fatalf("worker id %d, want 100 + 3", w)
	}
	if src := workerSource(t, l); src != "statefulset" {
		t.Errorf("snowflake_worker_source %q, want statefulset", src)
	}
	last := e2e.SFNext(t, l.Client(3))
	l.Kill()
	l.Restart()
	if first := e2e.WaitServing(t, l.Client(3), 20*time.Second); first <= last {
		t.Errorf("after a kill -9 and restart: first ID %d not above the last %d (the bound in the data dir)", first, last)
	}
	out, err := exec.Command(e2e.Binary(), "--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--http-addr", "",
		"--worker-source", "statefulset", "--pod-ordinal", "4", "--snowflake-bits", "41/2/20").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "does not fit the layout's worker ids 0-3") {
		t.Errorf("ordinal 4 with worker ids 0-3: want a refused start, got %v:\n%s", err, e2e.Tail(string(out), 5))
	}
}
