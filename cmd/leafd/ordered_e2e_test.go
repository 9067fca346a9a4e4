package main

// Ordered tags on the built binary: three instances on one MariaDB, clients on
// every instance issuing INCR on an ORDERED tag, each request stamped at its send and its
// reply on this process's monotonic clock (internal/lincheck). Under each fault — the
// leader killed -9, the leader frozen past its lease and woken, the leader's database
// connection cut by a proxy, a failover to a lagging replica — the checker must find no
// duplicate and no reply lower than a reply received before its request was sent, and the
// longest window without any ID after the fault is bounded by the lease and a margin.
// Every scenario has its own database and runs in parallel with the others.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/lincheck"
)

// orderedLease is --ordered-lease in these tests: 2s, shorter than the default 3s so that
// each scenario stays well under a minute; LEAFD_TEST_ORDERED_LEASE sets another (the
// figures of docs/BENCHMARKS.md are taken at the default).
var orderedLease = envDuration("LEAFD_TEST_ORDERED_LEASE", 2*time.Second)

func envDuration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		panic(fmt.Sprintf("%s=%q: want a positive duration such as 3s", name, v))
	}
	return d
}

// orderedMargin is what the unavailability after a fault may exceed the lease by: the
// renewal and acquisition cadence, the new leader's first segment load (a -race binary on
// a loaded 2-core machine), and the clients' retry pacing.
const orderedMargin = 2500 * time.Millisecond

// linLoad is INCR, INCRBY 3 and IDS.SEGMENT 4 (a third of the clients each) on one tag from
// clients on every instance, recorded for the checker.
type linLoad struct {
	tag  string
	rec  *lincheck.Recorder
	stop atomic.Bool
	wg   sync.WaitGroup
	ok   []atomic.Int64 // IDs served to the clients of each instance

	mu     sync.Mutex
	inst   map[int]int      // lincheck client -> instance
	codes  []map[string]int // per instance: error replies by code, NET for transport errors
	lastEr []string         // per instance: the last error text
	addrs  func() []string  // the instances' RESP addresses
}

// retryPause is how long a client waits after a refusal or a transport error before it
// sends again, as a client library's retry would (pacing; the gaps measured are seconds).
const retryPause = 5 * time.Millisecond

// startLinLoad starts perInst clients (one connection each) on every instance.
func startLinLoad(t *testing.T, tag string, ls []*e2e.Leafd, perInst int) *linLoad {
	t.Helper()
	l := &linLoad{tag: tag, rec: lincheck.NewRecorder(), ok: make([]atomic.Int64, len(ls)),
		inst: map[int]int{}, codes: make([]map[string]int, len(ls)), lastEr: make([]string, len(ls)), addrs: e2e.Addrs(ls...)}
	for i := range ls {
		l.codes[i] = map[string]int{}
		for range perInst {
			l.client(i)
		}
	}
	t.Cleanup(l.finish)
	return l
}

// newClient is a client of the history whose operations count for instance inst.
func (l *linLoad) newClient(inst int) *lincheck.Client {
	cl := l.rec.Client()
	l.mu.Lock()
	l.inst[cl.ID()] = inst
	l.mu.Unlock()
	return cl
}

func (l *linLoad) client(inst int) {
	cl := l.newClient(inst)
	l.wg.Go(func() {
		c := e2e.ConnClient(l.addrs()[inst])
		defer func() { _ = c.Close() }()
		codes := map[string]int{}
		var last string
		defer func() {
			l.mu.Lock()
			for k, v := range codes {
				l.codes[inst][k] += v
			}
			if last != "" {
				l.lastEr[inst] = last
			}
			l.mu.Unlock()
		}()
		ctx := context.Background()
		kind := cl.ID() % 3 // INCR, INCRBY 3 or IDS.SEGMENT 4: every forwarded form
		for !l.stop.Load() {
			cl.Send()
			var err error
			switch kind {
			case 0:
				var v int64
				if v, err = c.Incr(ctx, l.tag).Result(); err == nil {
					cl.OK(v, 1)
				}
			case 1:
				var v int64
				if v, err = c.IncrBy(ctx, l.tag, 3).Result(); err == nil {
					cl.OK(v, 3)
				}
			default:
				var vs []int64
				if vs, err = c.Do(ctx, "IDS.SEGMENT", l.tag, 4).Int64Slice(); err == nil {
					// Strictly increasing within the reply, not always contiguous (a
					// segment may end inside it): one op per ID, stamped alike.
					cl.OKEach(vs)
				}
			}
			if err == nil {
				l.ok[inst].Add(1)
				continue
			}
			code, isReply := e2e.ReplyCode(err)
			if !isReply {
				code = "NET"
			}
			cl.Fail(code)
			codes[code]++
			last = err.Error()
			time.Sleep(retryPause) // pacing: refused or cut off, do not spin
		}
	})
}

// served waits until the clients of instance inst (-1: of any) have received n more IDs.
func (l *linLoad) served(t *testing.T, inst int, n int64, d time.Duration, what string) {
	t.Helper()
	total := func() int64 {
		var s int64
		for i := range l.ok {
			if inst < 0 || i == inst {
				s += l.ok[i].Load()
			}
		}
		return s
	}
	from := total()
	if !e2e.Poll(d, func() bool { return total()-from >= n }) {
		t.Fatalf("%s: the clients of instance %d got %d IDs within %v, want %d\n%s", what, inst, total()-from, d, n, l.errSummary())
	}
}

// finish stops the clients and waits for them (idempotent).
func (l *linLoad) finish() {
	l.stop.Store(true)
	l.wg.Wait()
}

func (l *linLoad) errSummary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i, c := range l.codes {
		fmt.Fprintf(&b, "instance %d: %d IDs, errors %v, last %q\n", i, l.ok[i].Load(), c, l.lastEr[i])
	}
	return b.String()
}

// check stops the load and checks its history: no duplicate, no order violation, error
// codes among allowed (NET, a transport error, only on the clients of the instances in
// netOK), at least minIDs IDs, and the longest window without an ID from fault on within
// bound. It returns the result and that window.
func (l *linLoad) check(t *testing.T, what string, fault time.Time, bound time.Duration, minIDs int, netOK []int, allowed ...string) (lincheck.Result, lincheck.Gap) {
	t.Helper()
	l.finish()
	ops := l.rec.Ops()
	res := lincheck.Check(ops)
	gap := lincheck.LongestGap(ops, l.rec.At(fault), res.Span.To)
	t.Logf("%s: %v", what, res)
	t.Logf("%s: longest window without an ID after the fault: %v (from %v after it); per instance:\n%s",
		what, gap.Len().Round(time.Millisecond), time.Duration(gap.From-l.rec.At(fault)).Round(time.Millisecond), l.errSummary())
	if err := res.Err(); err != nil {
		t.Errorf("%s: %v", what, err)
	}
	if res.OK < minIDs {
		t.Errorf("%s: %d IDs, want at least %d: the test did not exercise the server", what, res.OK, minIDs)
	}
	if gap.Len() > bound {
		t.Errorf("%s: no ID for %v after the fault, want at most %v (lease %v + margin)", what, gap.Len().Round(time.Millisecond), bound, orderedLease)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, codes := range l.codes {
		for code, n := range codes {
			if code == "NET" && !slices.Contains(netOK, i) || code != "NET" && !slices.Contains(allowed, code) {
				t.Errorf("%s: the clients of instance %d got %d %s errors (last %q), want only %v (NET only on instances %v)",
					what, i, n, code, l.lastEr[i], allowed, netOK)
			}
		}
	}
	e2e.BenchOut(t, what+"_unavailable_s", gap.Len().Seconds(), "s")
	return res, gap
}

// orderedArgs are the flags of every instance of these tests on dsn.
func orderedArgs(dsn string, extra ...string) []string {
	return append([]string{"--mysql-dsn", dsn, "--ordered-lease", orderedLease.String(), "--log-format", "json"}, extra...)
}

// createOrdered creates tag as an ORDERED tag through l.
func createOrdered(t *testing.T, l *e2e.Leafd, tag string, step int64) {
	t.Helper()
	if _, err := l.Do("IDS.CREATE", tag, "STEP", step, "ORDERED"); err != nil {
		t.Fatalf("IDS.CREATE %s STEP %d ORDERED: %v", tag, step, err)
	}
}

// tagInfo is IDS.INFO tag as field -> value (RESP2's flat array).
func tagInfo(t *testing.T, l *e2e.Leafd, tag string) map[string]string {
	t.Helper()
	c := e2e.ConnClient(l.Addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.Do(ctx, "IDS.INFO", tag).Slice()
	if err != nil {
		t.Fatalf("IDS.INFO %s on %s: %v", tag, l.Addr, err)
	}
	m := map[string]string{}
	for i := 0; i+1 < len(v); i += 2 {
		m[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
	}
	return m
}

// leaderOf is the index of the instance that the instances agree leads tag, once they do.
func leaderOf(t *testing.T, ls []*e2e.Leafd, skip []int, tag string, d time.Duration) int {
	t.Helper()
	leader, last := -1, ""
	ok := e2e.Poll(d, func() bool {
		leader, last = -1, ""
		for i, l := range ls {
			if slices.Contains(skip, i) {
				continue
			}
			info := tagInfo(t, l, tag)
			addr := info["leader"]
			last += fmt.Sprintf("instance %d (%s): leader %q; ", i, l.Addr, addr)
			j := -1
			for k, o := range ls {
				if o.Addr == addr {
					j = k
				}
			}
			if j < 0 || slices.Contains(skip, j) || (leader >= 0 && j != leader) {
				return false
			}
			leader = j
		}
		return leader >= 0
	})
	if !ok {
		t.Fatalf("the instances do not agree on a leader of %s within %v: %s", tag, d, last)
	}
	return leader
}

// startOrderedCluster starts three instances, instance i on dsns[i], and creates tag
// (ORDERED, STEP step) through the first.
func startOrderedCluster(t *testing.T, dsns []string, tag string, step int64, extra ...string) []*e2e.Leafd {
	t.Helper()
	lists := make([][]string, len(dsns))
	for i, dsn := range dsns {
		lists[i] = orderedArgs(dsn, extra...)
	}
	ls := e2e.StartMany(t, lists...)
	createOrdered(t, ls[0], tag, step)
	return ls
}

// others is every index of n but skip.
func others(n, skip int) []int {
	var out []int
	for i := range n {
		if i != skip {
			out = append(out, i)
		}
	}
	return out
}

// TestOrderedCheckerSeesOrdinaryTag: the harness on an ordinary tag. Six clients of one
// instance (one atomic cursor per segment: linearizable) give the checker no violation; the
// same load on three instances (each from its own segments: only trend-increasing) makes it
// report order violations and no duplicate — the harness neither invents violations nor
// misses them on the binary.
func TestOrderedCheckerSeesOrdinaryTag(t *testing.T) {
	t.Parallel()
	dsn, db := e2e.SharedDB(t)
	ls := e2e.StartMany(t, []string{"--mysql-dsn", dsn}, []string{"--mysql-dsn", dsn}, []string{"--mysql-dsn", dsn})
	e2e.CreateTag(t, ls[0], db, "plain", 100)
	one := startLinLoad(t, "plain", ls[:1], 6)
	one.served(t, 0, 10000, 20*time.Second, "one instance")
	one.finish()
	if res := lincheck.Check(one.rec.Ops()); res.Err() != nil || res.OK < 10000 {
		t.Errorf("ordinary tag on one instance: %v\n%v", res, res.Err())
	} else {
		t.Logf("ordinary tag on one instance: %v", res)
	}
	load := startLinLoad(t, "plain", ls, 2)
	for i := range ls {
		load.served(t, i, 500, 20*time.Second, "ordinary tag")
	}
	load.finish()
	res := lincheck.Check(load.rec.Ops())
	t.Logf("ordinary tag on 3 instances: %v", res)
	if res.Duplicates != 0 {
		t.Errorf("ordinary tag: %d duplicates, want 0\n%v", res.Duplicates, res.Err())
	}
	if res.Violations == 0 {
		t.Errorf("ordinary tag on 3 instances: the checker found no order violation among %d IDs, want some (each instance serves its own segments)", res.OK)
	} else {
		t.Logf("first: %v", res.FirstViols[0])
	}
}

// TestOrderedLeaderKill: the leader of an ordered tag is killed -9 under load from clients
// on all three instances. Another instance takes the lease once it lapses and serves above
// everything the old leader was granted; meanwhile the followers answer TRYAGAIN (or the
// error of an unreachable leader), never an ID of their own. The killed instance restarts
// as a follower. 0 duplicates, 0 order violations, the unavailability within the lease and
// a margin.
func TestOrderedLeaderKill(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	ls := startOrderedCluster(t, []string{dsn, dsn, dsn}, "seq", 100)
	load := startWarmLoad(t, ls, "before the kill")
	lead, fault := faultLeader(t, ls, load, func(lead int) { ls[lead].Kill() }, "after the kill")
	newLead := leaderOf(t, ls, []int{lead}, "seq", 10*time.Second)
	t.Logf("leader %d killed; instance %d leads %v later", lead, newLead, time.Since(fault).Round(time.Millisecond))
	ls[lead].Restart()
	load.served(t, lead, 300, 20*time.Second, "the restarted instance")
	load.check(t, "ordered_leader_kill", fault, orderedLease+orderedMargin, 3000, []int{lead}, orderedCodes...)
}

// TestOrderedLeaderRestart: the leader is stopped gracefully (SIGTERM: it stops serving,
// writes the remainder of its segments and gives the lease back) and started again at once
// on the same address and data dir, twice. The others take the lease within a third of it;
// the restarted instance must not serve the remainder it saved (below what the new leader
// served meanwhile): its start discards an ordered tag's remainder (the log says so).
func TestOrderedLeaderRestart(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	ls := startOrderedCluster(t, []string{dsn, dsn, dsn}, "seq", 1000)
	load := startWarmLoad(t, ls, "before the stop")
	var fault time.Time
	var netOK []int
	remainders := 0
	for round := range 2 {
		lead := leaderOf(t, ls, nil, "seq", 10*time.Second)
		netOK = append(netOK, lead)
		if round == 0 {
			fault = time.Now()
		}
		if err := ls[lead].Stop(10 * time.Second); err != nil {
			t.Fatalf("round %d: graceful stop of leader %d: %v", round, lead, err)
		}
		ls[lead].Restart()
		for i := range ls {
			load.served(t, i, 300, 20*time.Second, fmt.Sprintf("round %d: after the restart of %d", round, lead))
		}
		log := ls[lead].Log()
		if n := strings.Count(log, "serving the remainder of the previous graceful shutdown first"); n != 0 {
			t.Errorf("round %d: leader %d resumed a remainder of the ordered tag (%d times in its log)", round, lead, n)
		}
		discarded := strings.Count(log, "an ordered tag is served only by its leader's new term")
		t.Logf("round %d: leader %d stopped and restarted (ordered remainders discarded in its log so far: %d); instance %d leads",
			round, lead, discarded, leaderOf(t, ls, nil, "seq", 10*time.Second))
		remainders += discarded
	}
	if remainders == 0 {
		t.Errorf("no restart discarded a remainder: the test did not exercise the remainder of an ordered tag")
	}
	// Handing the lease back makes the change quicker than a lapse: within the lease.
	load.check(t, "ordered_leader_sigterm", fault, orderedLease, 3000, netOK, orderedCodes...)
}

// orderedCodes are the refusals a client of an ordered tag may see during a leader change.
var orderedCodes = []string{"TRYAGAIN", "UNAVAILABLE"}

// TestOrderedLeaderPaused: the leader is frozen (SIGSTOP) for twice the lease: its lease
// lapses, another instance takes it and serves. Woken, the old leader must not answer from
// the segment it still holds (its deadline passed while it was frozen): the requests its
// clients sent while it was frozen are answered above every ID served meanwhile, or refused.
// Then the lead comes back to it (the third frozen, the new leader killed): it must not serve
// the segment of its old term either.
func TestOrderedLeaderPaused(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	ls := startOrderedCluster(t, []string{dsn, dsn, dsn}, "seq", 100)
	load := startWarmLoad(t, ls, "before the pause")
	lead, fault := faultLeader(t, ls, load, func(lead int) { ls[lead].Pause() }, "while the leader is frozen")
	if d := 2*orderedLease - time.Since(fault); d > 0 {
		time.Sleep(d) // the fault's length: frozen for twice the lease
	}
	ls[lead].Resume()
	woke := time.Since(fault)
	newLead := leaderOf(t, ls, nil, "seq", 10*time.Second)
	if newLead == lead {
		t.Errorf("instance %d leads again after its freeze, want the one that took over", lead)
	}
	load.served(t, lead, 300, 20*time.Second, "the woken instance")
	t.Logf("leader %d frozen for %v; instance %d leads", lead, woke.Round(time.Millisecond), newLead)
	// The lead goes back to the woken instance, which still holds the segment of its old
	// term: the third is frozen and the new leader killed, so it alone can take the lease.
	// Its first ID must be above every ID the new leader served (a new term drops the held
	// segments).
	third := others(len(ls), lead)[0]
	if third == newLead {
		third = others(len(ls), lead)[1]
	}
	ls[third].Pause()
	ls[newLead].Kill()
	back := time.Now()
	load.served(t, lead, 300, 20*time.Second, "the old leader leading again")
	ls[third].Resume()
	ls[newLead].Restart()
	for i := range ls {
		load.served(t, i, 300, 20*time.Second, "all three again")
	}
	if got := leaderOf(t, ls, nil, "seq", 10*time.Second); got != lead {
		t.Errorf("instance %d leads, want %d (the only one alive and awake when the lease lapsed)", got, lead)
	}
	// NET: the killed leader's clients, and the frozen one's when the freeze outlasts their
	// 5s read timeout (a lease of 3s or more).
	res, _ := load.check(t, "ordered_leader_sigstop", fault, orderedLease+orderedMargin, 3000, []int{newLead, lead}, orderedCodes...)
	t.Logf("the lead back on instance %d: longest window without an ID %v", lead, lincheck.LongestGap(load.rec.Ops(), load.rec.At(back), res.Span.To).Len().Round(time.Millisecond))
}

// TestOrderedLeaderCutOff: each instance reaches the database through its own proxy; the
// leader's proxy swallows everything (its renewals hang) for twice the lease, then passes
// again. The leader must fence itself at its local deadline, another takes over, and the
// old one comes back as a follower. 0 duplicates, 0 violations.
func TestOrderedLeaderCutOff(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pxs := make([]*e2e.Proxy, 3)
	dsns := make([]string, 3)
	for i := range pxs {
		pxs[i] = e2e.StartProxy(t, cfg.Addr)
		dsns[i] = proxiedDSN(t, dsn, pxs[i])
	}
	ls := startOrderedCluster(t, dsns, "seq", 100)
	load := startWarmLoad(t, ls, "before the cut")
	lead, fault := faultLeader(t, ls, load, func(lead int) { pxs[lead].SetMode(e2e.ProxyBlackhole, 0) }, "while the leader is cut off")
	if d := 2*orderedLease - time.Since(fault); d > 0 {
		time.Sleep(d) // the fault's length: cut off for twice the lease
	}
	pxs[lead].SetMode(e2e.ProxyPass, 0)
	load.served(t, lead, 300, 30*time.Second, "the reconnected instance")
	newLead := leaderOf(t, ls, nil, "seq", 10*time.Second)
	t.Logf("leader %d cut off from the database for %v; instance %d leads", lead, 2*orderedLease, newLead)
	load.check(t, "ordered_leader_db_cut", fault, orderedLease+orderedMargin, 3000, nil, orderedCodes...)
}

// TestOrderedFailoverLaggingReplica: the database fails over to a replica that stopped
// applying for longer than the lease while the leader allocated and renewed: the new primary
// lacks the tag's last allocations and shows the leader's lease lapsed long ago. At the same
// moment the leader loses its own path to the database (its proxy swallows everything), so
// it keeps serving from the segment it holds until its local deadline, while the two others
// find a lapsed lease on the new primary. Whoever takes it must not serve before the old
// leader's lease can have run out (the row was granted by another server: it settles), and
// must start above every ID served before (the failover fence). Then the old leader's path
// comes back and it serves again, through the new leader.
func TestOrderedFailoverLaggingReplica(t *testing.T) {
	t.Parallel()
	r, vip, dsn := e2e.Replicated(t)
	// Each instance reaches the virtual IP through a proxy of its own, to cut one of them.
	pxs := make([]*e2e.Proxy, 3)
	dsns := make([]string, 3)
	for i := range pxs {
		pxs[i] = e2e.StartProxy(t, vip.Addr())
		dsns[i] = proxiedDSN(t, dsn, pxs[i])
	}
	// Steps of 10,000 (no growth): the replica misses a few allocations while it lags for
	// longer than the lease, and the failover fence moves max_id by 20 × 10,000.
	ls := startOrderedCluster(t, dsns, "seq", 10000, "--max-step", "10000")
	load := startWarmLoad(t, ls, "before the failover")
	lead := leaderOf(t, ls, nil, "seq", 10*time.Second)
	r.WaitCaughtUp(30 * time.Second)
	r.StopApplier()
	maxID := func(m interface{ QueryString(string, ...any) string }) int64 {
		var v int64
		fmt.Sscan(m.QueryString("SELECT max_id FROM leafd.leaf_alloc WHERE biz_tag = 'seq'"), &v)
		return v
	}
	base := maxID(r.Replica)
	lagFrom := time.Now()
	// The replica misses the renewals of more than a lease and at least one allocation.
	e2e.Eventually(t, 30*time.Second, "the primary an allocation ahead of the stopped replica", func() bool {
		return maxID(r.Primary) > base && time.Since(lagFrom) > orderedLease+500*time.Millisecond
	})
	fault := time.Now()
	pxs[lead].SetMode(e2e.ProxyBlackhole, 0)
	vip.SetMode(e2e.ProxyReset, 0)
	ahead := maxID(r.Primary) - base
	lost := r.Promote()
	vip.SetTarget(r.Primary.Addr())
	vip.SetMode(e2e.ProxyPass, 0)
	t.Logf("failover: the new primary lacks %d transactions (%d IDs of the tag's max_id); leader %d cut off", lost, ahead, lead)
	for _, i := range others(len(ls), lead) {
		load.served(t, i, 300, 30*time.Second, "after the failover")
	}
	if d := 2*orderedLease - time.Since(fault); d > 0 {
		time.Sleep(d) // the fault's length: the old leader cut off for twice the lease
	}
	pxs[lead].SetMode(e2e.ProxyPass, 0)
	load.served(t, lead, 300, 30*time.Second, "the old leader, reconnected")
	newLead := leaderOf(t, ls, nil, "seq", 10*time.Second)
	t.Logf("instance %d leads after the failover", newLead)
	load.check(t, "ordered_failover", fault, orderedLease+orderedMargin, 3000, nil, orderedCodes...)
}
