package main

// End-to-end tests of segment IDs from MySQL/MariaDB shared by several leafd processes: the
// real binary (built with -race by TestMain), real go-redis clients, a real MariaDB (the
// shared one of scripts/test.sh, or a private one from testenv where the test must stop it),
// and a TCP proxy for network faults. The invariant everywhere: no ID is ever handed out
// twice, and a refusal is a coded error reply, never a number.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/leafd/leafd/internal/testenv"
)

// --- helpers -----------------------------------------------------------------------------

// openSQL opens dsn for the test's own SQL (setup and fault injection).
func openSQL(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func sqlExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func sqlInt(t *testing.T, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var v int64
	if err := db.QueryRowContext(ctx, q, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

// mysqlLeafd starts a leafd on dsn with extra flags.
func mysqlLeafd(t *testing.T, dsn string, extra ...string) *leafd {
	t.Helper()
	return startLeafd(t, append([]string{"--mysql-dsn", dsn, "--log-level", "warn"}, extra...)...)
}

// connClient is a go-redis client with exactly one connection, so that what it sees is what
// one connection sees (per-connection order is the guarantee under test). No retries.
func connClient(addr string) *redis.Client {
	quietRedis.Do(func() { redis.SetLogger(nopLogger{}) })
	return redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
}

// quietRedis silences go-redis's pool log, which reports every refused dial while an
// instance is down (expected here; the tests count those errors themselves).
var quietRedis sync.Once

type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}

// replyCode returns the code of an error reply (its first word), or ok=false for an error
// that is not a reply (connection refused or reset, timeout).
func replyCode(err error) (code string, ok bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return "", false
	}
	code, _, _ = strings.Cut(err.Error(), " ")
	return code, true
}

// reply is one INCR as a client saw it.
type reply struct {
	id   int64 // 0 on error
	code string
	err  error         // set on error
	at   time.Time     // when the reply arrived
	took time.Duration // round trip
}

// connLoad is what one client connection saw.
type connLoad struct {
	inst    int // index of the leafd it talks to
	ids     []int64
	replies []reply // every reply, when keep is set
	codes   map[string]int
	netErrs int
	lastNet error
	order   string // first violation of strict increase, if any
}

// loadSpec describes a load: conns connections per instance, INCR on tag, until stop says so.
type loadSpec struct {
	tag   string
	conns int
	keep  bool                     // record every reply (latency, timing)
	stop  func() bool              // checked before each INCR
	pause *atomic.Int64            // optional: per-request sleep, ns
	ok    *atomic.Int64            // optional: counts successful replies across connections
	addrs func() []string          // the instances' addresses
	seen  func(inst int, id int64) // optional: called with every ID served
	hold  *atomic.Bool             // optional: while true, send nothing
}

// runLoad runs the load and returns each connection's record once stop holds everywhere.
func runLoad(spec loadSpec) []*connLoad {
	addrs := spec.addrs()
	var wg sync.WaitGroup
	loads := make([]*connLoad, 0, spec.conns*len(addrs))
	for i, a := range addrs {
		for range spec.conns {
			cl := &connLoad{inst: i, codes: map[string]int{}}
			loads = append(loads, cl)
			wg.Add(1)
			go func() {
				defer wg.Done()
				incrLoop(a, spec, cl)
			}()
		}
	}
	wg.Wait()
	return loads
}

// incrLoop sends INCR on one connection and checks that the numbers it gets increase
// strictly. A transport error (the instance was killed) ends the connection: order is then
// checked afresh on the next one.
func incrLoop(addr string, spec loadSpec, cl *connLoad) {
	c := connClient(addr)
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	var last int64
	for !spec.stop() {
		if spec.hold != nil && spec.hold.Load() {
			time.Sleep(time.Millisecond)
			continue
		}
		t0 := time.Now()
		v, err := c.Incr(ctx, spec.tag).Result()
		now := time.Now()
		r := reply{id: v, err: err, at: now, took: now.Sub(t0)}
		switch code, isReply := replyCode(err); {
		case err == nil:
			if v <= last && cl.order == "" {
				cl.order = fmt.Sprintf("connection to instance %d: got %d after %d, want strictly increasing", cl.inst, v, last)
			}
			last = v
			cl.ids = append(cl.ids, v)
			if spec.seen != nil {
				spec.seen(cl.inst, v)
			}
			if spec.ok != nil {
				spec.ok.Add(1)
			}
		case isReply:
			r.id, r.code = 0, code
			cl.codes[code]++
		default:
			r.id = 0
			cl.netErrs++
			cl.lastNet = err
			last = 0
			time.Sleep(20 * time.Millisecond) // the instance is down: do not spin
		}
		if spec.keep {
			cl.replies = append(cl.replies, r)
		}
		if spec.pause != nil {
			if d := spec.pause.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
		}
	}
}

// loadTotals sums what the connections saw.
type loadTotals struct {
	ids     int
	codes   map[string]int
	netErrs int
	lastNet error
}

func totals(loads []*connLoad) loadTotals {
	tt := loadTotals{codes: map[string]int{}}
	for _, cl := range loads {
		tt.ids += len(cl.ids)
		for k, v := range cl.codes {
			tt.codes[k] += v
		}
		tt.netErrs += cl.netErrs
		if cl.lastNet != nil {
			tt.lastNet = cl.lastNet
		}
	}
	return tt
}

// checkOrder fails the test for every connection that saw a number not above its previous.
func checkOrder(t *testing.T, loads []*connLoad) {
	t.Helper()
	for _, cl := range loads {
		if cl.order != "" {
			t.Error(cl.order)
		}
	}
}

// instID is an ID with the instance that handed it out.
type instID struct {
	id   int64
	inst int
}

// checkUnique fails the test when an ID was handed out twice (by any instance, in any of the
// loads) and returns all IDs sorted.
func checkUnique(t *testing.T, loads ...[]*connLoad) []instID {
	t.Helper()
	var all []instID
	for _, ls := range loads {
		for _, cl := range ls {
			for _, v := range cl.ids {
				all = append(all, instID{v, cl.inst})
			}
		}
	}
	slices.SortFunc(all, func(a, b instID) int {
		if a.id != b.id {
			return compare(a.id, b.id)
		}
		return a.inst - b.inst
	})
	dups := 0
	for i := 1; i < len(all); i++ {
		if all[i].id == all[i-1].id {
			if dups < 10 {
				t.Errorf("ID %d handed out twice (by instances %d and %d), want every ID once", all[i].id, all[i-1].inst, all[i].inst)
			}
			dups++
		}
	}
	if dups > 0 {
		t.Errorf("got %d duplicate IDs among %d, want 0", dups, len(all))
	}
	return all
}

func compare(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkCodes fails the test for transport errors and for error replies whose code is not
// one of allowed.
func checkCodes(t *testing.T, what string, tt loadTotals, allowed ...string) {
	t.Helper()
	for code, n := range tt.codes {
		if !slices.Contains(allowed, code) {
			t.Errorf("%s: got %d %s replies, want only %v", what, n, code, allowed)
		}
	}
	if tt.netErrs > 0 {
		t.Errorf("%s: got %d transport errors (last: %v), want coded replies only", what, tt.netErrs, tt.lastNet)
	}
}

// infoInt reads one field of INFO section from the instance.
func infoInt(t *testing.T, l *leafd, section, field string) int64 {
	t.Helper()
	c := connClient(l.addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	txt, err := c.Info(ctx, section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	for _, line := range strings.Split(txt, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %s=%q: %v", section, field, v, err)
			}
			return n
		}
	}
	t.Fatalf("INFO %s has no field %s:\n%s", section, field, txt)
	return 0
}

// do runs one command on a fresh connection.
func do(l *leafd, args ...any) (any, error) {
	c := connClient(l.addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// incrOnce runs one INCR on a fresh connection.
func incrOnce(l *leafd, tag string) (int64, error) {
	c := connClient(l.addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Incr(ctx, tag).Result()
}

// waitIncr retries INCR until it returns a number or the timeout passes; it returns the
// number, the time it took and the last error.
func waitIncr(l *leafd, tag string, timeout time.Duration) (int64, time.Duration, error) {
	t0 := time.Now()
	for {
		v, err := incrOnce(l, tag)
		if err == nil || time.Since(t0) > timeout {
			return v, time.Since(t0), err
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// stopClean checks that nothing but the checker is connected any more (no client connection
// leaked), then stops the instance with SIGTERM and wants a quick exit with status 0 (a
// goroutine that does not stop would hold shutdown up).
func stopClean(t *testing.T, ls ...*leafd) {
	t.Helper()
	for i, l := range ls {
		deadline := time.Now().Add(3 * time.Second)
		for {
			n := infoInt(t, l, "clients", "connected_clients")
			if n <= 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("instance %d: got %d connected clients after the load ended, want 1 (the INFO connection)", i, n)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		t0 := time.Now()
		if err := l.stop(10 * time.Second); err != nil {
			t.Errorf("instance %d: SIGTERM: got exit %v, want status 0\n%s", i, err, tail(l.Log(), 30))
		} else if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("instance %d: SIGTERM: exit took %v, want under 5s", i, d)
		}
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// benchOut appends "name value unit" to the file named by LEAFD_BENCH_OUT, if set.
func benchOut(t *testing.T, name string, value float64, unit string) {
	t.Helper()
	path := os.Getenv("LEAFD_BENCH_OUT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("LEAFD_BENCH_OUT: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %.3f %s\n", name, value, unit)
}

func addrsOf(ls []*leafd) func() []string {
	return func() []string {
		out := make([]string, len(ls))
		for i, l := range ls {
			out[i] = l.addr
		}
		return out
	}
}

// until returns a stop function: true once ok reaches n or the deadline passes.
func until(ok *atomic.Int64, n int64, deadline time.Time) func() bool {
	return func() bool { return ok.Load() >= n || time.Now().After(deadline) }
}

// sharedDB is a fresh database on the shared server of scripts/test.sh.
func sharedDB(t *testing.T) (string, *sql.DB) {
	t.Helper()
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	return dsn, openSQL(t, dsn)
}

// createTag creates tag through leafd (IDS.CREATE) and checks the row.
func createTag(t *testing.T, l *leafd, db *sql.DB, tag string, step int64) {
	t.Helper()
	if _, err := do(l, "IDS.CREATE", tag, "STEP", step); err != nil {
		t.Fatalf("IDS.CREATE %s STEP %d: %v", tag, step, err)
	}
	if got := sqlInt(t, db, "SELECT step FROM leaf_alloc WHERE biz_tag = ?", tag); got != step {
		t.Fatalf("leaf_alloc.step of %s: got %d, want %d", tag, got, step)
	}
}

// --- tests -------------------------------------------------------------------------------

// (a) Three instances, 50 connections, 200k IDs with step 100: thousands of refills, no ID
// twice, strictly increasing per connection, and exactly one allocation transaction per
// segment.
func TestMySQLManyInstances(t *testing.T) {
	dsn, db := sharedDB(t)
	const step, want = 100, 200_000
	var ls []*leafd
	for range 3 {
		// A generous wait: this test is about disjoint ranges, not latency, and a starved
		// 2-core CI machine can take longer than the default 500 ms for one refill.
		ls = append(ls, mysqlLeafd(t, dsn, "--max-step", strconv.Itoa(step), "--wait-timeout", "10s"))
	}
	createTag(t, ls[0], db, "orders", step)

	var ok atomic.Int64
	t0 := time.Now()
	// 50 connections: 17 + 17 + 16.
	var loads []*connLoad
	var wg sync.WaitGroup
	for i := range 50 {
		cl := &connLoad{inst: i % 3, codes: map[string]int{}}
		loads = append(loads, cl)
		spec := loadSpec{tag: "orders", ok: &ok, stop: until(&ok, want, t0.Add(120*time.Second))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			incrLoop(ls[cl.inst].addr, spec, cl)
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	tt := totals(loads)
	rate := float64(tt.ids) / elapsed.Seconds()
	t.Logf("%d IDs from 3 instances over 50 connections in %v: %.0f IDs/s", tt.ids, elapsed.Round(time.Millisecond), rate)
	benchOut(t, "mysql_3_instances_step100_ids_per_s", rate, "IDs/s")

	if tt.ids < want {
		t.Errorf("got %d IDs within 120s, want at least %d", tt.ids, want)
	}
	checkCodes(t, "3 instances", tt)
	checkOrder(t, loads)
	all := checkUnique(t, loads)

	// One allocation transaction per segment: every committed allocation in the table is a
	// load some instance counted, and no ID lies outside the allocated ranges.
	maxID := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")
	allocs := (maxID - 1) / step
	var loadsOK, failed int64
	for _, l := range ls {
		loadsOK += infoInt(t, l, "segment", "segment_loads_ok")
		failed += infoInt(t, l, "segment", "segment_loads_failed")
	}
	if loadsOK != allocs || failed != 0 {
		t.Errorf("got %d allocations in leaf_alloc and %d loads (%d failed) in the instances, want one allocation per load and none failed", allocs, loadsOK, failed)
	}
	ranges := map[int64]bool{}
	for _, x := range all {
		ranges[(x.id-1)/step] = true
	}
	if last := all[len(all)-1].id; last >= maxID {
		t.Errorf("got ID %d, want below max_id %d", last, maxID)
	}
	t.Logf("%d allocations (one per segment), %d segments used, %d loaded but not (fully) used", allocs, len(ranges), allocs-int64(len(ranges)))
	stopClean(t, ls...)
}

// (b) The same load while one instance after the other is killed with SIGKILL every ~2s
// and restarted: only successful replies count, and none repeats an ID.
func TestMySQLKillRestart(t *testing.T) {
	dsn, db := sharedDB(t)
	const step = 100
	var ls []*leafd
	for range 3 {
		ls = append(ls, mysqlLeafd(t, dsn, "--max-step", "1000"))
	}
	createTag(t, ls[0], db, "orders", step)

	var stopped atomic.Bool
	var ok atomic.Int64
	res := make(chan []*connLoad)
	go func() {
		res <- runLoad(loadSpec{tag: "orders", conns: 10, ok: &ok, addrs: addrsOf(ls), stop: stopped.Load})
	}()
	const kills = 4
	for k := range kills {
		time.Sleep(2 * time.Second)
		l := ls[k%len(ls)]
		before := ok.Load()
		l.kill()
		time.Sleep(200 * time.Millisecond)
		l.start()
		t.Logf("kill -9 of instance %d after %d IDs; restarted", k%len(ls), before)
	}
	time.Sleep(time.Second)
	stopped.Store(true)
	loads := <-res

	tt := totals(loads)
	t.Logf("%d IDs, error replies %v, %d transport errors (clients of killed instances)", tt.ids, tt.codes, tt.netErrs)
	if tt.ids < 10_000 {
		t.Errorf("got %d IDs, want at least 10000", tt.ids)
	}
	tt.netErrs, tt.lastNet = 0, nil // expected while an instance is down
	checkCodes(t, "kill -9", tt, "UNAVAILABLE")
	checkOrder(t, loads)
	checkUnique(t, loads)
	for i, l := range ls {
		if _, err := incrOnce(l, "orders"); err != nil {
			t.Errorf("instance %d after the kills: INCR: %v, want a number", i, err)
		}
	}
	stopClean(t, ls...)
}

// p999 returns the 99.9th percentile of ds.
func p999(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*999/1000)]
}

// phaseReplies returns the replies that arrived in [from, to).
func phaseReplies(loads []*connLoad, from, to time.Time) (ids int, codes map[string]int, net int, lat []time.Duration) {
	codes = map[string]int{}
	for _, cl := range loads {
		for _, r := range cl.replies {
			if r.at.Before(from) || !r.at.Before(to) {
				continue
			}
			switch {
			case r.err == nil:
				ids++
				lat = append(lat, r.took)
			case r.code != "":
				codes[r.code]++
			default:
				net++
			}
		}
	}
	return ids, codes, net, lat
}

// (c) Network faults between leafd and MariaDB through a proxy: 50 ms per chunk (INCR keeps
// working; the p999 latency is recorded), a blackhole (buffers drain, then UNAVAILABLE),
// connection resets (UNAVAILABLE), then normal again (recovery).
func TestMySQLProxyFaults(t *testing.T) {
	dsn, db := sharedDB(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	px := startProxy(t, cfg.Addr)
	cfg.Addr = px.Addr()
	const step = 10_000
	l := mysqlLeafd(t, cfg.FormatDSN(), "--max-step", strconv.Itoa(step), "--wait-timeout", "1s", "--load-timeout", "3s")
	createTag(t, l, db, "orders", step)
	if _, err := incrOnce(l, "orders"); err != nil {
		t.Fatalf("INCR before the faults: %v", err)
	}

	var stopped atomic.Bool
	var pause atomic.Int64
	res := make(chan []*connLoad)
	go func() {
		res <- runLoad(loadSpec{tag: "orders", conns: 8, keep: true, pause: &pause, addrs: addrsOf([]*leafd{l}), stop: stopped.Load})
	}()

	// Phase 1: 50 ms per chunk; one allocation (BEGIN, UPDATE and SELECT as prepared
	// statements, COMMIT: 6 round trips) takes about 650 ms. The clients are paced to about
	// 5k INCR/s, so a segment of 10k lasts 2 s: the preload, started after 10%, must hide
	// the database's latency from them.
	pause.Store(int64(time.Millisecond))
	p1 := time.Now()
	loads1 := infoInt(t, l, "segment", "segment_loads_ok")
	px.SetMode(proxyDelay, 50*time.Millisecond)
	time.Sleep(5 * time.Second)
	loads1 = infoInt(t, l, "segment", "segment_loads_ok") - loads1

	// Phase 2: blackhole. What is buffered is served, then UNAVAILABLE.
	p2 := time.Now()
	px.SetMode(proxyBlackhole, 0)
	pause.Store(0) // use the buffers up quickly
	time.Sleep(6 * time.Second)

	// Phase 3: every connection reset at once.
	p3 := time.Now()
	px.SetMode(proxyReset, 0)
	time.Sleep(2 * time.Second)

	// Phase 4: normal again.
	p4 := time.Now()
	px.SetMode(proxyPass, 0)
	time.Sleep(3 * time.Second)
	stopped.Store(true)
	loads := <-res
	end := time.Now()

	ids1, codes1, net1, lat1 := phaseReplies(loads, p1, p2)
	q := p999(lat1)
	t.Logf("phase 1 (50ms/chunk): %d IDs, %d refills, errors %v, p999 INCR latency %v, max %v", ids1, loads1, codes1, q, lat1[len(lat1)-1])
	benchOut(t, "mysql_incr_p999_50ms_db_latency", float64(q)/float64(time.Millisecond), "ms")
	if len(codes1) > 0 || net1 > 0 {
		t.Errorf("phase 1 (50ms/chunk): got errors %v and %d transport errors, want none", codes1, net1)
	}
	if q > 300*time.Millisecond {
		t.Errorf("phase 1: got p999 INCR latency %v, want well under one allocation (300ms): the preload should hide it", q)
	}
	if loads1 < 1 {
		t.Errorf("phase 1: got %d refills, want at least 1 (the latency is to be measured while refilling)", loads1)
	}

	ids2, codes2, net2, _ := phaseReplies(loads, p2, p3)
	ids3, codes3, net3, _ := phaseReplies(loads, p3, p4)
	t.Logf("phase 2 (blackhole): %d IDs, errors %v; phase 3 (reset): %d IDs, errors %v", ids2, codes2, ids3, codes3)
	for _, ph := range []struct {
		name  string
		codes map[string]int
		net   int
	}{{"phase 2 (blackhole)", codes2, net2}, {"phase 3 (reset)", codes3, net3}} {
		checkCodes(t, ph.name, loadTotals{codes: ph.codes, netErrs: ph.net}, "UNAVAILABLE")
		if ph.codes["UNAVAILABLE"] == 0 {
			t.Errorf("%s: got no UNAVAILABLE reply, want the buffers used up and refusals", ph.name)
		}
	}
	// Without the database nothing beyond the two buffered segments can be served.
	if ids2+ids3 > 2*step {
		t.Errorf("phases 2-3: got %d IDs without a database, want at most 2 segments (%d)", ids2+ids3, 2*step)
	}

	// Phase 4: recovery.
	var first time.Time
	for _, cl := range loads {
		for _, r := range cl.replies {
			if r.err == nil && !r.at.Before(p4) && (first.IsZero() || r.at.Before(first)) {
				first = r.at
			}
		}
	}
	if first.IsZero() {
		t.Errorf("phase 4 (normal): got no ID within %v, want recovery", end.Sub(p4).Round(time.Millisecond))
	} else {
		t.Logf("phase 4 (normal): first ID %v after the network came back", first.Sub(p4).Round(time.Millisecond))
		if d := first.Sub(p4); d > 2*time.Second {
			t.Errorf("phase 4: got the first ID %v after recovery, want within 2s", d)
		}
	}
	checkOrder(t, loads)
	checkUnique(t, loads)
	stopClean(t, l)
}

// (d) MariaDB paused (SIGSTOP), resumed, killed and started again: buffers are served, then
// UNAVAILABLE within the wait timeout; recovery within 5 s of the database returning. An
// instance started while the database is down stays up, refuses, and serves once it is back.
func TestMySQLDatabaseOutage(t *testing.T) {
	m := testenv.StartMariaDB(t)
	sqlExec(t, openSQL(t, m.DSN("")), "CREATE DATABASE leafd")
	dsn := m.DSN("leafd")
	const wait = 500 * time.Millisecond
	l := mysqlLeafd(t, dsn, "--max-step", "1000", "--wait-timeout", wait.String(), "--load-timeout", "2s")
	db := openSQL(t, dsn)
	createTag(t, l, db, "orders", 1000)

	var stopped atomic.Bool
	var pause atomic.Int64
	pause.Store(int64(time.Millisecond)) // about 4k INCR/s: a segment lasts a quarter second
	res := make(chan []*connLoad)
	go func() {
		res <- runLoad(loadSpec{tag: "orders", conns: 4, keep: true, pause: &pause, addrs: addrsOf([]*leafd{l}), stop: stopped.Load})
	}()
	time.Sleep(time.Second)

	tPause := time.Now()
	m.Pause()
	time.Sleep(3 * time.Second)
	tResume := time.Now()
	m.Resume()
	time.Sleep(2 * time.Second)

	tKill := time.Now()
	m.Kill()
	// A new instance while the database is down: it starts, and refuses with UNAVAILABLE.
	l2 := mysqlLeafd(t, dsn, "--wait-timeout", wait.String(), "--load-timeout", "2s")
	if _, err := incrOnce(l2, "orders"); err == nil {
		t.Errorf("new instance, database down: INCR returned a number, want UNAVAILABLE")
	} else if code, _ := replyCode(err); code != "UNAVAILABLE" {
		t.Errorf("new instance, database down: got %v, want UNAVAILABLE", err)
	}
	time.Sleep(time.Second)
	m.Start()
	tBack := time.Now()
	v2, took2, err := waitIncr(l2, "orders", 10*time.Second)
	if err != nil {
		t.Errorf("new instance: got %v %v after the database came back, want a number", err, took2)
	} else if took2 > 5*time.Second {
		t.Errorf("new instance: first ID %v after the database came back, want within 5s", took2)
	}
	t.Logf("instance started during the outage: first ID %d %v after the database came back", v2, took2.Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	stopped.Store(true)
	loads := <-res

	firstOK := func(after time.Time) time.Duration {
		var first time.Time
		for _, cl := range loads {
			for _, r := range cl.replies {
				if r.err == nil && r.at.After(after) && (first.IsZero() || r.at.Before(first)) {
					first = r.at
				}
			}
		}
		if first.IsZero() {
			return -1
		}
		return first.Sub(after)
	}
	for _, ph := range []struct {
		name         string
		down, up     time.Time
		recoverAfter time.Time
	}{
		{"pause", tPause, tResume, tResume},
		{"kill", tKill, tBack, tBack},
	} {
		ids, codes, net, _ := phaseReplies(loads, ph.down, ph.up)
		checkCodes(t, ph.name, loadTotals{codes: codes, netErrs: net}, "UNAVAILABLE")
		if codes["UNAVAILABLE"] == 0 {
			t.Errorf("%s: got no UNAVAILABLE during the outage, want refusals once the buffers are used up", ph.name)
		}
		// Every refusal comes within the wait timeout (plus scheduling slack under -race).
		var slowest time.Duration
		for _, cl := range loads {
			for _, r := range cl.replies {
				if r.code != "" && r.at.After(ph.down) && r.at.Before(ph.up) {
					slowest = max(slowest, r.took)
				}
			}
		}
		if slowest > wait+400*time.Millisecond {
			t.Errorf("%s: slowest UNAVAILABLE took %v, want within the wait timeout %v (+400ms slack)", ph.name, slowest, wait)
		}
		rec := firstOK(ph.recoverAfter)
		t.Logf("%s: %d IDs served during the outage (buffers), %v refusals (slowest %v); first ID %v after the database returned",
			ph.name, ids, codes, slowest, rec.Round(time.Millisecond))
		if rec < 0 || rec > 5*time.Second {
			t.Errorf("%s: got recovery after %v, want within 5s of the database returning", ph.name, rec)
		}
	}
	checkOrder(t, loads)
	all := checkUnique(t, loads)
	if slices.ContainsFunc(all, func(x instID) bool { return x.id == v2 }) {
		t.Errorf("ID %d of the new instance was also handed out by the first", v2)
	}
	stopClean(t, l, l2)
}

// (e) A lagging replica promoted: max_id drops by ten steps. Each instance refuses with
// REGRESSION (not numbers) once it needs a new range, keeps refusing, still refuses after a
// restart (the marks are durable), and serves again once max_id is above its mark.
func TestMySQLRegression(t *testing.T) {
	dsn, db := sharedDB(t)
	const step = 100
	ls := []*leafd{
		mysqlLeafd(t, dsn, "--max-step", strconv.Itoa(step)),
		mysqlLeafd(t, dsn, "--max-step", strconv.Itoa(step)),
	}
	createTag(t, ls[0], db, "orders", step)

	var ok atomic.Int64
	before := runLoad(loadSpec{tag: "orders", conns: 3, ok: &ok, addrs: addrsOf(ls), stop: until(&ok, 20_000, time.Now().Add(20*time.Second))})
	checkCodes(t, "before the failover", totals(before))
	high := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")
	lagMaxID(t, db, "orders", 10*step)
	lowered := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")

	// After the "failover": buffered IDs, then REGRESSION, and never a number again.
	after := runLoad(loadSpec{tag: "orders", conns: 3, keep: true, addrs: addrsOf(ls), stop: deadline(3 * time.Second)})
	tt := totals(after)
	t.Logf("after max_id dropped by %d: %d IDs (buffered), replies %v", 10*step, tt.ids, tt.codes)
	checkCodes(t, "after the failover", tt, "REGRESSION")
	for _, cl := range after {
		refused := false
		for _, r := range cl.replies {
			switch {
			case r.code == "REGRESSION":
				refused = true
			case r.err == nil && refused:
				t.Errorf("instance %d: got ID %d after REGRESSION while max_id is still below the mark, want REGRESSION", cl.inst, r.id)
			}
		}
		if !refused {
			t.Errorf("instance %d: got no REGRESSION, want one once the buffered segments are used up", cl.inst)
		}
	}
	if n := infoInt(t, ls[0], "segment", "segment_regressions"); n == 0 {
		t.Errorf("INFO segment_regressions: got 0, want > 0")
	}

	// The marks survive a restart.
	if err := ls[0].stop(10 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	ls[0].start()
	for i := range 5 {
		if v, err := incrOnce(ls[0], "orders"); err == nil {
			t.Errorf("after restart, INCR %d: got ID %d, want REGRESSION (max_id still below the mark)", i, v)
		} else if code, _ := replyCode(err); code != "REGRESSION" {
			t.Errorf("after restart, INCR %d: got %v, want REGRESSION", i, err)
		}
		time.Sleep(150 * time.Millisecond)
	}

	// A refused lease never moves max_id (the check runs inside the allocation transaction).
	if got := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'"); got != lowered {
		t.Errorf("max_id after the refusals: got %d, want %d (refused leases roll back)", got, lowered)
	}

	// The operator raises max_id above every range handed out: both serve again, above it.
	raised := sqlInt(t, db, "SELECT GREATEST(max_id, ?) + ? FROM leaf_alloc WHERE biz_tag = 'orders'", high, 10*step)
	sqlExec(t, db, "UPDATE leaf_alloc SET max_id = ? WHERE biz_tag = 'orders'", raised)
	for i, l := range ls {
		v, took, err := waitIncr(l, "orders", 5*time.Second)
		if err != nil {
			t.Errorf("instance %d: max_id raised to %d: got %v after %v, want a number", i, raised, err, took)
			continue
		}
		if v < raised {
			t.Errorf("instance %d: got ID %d after max_id was raised to %d, want >= %d", i, v, raised, raised)
		}
	}
	final := runLoad(loadSpec{tag: "orders", conns: 2, addrs: addrsOf(ls), stop: deadline(time.Second)})
	checkCodes(t, "after max_id was raised", totals(final))
	checkOrder(t, before)
	checkOrder(t, after)
	checkUnique(t, before, after, final)
	stopClean(t, ls...)
}

func deadline(d time.Duration) func() bool {
	end := time.Now().Add(d)
	return func() bool { return time.Now().After(end) }
}

// (f) Tags the operator manages in SQL: a hand-inserted row is served at once (auto-create
// off), an unknown tag gets NOTAG saying how to create it, a deleted row stops being served
// after the tag refresh.
func TestMySQLHandInsertedTag(t *testing.T) {
	dsn, db := sharedDB(t)
	l := mysqlLeafd(t, dsn, "--auto-create", "off", "--tag-refresh", "1s")

	_, err := incrOnce(l, "coupons")
	if code, _ := replyCode(err); code != "NOTAG" {
		t.Fatalf("INCR of an unknown tag: got %v, want NOTAG", err)
	}
	for _, want := range []string{"coupons", "IDS.CREATE", "INSERT INTO leaf_alloc"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NOTAG reply %q: want it to mention %q", err, want)
		}
	}
	if got := sqlInt(t, db, "SELECT COUNT(*) FROM leaf_alloc"); got != 0 {
		t.Errorf("auto-create off: got %d rows after INCR of an unknown tag, want 0", got)
	}

	// A row never asked for before: served on the first INCR. A row without leafd's fence row
	// takes the failover gap first (20 × --max-step 1,000,000; docs/MYSQL.md): leafd cannot
	// tell it from a replica that missed the tag's first allocations.
	const gap = 20 * 1_000_000
	sqlExec(t, db, "INSERT INTO leaf_alloc(biz_tag, max_id, step, description) VALUES ('invoices', 5000, 50, 'by hand')")
	if v, err := incrOnce(l, "invoices"); err != nil || v != 5000+gap {
		t.Errorf("INCR of a hand-inserted tag: got %d, %v; want %d at once", v, err, 5000+gap)
	}
	// A row for a tag that was just refused: served after the short negative cache.
	sqlExec(t, db, "INSERT INTO leaf_alloc(biz_tag, max_id, step, description) VALUES ('coupons', 1, 50, 'by hand')")
	v, took, err := waitIncr(l, "coupons", 10*time.Second)
	if err != nil || v != 1+gap {
		t.Errorf("INCR of a tag inserted after a NOTAG: got %d, %v after %v; want %d", v, err, took, 1+gap)
	} else if took > 3*time.Second {
		t.Errorf("tag inserted after a NOTAG: served after %v, want well under the 60s refresh (<3s)", took)
	}
	t.Logf("hand-inserted tag served after %v (it had been refused just before)", took.Round(time.Millisecond))

	// A deleted row: NOTAG once the refresh (1s) has dropped it.
	sqlExec(t, db, "DELETE FROM leaf_alloc WHERE biz_tag = 'invoices'")
	t0 := time.Now()
	for {
		_, err := incrOnce(l, "invoices")
		if code, _ := replyCode(err); code == "NOTAG" {
			t.Logf("deleted tag refused with NOTAG after %v", time.Since(t0).Round(time.Millisecond))
			break
		}
		if time.Since(t0) > 5*time.Second {
			t.Errorf("deleted tag: got %v 5s after the DELETE, want NOTAG after the 1s refresh", err)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopClean(t, l)
}

// (g) Four instances on one tag with step 10 and 10⁵ INCR: the IDs are unique, and each
// instance's IDs lie in whole ranges of 10 aligned as the table hands them out, no range
// shared by two instances.
//
// A private MariaDB with innodb_flush_log_at_trx_commit=2: 10⁴ allocations of one row are
// serialized by its row lock, and an fsync per commit would make them take a minute. Commit
// atomicity and isolation, what disjointness depends on, do not change.
func TestMySQLDisjointRanges(t *testing.T) {
	m := testenv.StartMariaDB(t)
	admin := openSQL(t, m.DSN(""))
	sqlExec(t, admin, "SET GLOBAL innodb_flush_log_at_trx_commit = 2")
	sqlExec(t, admin, "CREATE DATABASE leafd")
	dsn := m.DSN("leafd")
	const step, start, want = 10, 1, 100_000
	var ls []*leafd
	for range 4 {
		// A generous wait: this test is about disjoint ranges, not latency, and a starved
		// 2-core CI machine can take longer than the default 500 ms for one refill.
		ls = append(ls, mysqlLeafd(t, dsn, "--max-step", strconv.Itoa(step), "--wait-timeout", "10s"))
	}
	db := openSQL(t, dsn)
	// Created by leafd, so with its fence row: no failover gap, every allocation is one step.
	if _, err := do(ls[0], "IDS.CREATE", "orders", "STEP", step, "START", start, "DESC", "disjoint"); err != nil {
		t.Fatalf("IDS.CREATE: %v", err)
	}

	var ok atomic.Int64
	t0 := time.Now()
	loads := runLoad(loadSpec{tag: "orders", conns: 6, ok: &ok, addrs: addrsOf(ls), stop: until(&ok, want, t0.Add(120*time.Second))})
	tt := totals(loads)
	t.Logf("%d IDs from 4 instances in %v", tt.ids, time.Since(t0).Round(time.Millisecond))
	if tt.ids < want {
		t.Errorf("got %d IDs within 120s, want %d", tt.ids, want)
	}
	checkCodes(t, "4 instances, step 10", tt)
	checkOrder(t, loads)
	all := checkUnique(t, loads)

	maxID := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")
	owner := map[int64]int{} // range index -> instance
	bad := 0
	for _, x := range all {
		if x.id < start || x.id >= maxID {
			t.Errorf("ID %d outside the allocated [%d, %d)", x.id, start, maxID)
			continue
		}
		r := (x.id - start) / step
		if o, seen := owner[r]; seen && o != x.inst && bad < 10 {
			bad++
			t.Errorf("range [%d, %d) used by instances %d and %d, want one owner", start+r*step, start+(r+1)*step, o, x.inst)
		}
		owner[r] = x.inst
	}
	allocs := (maxID - start) / step
	var loadsOK int64
	for _, l := range ls {
		loadsOK += infoInt(t, l, "segment", "segment_loads_ok")
	}
	if loadsOK != allocs {
		t.Errorf("got %d allocations in leaf_alloc and %d loads in the instances, want equal (one transaction per segment)", allocs, loadsOK)
	}
	t.Logf("%d ranges allocated, %d used by exactly one instance each", allocs, len(owner))
	stopClean(t, ls...)
}
