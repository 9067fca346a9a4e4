package main

// End-to-end tests of segment IDs from MySQL/MariaDB shared by several leafd processes: the
// real binary (built with -race by TestMain), real go-redis clients, a real MariaDB (the
// shared one of scripts/test.sh, or a private one from testenv where the test must stop it),
// and a TCP proxy for network faults. The invariant everywhere: no ID is ever handed out
// twice, and a refusal is a coded error reply, never a number. The volume tests (many
// instances, disjoint ranges of step 10) are in cmd/leafd/volume.

import (
	"database/sql"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/internal/testkit"
)

// --- tests -------------------------------------------------------------------------------

// (b) The same load while one instance after the other is killed with SIGKILL every 2,500
// IDs and restarted: only successful replies count, and none repeats an ID.
func TestMySQLKillRestart(t *testing.T) {
	t.Parallel()
	dsn, db := e2e.SharedDB(t)
	const step = 100
	var ls []*e2e.Leafd
	for range 3 {
		ls = append(ls, e2e.StartMySQL(t, dsn, "--max-step", "1000"))
	}
	e2e.CreateTag(t, ls[0], db, "orders", step)

	var stopped atomic.Bool
	var n e2e.Counts
	wait := e2e.Background(e2e.Load{Tag: "orders", Conns: 10, Count: &n, Addrs: e2e.Addrs(ls...), Stop: stopped.Load})
	const kills = 4
	for k := range kills {
		// Each kill comes once the load has drawn 2,500 more IDs (several refills).
		e2e.Eventually(t, time.Minute, "2500 more IDs before the kill", e2e.Grown(&n.OK, 2500))
		l := ls[k%len(ls)]
		before := n.OK.Load()
		l.Kill()
		l.Restart()
		t.Logf("kill -9 of instance %d after %d IDs; restarted", k%len(ls), before)
	}
	e2e.Eventually(t, time.Minute, "1000 more IDs after the last restart", e2e.Grown(&n.OK, 1000))
	stopped.Store(true)
	loads := wait()

	tt := e2e.Sum(loads)
	t.Logf("%d IDs, error replies %v, %d transport errors (clients of killed instances)", tt.IDs, tt.Codes, tt.NetErrs)
	if tt.IDs < 10_000 {
		t.Errorf("got %d IDs, want at least 10000", tt.IDs)
	}
	tt.NetErrs, tt.LastNet = 0, nil // expected while an instance is down
	e2e.CheckCodes(t, "kill -9", tt, "UNAVAILABLE")
	e2e.CheckOrder(t, loads)
	e2e.CheckUnique(t, loads)
	for i, l := range ls {
		if _, err := l.Incr("orders"); err != nil {
			t.Errorf("instance %d after the kills: INCR: %v, want a number", i, err)
		}
	}
	e2e.StopClean(t, ls...)
}

// (c) Network faults between leafd and MariaDB through a proxy: 50 ms per chunk (INCR keeps
// working; the p999 latency is recorded), a blackhole (buffers drain, then UNAVAILABLE),
// connection resets (UNAVAILABLE), then normal again (recovery).
func TestMySQLProxyFaults(t *testing.T) {
	dsn, db := e2e.SharedDB(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px := e2e.StartProxy(t, cfg.Addr)
	cfg.Addr = px.Addr()
	const step = 10_000
	l := e2e.StartMySQL(t, cfg.FormatDSN(), "--max-step", strconv.Itoa(step), "--wait-timeout", "1s", "--load-timeout", "3s")
	stalls := testkit.WatchStalls(t, l.PID())
	e2e.CreateTag(t, l, db, "orders", step)
	if _, err := l.Incr("orders"); err != nil {
		t.Fatalf("INCR before the faults: %v", err)
	}

	var stopped atomic.Bool
	var pause atomic.Int64
	var n e2e.Counts
	wait := e2e.Background(e2e.Load{Tag: "orders", Conns: 8, Keep: true, Pause: &pause, Count: &n, Addrs: e2e.Addrs(l), Stop: stopped.Load})

	// Phase 1: 50 ms per chunk; one allocation (BEGIN, UPDATE and SELECT as prepared
	// statements, COMMIT: 6 round trips) takes about 650 ms. The clients are paced to about
	// 5k INCR/s, so a segment of 10k lasts 2 s: the preload, started after 10%, must hide
	// the database's latency from them. The phase ends after two refills through the delay.
	pause.Store(int64(time.Millisecond))
	p1 := time.Now()
	loads1, waits1 := l.InfoInt("segment", "segment_loads_ok"), l.InfoInt("segment", "segment_load_waits")
	px.SetMode(e2e.ProxyDelay, 50*time.Millisecond)
	e2e.Eventually(t, time.Minute, "phase 1: two refills through the delay", func() bool {
		return l.InfoInt("segment", "segment_loads_ok")-loads1 >= 2
	})
	loads1 = l.InfoInt("segment", "segment_loads_ok") - loads1
	waits1 = l.InfoInt("segment", "segment_load_waits") - waits1

	// Phase 2: blackhole. What is buffered is served, then UNAVAILABLE; the phase ends after
	// 20 refusals.
	p2 := time.Now()
	px.SetMode(e2e.ProxyBlackhole, 0)
	pause.Store(0) // use the buffers up quickly
	e2e.Eventually(t, time.Minute, "phase 2: 20 refusals in the blackhole", e2e.Grown(&n.Refused, 20))

	// Phase 3: every connection reset at once; the phase ends after 20 more refusals.
	p3 := time.Now()
	px.SetMode(e2e.ProxyReset, 0)
	e2e.Eventually(t, time.Minute, "phase 3: 20 refusals with resets", e2e.Grown(&n.Refused, 20))

	// Phase 4: normal again; the phase ends after 1000 IDs.
	p4 := time.Now()
	px.SetMode(e2e.ProxyPass, 0)
	e2e.Eventually(t, time.Minute, "phase 4: 1000 IDs after the network came back", e2e.Grown(&n.OK, 1000))
	stopped.Store(true)
	loads := wait()
	end := time.Now()

	ids1, codes1, net1, lat1 := e2e.Phase(loads, p1, p2)
	q := e2e.P999(lat1)
	// The same latencies less the CPU stall of this process and the server during each
	// round trip: on a loaded machine a reply read late is not the server waiting.
	var own []time.Duration
	for _, cl := range loads {
		for _, r := range cl.Replies {
			if r.Err == nil && !r.At.Before(p1) && r.At.Before(p2) {
				own = append(own, r.Took-stalls.In(r.At.Add(-r.Took), r.At))
			}
		}
	}
	qOwn := e2e.P999(own)
	t.Logf("phase 1 (50ms/chunk): %d IDs, %d refills, %d waits for a load, errors %v, p999 INCR latency %v (%v less CPU stalls), max %v", ids1, loads1, waits1, codes1, q, qOwn, lat1[len(lat1)-1])
	e2e.BenchOut(t, "mysql_incr_p999_50ms_db_latency", float64(q)/float64(time.Millisecond), "ms")
	if len(codes1) > 0 || net1 > 0 {
		t.Errorf("phase 1 (50ms/chunk): got errors %v and %d transport errors, want none", codes1, net1)
	}
	// The server's own count: no request waited for a load, whatever the machine's load (a
	// server without the preload makes a few requests per refill wait, too few to move the
	// p999 of ten thousand).
	if waits1 != 0 {
		t.Errorf("phase 1: %d requests waited for a load (segment_load_waits), want 0: the preload should hide the allocation", waits1)
	}
	// Well under one allocation (650 ms) once the CPU stalls are taken out.
	if qOwn > 300*time.Millisecond {
		t.Errorf("phase 1: got p999 INCR latency %v, %v less CPU stalls, want well under one allocation (300ms): the preload should hide it; %s", q, qOwn, testkit.Pressure())
	}
	if loads1 < 1 {
		t.Errorf("phase 1: got %d refills, want at least 1 (the latency is to be measured while refilling)", loads1)
	}

	ids2, codes2, net2, _ := e2e.Phase(loads, p2, p3)
	ids3, codes3, net3, _ := e2e.Phase(loads, p3, p4)
	t.Logf("phase 2 (blackhole): %d IDs, errors %v; phase 3 (reset): %d IDs, errors %v", ids2, codes2, ids3, codes3)
	for _, ph := range []struct {
		name  string
		codes map[string]int
		net   int
	}{{"phase 2 (blackhole)", codes2, net2}, {"phase 3 (reset)", codes3, net3}} {
		e2e.CheckCodes(t, ph.name, e2e.Totals{Codes: ph.codes, NetErrs: ph.net}, "UNAVAILABLE")
		if ph.codes["UNAVAILABLE"] == 0 {
			t.Errorf("%s: got no UNAVAILABLE reply, want the buffers used up and refusals", ph.name)
		}
	}
	// Without the database nothing beyond the two buffered segments can be served.
	if ids2+ids3 > 2*step {
		t.Errorf("phases 2-3: got %d IDs without a database, want at most 2 segments (%d)", ids2+ids3, 2*step)
	}

	// Phase 4: recovery.
	if d, ok := e2e.FirstOK(loads, -1, math.MinInt64, p4.Add(-time.Nanosecond), end); !ok {
		t.Errorf("phase 4 (normal): got no ID within %v, want recovery", end.Sub(p4).Round(time.Millisecond))
	} else {
		t.Logf("phase 4 (normal): first ID %v after the network came back", d.Round(time.Millisecond))
		if d > 2*time.Second {
			t.Errorf("phase 4: got the first ID %v after recovery, want within 2s", d)
		}
	}
	e2e.CheckOrder(t, loads)
	e2e.CheckUnique(t, loads)
	e2e.StopClean(t, l)
}

// (d) MariaDB paused (SIGSTOP), resumed, killed and started again: buffers are served, then
// UNAVAILABLE within the wait timeout; recovery within 5 s of the database returning. An
// instance started while the database is down stays up, refuses, and serves once it is back.
func TestMySQLDatabaseOutage(t *testing.T) {
	t.Parallel()
	m := testenv.StartMariaDB(t)
	e2e.SQLExec(t, e2e.OpenSQL(t, m.DSN("")), "CREATE DATABASE leafd")
	dsn := m.DSN("leafd")
	const wait, loadTimeout = 500 * time.Millisecond, 2 * time.Second
	l := e2e.StartMySQL(t, dsn, "--max-step", "1000", "--wait-timeout", wait.String(), "--load-timeout", loadTimeout.String())
	stalls := testkit.WatchStalls(t, l.PID())
	db := e2e.OpenSQL(t, dsn)
	e2e.CreateTag(t, l, db, "orders", 1000)

	var stopped atomic.Bool
	var pause atomic.Int64
	pause.Store(int64(time.Millisecond)) // about 4k INCR/s: a segment lasts a quarter second
	var n e2e.Counts
	loadDone := e2e.Background(e2e.Load{Tag: "orders", Conns: 4, Keep: true, Pause: &pause, Count: &n, Addrs: e2e.Addrs(l), Stop: stopped.Load})
	e2e.Eventually(t, time.Minute, "2000 IDs before the outage", e2e.Grown(&n.OK, 2000))

	// Each phase ends on replies: 20 refusals while the database is away, 1000 IDs once it
	// is back.
	tPause := time.Now()
	m.Pause()
	e2e.Eventually(t, time.Minute, "20 refusals with the database paused", e2e.Grown(&n.Refused, 20))
	tResume := time.Now()
	m.Resume()
	e2e.Eventually(t, time.Minute, "1000 IDs after the database resumed", e2e.Grown(&n.OK, 1000))

	tKill := time.Now()
	refusedInKill := e2e.Grown(&n.Refused, 20)
	m.Kill()
	// A new instance while the database is down: it starts, and refuses with UNAVAILABLE.
	l2 := e2e.StartMySQL(t, dsn, "--wait-timeout", wait.String(), "--load-timeout", "2s")
	if _, err := l2.Incr("orders"); err == nil {
		t.Errorf("new instance, database down: INCR returned a number, want UNAVAILABLE")
	} else if code, _ := e2e.ReplyCode(err); code != "UNAVAILABLE" {
		t.Errorf("new instance, database down: got %v, want UNAVAILABLE", err)
	}
	e2e.Eventually(t, time.Minute, "20 refusals with the database killed", refusedInKill)
	m.Start()
	tBack := time.Now()
	v2, took2, err := l2.WaitIncr("orders", 10*time.Second)
	if err != nil {
		t.Errorf("new instance: got %v %v after the database came back, want a number", err, took2)
	} else if took2 > 5*time.Second {
		t.Errorf("new instance: first ID %v after the database came back, want within 5s", took2)
	}
	t.Logf("instance started during the outage: first ID %d %v after the database came back", v2, took2.Round(time.Millisecond))
	e2e.Eventually(t, time.Minute, "1000 IDs after the database came back", e2e.Grown(&n.OK, 1000))
	stopped.Store(true)
	loads := loadDone()
	end := time.Now()

	firstOK := func(after time.Time) time.Duration {
		d, ok := e2e.FirstOK(loads, -1, math.MinInt64, after, end)
		if !ok {
			return -1
		}
		return d
	}
	for _, ph := range []struct {
		name         string
		down, up     time.Time
		recoverAfter time.Time
	}{
		{"pause", tPause, tResume, tResume},
		{"kill", tKill, tBack, tBack},
	} {
		ids, codes, net, _ := e2e.Phase(loads, ph.down, ph.up)
		e2e.CheckCodes(t, ph.name, e2e.Totals{Codes: codes, NetErrs: net}, "UNAVAILABLE")
		if codes["UNAVAILABLE"] == 0 {
			t.Errorf("%s: got no UNAVAILABLE during the outage, want refusals once the buffers are used up", ph.name)
		}
		// Every refusal comes within the wait timeout, plus 400 ms of slack (-race), plus
		// the time this process and the server waited for a CPU during that round trip: on
		// a loaded machine the client reads a reply late and the server's timer fires late,
		// which is not the server waiting. The bound stays below the load timeout whatever
		// the stall, so a server that ignored --wait-timeout (refusing only when the load
		// fails, after 2 s) fails here on a loaded machine too, and far above the bound on
		// a quiet one.
		var slowest, slowStall, over, overTook, overStall time.Duration
		var slowErr error
		for _, cl := range loads {
			for _, r := range cl.Replies {
				if r.Code == "" || !r.At.After(ph.down) || !r.At.Before(ph.up) {
					continue
				}
				stall := stalls.In(r.At.Add(-r.Took), r.At)
				bound := min(wait+400*time.Millisecond+stall, loadTimeout-200*time.Millisecond)
				if r.Took > slowest {
					slowest, slowStall, slowErr = r.Took, stall, r.Err
				}
				if r.Took-bound > over {
					over, overTook, overStall = r.Took-bound, r.Took, stall
				}
			}
		}
		if over > 0 {
			t.Errorf("%s: an UNAVAILABLE took %v with %v of CPU stall, want within the wait timeout %v (+400ms slack + stall, at most %v); %s",
				ph.name, overTook, overStall, wait, loadTimeout-200*time.Millisecond, testkit.Pressure())
		}
		rec := firstOK(ph.recoverAfter)
		t.Logf("%s: %d IDs served during the outage (buffers), %v refusals (slowest %v, with %v of CPU stall: %v); first ID %v after the database returned",
			ph.name, ids, codes, slowest, slowStall, slowErr, rec.Round(time.Millisecond))
		if rec < 0 || rec > 5*time.Second {
			t.Errorf("%s: got recovery after %v, want within 5s of the database returning", ph.name, rec)
		}
	}
	e2e.CheckOrder(t, loads)
	all := e2e.CheckUnique(t, loads)
	if slices.ContainsFunc(all, func(x e2e.InstID) bool { return x.ID == v2 }) {
		t.Errorf("ID %d of the new instance was also handed out by the first", v2)
	}
	e2e.StopClean(t, l, l2)
}

// servedTwo starts two instances on a fresh shared database with --max-step step, creates
// tag "orders" with that step, and draws want IDs over conns connections per instance.
//
// Generous wait and load timeouts: the tests on it are about which code a refusal carries
// (REGRESSION, never a number), not latency, and a MariaDB starved on a loaded 2-core
// machine can take longer than the default 500 ms for one refill, which would show as
// UNAVAILABLE where every reply must be an ID or REGRESSION.
func servedTwo(t *testing.T, step int64, conns int, want int64) (dsn string, db *sql.DB, ls []*e2e.Leafd, loads []*e2e.ConnLoad) {
	t.Helper()
	dsn, db = e2e.SharedDB(t)
	args := []string{"--max-step", strconv.FormatInt(step, 10), "--wait-timeout", "10s", "--load-timeout", "10s"}
	ls = []*e2e.Leafd{e2e.StartMySQL(t, dsn, args...), e2e.StartMySQL(t, dsn, args...)}
	e2e.CreateTag(t, ls[0], db, "orders", step)
	var n e2e.Counts
	loads = e2e.RunLoad(e2e.Load{Tag: "orders", Conns: conns, Count: &n, Addrs: e2e.Addrs(ls...), Stop: e2e.Until(&n.OK, want, time.Now().Add(20*time.Second))})
	return dsn, db, ls, loads
}

// (e) A lagging replica promoted: max_id drops by ten steps. Each instance refuses with
// REGRESSION (not numbers) once it needs a new range, keeps refusing, still refuses after a
// restart (the marks are durable), and serves again once max_id is above its mark.
func TestMySQLRegression(t *testing.T) {
	t.Parallel()
	const step = 100
	_, db, ls, before := servedTwo(t, step, 3, 20_000)
	e2e.CheckCodes(t, "before the failover", e2e.Sum(before))
	high := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")
	lagMaxID(t, db, "orders", 10*step)
	lowered := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")

	// After the "failover": buffered IDs, then REGRESSION, and never a number again. The load
	// ends once each instance has refused 300 times (a minute at most).
	byInst := make([]e2e.Counts, len(ls))
	refusedEnough := func() bool {
		for i := range byInst {
			if byInst[i].Refused.Load() < 300 {
				return false
			}
		}
		return true
	}
	atMost := e2e.For(time.Minute)
	after := e2e.RunLoad(e2e.Load{Tag: "orders", Conns: 3, Keep: true, ByInst: byInst, Addrs: e2e.Addrs(ls...),
		Stop: func() bool { return refusedEnough() || atMost() }})
	tt := e2e.Sum(after)
	t.Logf("after max_id dropped by %d: %d IDs (buffered), replies %v", 10*step, tt.IDs, tt.Codes)
	e2e.CheckCodes(t, "after the failover", tt, "REGRESSION")
	for _, cl := range after {
		refused := false
		for _, r := range cl.Replies {
			switch {
			case r.Code == "REGRESSION":
				refused = true
			case r.Err == nil && refused:
				t.Errorf("instance %d: got ID %d after REGRESSION while max_id is still below the mark, want REGRESSION", cl.Inst, r.ID)
			}
		}
		if !refused {
			t.Errorf("instance %d: got no REGRESSION, want one once the buffered segments are used up", cl.Inst)
		}
	}
	if n := ls[0].InfoInt("segment", "segment_regressions"); n == 0 {
		t.Errorf("INFO segment_regressions: got 0, want > 0")
	}

	// The marks survive a restart.
	if err := ls[0].Stop(10 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	ls[0].Restart()
	for i := range 5 {
		if v, err := ls[0].Incr("orders"); err == nil {
			t.Errorf("after restart, INCR %d: got ID %d, want REGRESSION (max_id still below the mark)", i, v)
		} else if code, _ := e2e.ReplyCode(err); code != "REGRESSION" {
			t.Errorf("after restart, INCR %d: got %v, want REGRESSION", i, err)
		}
		time.Sleep(150 * time.Millisecond) // pacing: the refusals span some time
	}

	// A refused lease never moves max_id (the check runs inside the allocation transaction).
	if got := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'"); got != lowered {
		t.Errorf("max_id after the refusals: got %d, want %d (refused leases roll back)", got, lowered)
	}

	// The operator raises max_id above every range handed out: both serve again, above it.
	raised := e2e.SQLInt(t, db, "SELECT GREATEST(max_id, ?) + ? FROM leaf_alloc WHERE biz_tag = 'orders'", high, 10*step)
	e2e.SQLExec(t, db, "UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = 'orders'", raised)
	for i, l := range ls {
		v, took, err := l.WaitIncr("orders", 5*time.Second)
		if err != nil {
			t.Errorf("instance %d: max_id raised to %d: got %v after %v, want a number", i, raised, err, took)
			continue
		}
		if v < raised {
			t.Errorf("instance %d: got ID %d after max_id was raised to %d, want >= %d", i, v, raised, raised)
		}
	}
	var nf e2e.Counts
	final := e2e.RunLoad(e2e.Load{Tag: "orders", Conns: 2, Count: &nf, Addrs: e2e.Addrs(ls...), Stop: e2e.Until(&nf.OK, 2000, time.Now().Add(time.Minute))})
	e2e.CheckCodes(t, "after max_id was raised", e2e.Sum(final))
	e2e.CheckOrder(t, before)
	e2e.CheckOrder(t, after)
	e2e.CheckUnique(t, before, after, final)
	e2e.StopClean(t, ls...)
}

// (f) Tags the operator manages in SQL: a hand-inserted row is served once adopted
// (auto-create off), an unknown tag gets NOTAG saying how to create it, a deleted row stops
// being served after the tag refresh.
func TestMySQLHandInsertedTag(t *testing.T) {
	dsn, db := e2e.SharedDB(t)
	l := e2e.StartMySQL(t, dsn, "--auto-create", "off", "--tag-refresh", "1s")

	_, err := l.Incr("coupons")
	if code, _ := e2e.ReplyCode(err); code != "NOTAG" {
		t.Fatalf("INCR of an unknown tag: got %v, want NOTAG", err)
	}
	for _, want := range []string{"coupons", "IDS.CREATE", "INSERT INTO leaf_alloc", "leafd adopt"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NOTAG reply %q: want it to mention %q", err, want)
		}
	}
	if got := e2e.SQLInt(t, db, "SELECT COUNT(*) FROM leaf_alloc"); got != 0 {
		t.Errorf("auto-create off: got %d rows after INCR of an unknown tag, want 0", got)
	}

	// A row never asked for before: refused with NOTADOPTED (no fence row: leafd cannot tell
	// it from a row whose adoption a failover lost), and served from its max_id once
	// `leafd adopt` recorded its fence row.
	e2e.SQLExec(t, db, "INSERT INTO leaf_alloc(biz_tag, max_id, step, description) VALUES ('invoices', 5000, 50, 'by hand')")
	if _, err := l.Incr("invoices"); err == nil {
		t.Errorf("INCR of a hand-inserted tag before adopt: served, want NOTADOPTED")
	} else if code, _ := e2e.ReplyCode(err); code != "NOTADOPTED" {
		t.Errorf("INCR of a hand-inserted tag before adopt: got %v, want NOTADOPTED", err)
	}
	// A row for a tag that was just refused (NOTAG), adopted at once: served after the short
	// negative cache.
	e2e.SQLExec(t, db, "INSERT INTO leaf_alloc(biz_tag, max_id, step, description) VALUES ('coupons', 1, 50, 'by hand')")
	if out, status := adoptCmd(t, "--mysql-dsn", dsn); status != 0 {
		t.Fatalf("leafd adopt: exit %d:\n%s", status, out)
	}
	if v, took, err := l.WaitIncr("invoices", 5*time.Second); err != nil || v != 5000 {
		t.Errorf("INCR of an adopted hand-inserted tag: got %d, %v after %v; want 5000 (its max_id)", v, err, took)
	}
	v, took, err := l.WaitIncr("coupons", 10*time.Second)
	if err != nil || v != 1 {
		t.Errorf("INCR of a tag inserted after a NOTAG and adopted: got %d, %v after %v; want 1", v, err, took)
	} else if took > 3*time.Second {
		t.Errorf("tag inserted after a NOTAG: served after %v, want well under the 60s refresh (<3s)", took)
	}
	t.Logf("hand-inserted tag served after %v (it had been refused just before)", took.Round(time.Millisecond))

	// A deleted row: NOTAG once the refresh (1s) has dropped it.
	e2e.SQLExec(t, db, "DELETE FROM leaf_alloc WHERE biz_tag = 'invoices'")
	t0 := time.Now()
	if !e2e.Poll(5*time.Second, func() bool {
		_, err = l.Incr("invoices")
		code, _ := e2e.ReplyCode(err)
		return code == "NOTAG"
	}) {
		t.Errorf("deleted tag: got %v 5s after the DELETE, want NOTAG after the 1s refresh", err)
	} else {
		t.Logf("deleted tag refused with NOTAG after %v", time.Since(t0).Round(time.Millisecond))
	}
	e2e.StopClean(t, l)
}
