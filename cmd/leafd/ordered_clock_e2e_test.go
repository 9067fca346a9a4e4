package main

// Ordered tags on the built binary against the database's clock and lease lengths: the
// database host's clock stepped forward and back (mariadbd under libfaketime) at every
// phase of a renewal, then the leader killed after a step back; a slow database link under
// a sole leader; failovers with mixed --ordered-lease values and before a tag's first
// grant, to replicas whose clocks are an hour off. The checker and the load are those of
// ordered_e2e_test.go; each test prints violations, duplicates and the longest window
// without an ID, and asserts 0, 0 and the bound of docs/SEGMENT.md ("What the order rests
// on"): after a leader's death the tag serves again within 2 × the longest lease + 1 s.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// outageBound is the documented bound on the window without an ID after a leader's death,
// for the longest lease of the instances.
func outageBound(longest time.Duration) time.Duration { return 2*longest + time.Second }

// clockedDB starts a private MariaDB under a libfaketime offset, with database leafd.
func clockedDB(t *testing.T) (*testenv.MariaDB, *testenv.FakeTime, string) {
	t.Helper()
	ft := testenv.NewFakeTime(t)
	db := testenv.StartMariaDBEnv(t, ft.Env())
	db.Exec("CREATE DATABASE leafd")
	return db, ft, db.DSN("leafd")
}

// stepClock sets the database clock's offset and checks that UTC_TIMESTAMP(3) moved.
func stepClock(t *testing.T, db *testenv.MariaDB, ft *testenv.FakeTime, offset time.Duration) {
	t.Helper()
	ft.Set(offset)
	var got time.Time
	ok := e2e.Poll(5*time.Second, func() bool {
		s := db.QueryString("SELECT DATE_FORMAT(UTC_TIMESTAMP(3), '%Y-%m-%dT%H:%i:%s.%fZ')")
		var err error
		if got, err = time.Parse(time.RFC3339Nano, s); err != nil {
			t.Fatalf("UTC_TIMESTAMP(3) = %q: %v", s, err)
		}
		d := time.Until(got) - offset
		return d > -time.Second && d < time.Second
	})
	if !ok {
		t.Fatalf("database clock %v, want now %+v", got, offset)
	}
}

// TestOrderedDBClockSteps: under load on three instances, the database host's clock steps
// forward and back by more than the lease (NTP steps, a VM resumed) six times, each at
// another phase of the 2/3 s renewal cycle. Nothing that decides the lease reads that
// clock: 0 violations, 0 duplicates, and no window without an ID beyond the outage bound.
func TestOrderedDBClockSteps(t *testing.T) {
	t.Parallel()
	db, ft, dsn := clockedDB(t)
	ls := startOrderedCluster(t, []string{dsn, dsn, dsn}, "seq", 100)
	load := startWarmLoad(t, ls, "before the steps")
	fault := time.Now()
	var offset time.Duration
	for i, d := range []time.Duration{30 * time.Second, -20 * time.Second, 60 * time.Second, -75 * time.Second, 10 * time.Second, -40 * time.Second} {
		offset += d
		stepClock(t, db, ft, offset)
		load.served(t, -1, 300, 20*time.Second, fmt.Sprintf("after step %d (%+v, clock at %+v)", i, d, offset))
		// The next step lands at another phase of the renewal: a lease and a seventh more
		// each time (the steps' spacing).
		at := time.Now().Add(orderedLease + time.Duration(i)*orderedLease/7)
		e2e.Poll(2*orderedLease, func() bool { return !time.Now().Before(at) })
	}
	load.check(t, "ordered_db_clock_steps", fault, outageBound(orderedLease), 3000, nil, orderedCodes...)
}

// TestOrderedDBClockBackThenKill: the database clock steps back 20 s, then the leader is
// killed -9. The followers judge its death on their own clocks (its row unchanged for a
// lease), not by its expiry on the stepped-back clock: the tag serves again within the
// outage bound.
func TestOrderedDBClockBackThenKill(t *testing.T) {
	t.Parallel()
	db, ft, dsn := clockedDB(t)
	ls := startOrderedCluster(t, []string{dsn, dsn, dsn}, "seq", 100)
	load := startWarmLoad(t, ls, "before the step")
	stepClock(t, db, ft, -20*time.Second)
	load.served(t, -1, 300, 20*time.Second, "after the step back")
	lead, fault := faultLeader(t, ls, load, func(lead int) { ls[lead].Kill() }, "after the kill")
	load.check(t, "ordered_db_clock_back_kill", fault, outageBound(orderedLease), 2000, []int{lead}, orderedCodes...)
}

// TestOrderedSlowLinkSoleLeader: a sole leader whose database round trip is about a quarter
// of the lease (a proxy delays every chunk by an eighth of it each way) keeps its lease: its
// renewal is one statement, sent a third of a lease after the previous one's send. Its
// clients never get TRYAGAIN (nor any error) for four leases.
func TestOrderedSlowLinkSoleLeader(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	px := e2e.StartProxy(t, mysqlAddr(t, dsn))
	l := e2e.Start(t, orderedArgs(proxiedDSN(t, dsn, px), "--max-step", "10000000")...)
	// One segment lasts the whole test: no refill through the slow link is needed.
	createOrdered(t, l, "seq", 10_000_000)
	ls := []*e2e.Leafd{l}
	load := startWarmLoad(t, ls, "before the slow link")
	fault := time.Now()
	px.SetMode(e2e.ProxyDelay, orderedLease/8)
	until := time.Now().Add(4 * orderedLease)
	e2e.Poll(5*orderedLease, func() bool { return !time.Now().Before(until) })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("leafd log:\n%s", e2e.Tail(l.Log(), 40))
		}
	})
	load.served(t, 0, 300, 20*time.Second, "on the slow link")
	load.check(t, "ordered_slow_link", fault, orderedLease/2, 1000, nil)
}

// mysqlAddr is the host:port of a go-sql-driver DSN.
func mysqlAddr(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Addr
}

// failoverCluster is three instances on a replicated pair, each through a proxy of its own
// to the virtual IP (to cut one off), the replica's clock offset from the primary's.
type failoverCluster struct {
	r    *testenv.Replication
	vip  *e2e.Proxy
	pxs  []*e2e.Proxy
	dsns []string
}

func startFailoverPair(t *testing.T, replicaOffset time.Duration) *failoverCluster {
	t.Helper()
	ft := testenv.NewFakeTime(t)
	ft.Set(replicaOffset)
	r, vip, dsn := e2e.ReplicatedEnv(t, nil, ft.Env())
	fc := &failoverCluster{r: r, vip: vip}
	for range 3 {
		px := e2e.StartProxy(t, vip.Addr())
		fc.pxs = append(fc.pxs, px)
		fc.dsns = append(fc.dsns, proxiedDSN(t, dsn, px))
	}
	return fc
}

// failover cuts instance lead off the database (its proxy swallows everything), and moves
// the virtual IP to the replica, promoted, which lacks what the primary wrote since the
// applier stopped.
func (fc *failoverCluster) failover(t *testing.T, lead int) {
	t.Helper()
	fc.pxs[lead].SetMode(e2e.ProxyBlackhole, 0)
	fc.vip.SetMode(e2e.ProxyReset, 0)
	lost := fc.r.Promote()
	fc.vip.SetTarget(fc.r.Primary.Addr())
	fc.vip.SetMode(e2e.ProxyPass, 0)
	t.Logf("failover: the new primary lacks %d transactions; instance %d cut off", lost, lead)
}

// TestOrderedFailoverMixedLeases: the leader runs with --ordered-lease 8s, the two others
// with 2s. The database fails over to a lagging replica whose clock is an hour ahead while
// the leader, cut off from it, serves on until its own deadline. The takers settle for the
// longest lease the row records (8 s), not their own 2 s: 0 violations, 0 duplicates, and
// the tag serves again within the bound of the longest lease.
func TestOrderedFailoverMixedLeases(t *testing.T) {
	t.Parallel()
	const long = 8 * time.Second
	fc := startFailoverPair(t, time.Hour)
	args := func(i int, lease time.Duration) []string {
		return []string{"--mysql-dsn", fc.dsns[i], "--ordered-lease", lease.String(), "--log-format", "json", "--max-step", "10000"}
	}
	// The 8 s instance creates the tag and leads it before the others start.
	ls := []*e2e.Leafd{e2e.Start(t, args(0, long)...)}
	createOrdered(t, ls[0], "seq", 10000)
	if _, _, err := ls[0].WaitIncr("seq", 10*time.Second); err != nil {
		t.Fatalf("the 8 s instance does not serve the tag it created: %v", err)
	}
	ls = append(ls, e2e.StartMany(t, args(1, orderedLease), args(2, orderedLease))...)
	load := startWarmLoad(t, ls, "before the failover")
	if lead := leaderOf(t, ls, nil, "seq", 10*time.Second); lead != 0 {
		t.Fatalf("instance %d leads, want the 8 s instance", lead)
	}
	fc.r.WaitCaughtUp(30 * time.Second)
	fc.r.StopApplier()
	load.served(t, -1, 3000, 20*time.Second, "while the replica lags")
	fault := time.Now()
	fc.failover(t, 0)
	// The fault's length: the old leader cut off until its 8 s lease has surely run out, so
	// that the IDs counted next come from the new leader after its settle.
	if d := long + time.Second - time.Since(fault); d > 0 {
		time.Sleep(d)
	}
	for _, i := range others(len(ls), 0) {
		load.served(t, i, 300, 40*time.Second, "after the failover")
	}
	newLead := leaderOf(t, ls, []int{0}, "seq", 10*time.Second)
	t.Logf("instance %d leads %v after the failover", newLead, time.Since(fault).Round(time.Millisecond))
	fc.pxs[0].SetMode(e2e.ProxyPass, 0)
	load.served(t, 0, 300, 30*time.Second, "the 8 s instance, reconnected")
	load.check(t, "ordered_failover_mixed_leases", fault, outageBound(long), 3000, nil, orderedCodes...)
}

// TestOrderedFailoverBeforeFirstGrant: the replica has the ordered tag's creation but none
// of its grants (the row free, written by the primary), and its clock is an hour behind. The
// database fails over to it while the leader, cut off, serves on until its deadline: the
// row counts as moved, the new leader settles. 0 violations, 0 duplicates.
func TestOrderedFailoverBeforeFirstGrant(t *testing.T) {
	t.Parallel()
	fc := startFailoverPair(t, -time.Hour)
	args := func(i int) []string { return orderedArgs(fc.dsns[i], "--max-step", "10000") }
	// Created through a first instance, stopped before the replica stops applying; the
	// row is then set back to never granted, as the creation left it.
	first := e2e.Start(t, args(0)...)
	createOrdered(t, first, "seq", 10000)
	if err := first.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	fc.r.Primary.Exec("UPDATE leafd.leafd_leader SET holder = '', epoch = 0, version = 0, lease_us = 0, longest_us = 0, server_id = @@server_id WHERE biz_tag = 'seq'")
	fc.r.WaitCaughtUp(30 * time.Second)
	fc.r.StopApplier()
	ls := e2e.StartMany(t, args(0), args(1), args(2))
	load := startWarmLoad(t, ls, "before the failover")
	lead := leaderOf(t, ls, nil, "seq", 10*time.Second)
	fault := time.Now()
	fc.failover(t, lead)
	for _, i := range others(len(ls), lead) {
		load.served(t, i, 300, 30*time.Second, "after the failover")
	}
	if d := 2*orderedLease - time.Since(fault); d > 0 {
		time.Sleep(d) // the fault's length: the old leader cut off for twice the lease
	}
	fc.pxs[lead].SetMode(e2e.ProxyPass, 0)
	load.served(t, lead, 300, 30*time.Second, "the old leader, reconnected")
	load.check(t, "ordered_failover_first_grant", fault, outageBound(orderedLease), 3000, nil, orderedCodes...)
}

// TestOrderedClockAttack (opt-in: LEAFD_TEST_ORDERED_ATTACK=rounds, LEAFD_TEST_ORDERED_SEED)
// attacks the lease on the binary: three instances with leases of 2 s, 3 s and 2 s, the
// second through a proxy that delays every chunk by a sixteenth of a lease; each round steps
// the database clock by up to ±90 s at a random phase of the renewal cycle and, one round in
// three, kills the leader -9 (restarted the next round). Bounded by the rounds and 3 minutes.
func TestOrderedClockAttack(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("LEAFD_TEST_ORDERED_ATTACK"))
	if rounds <= 0 {
		t.Skip("set LEAFD_TEST_ORDERED_ATTACK=rounds")
	}
	seed, _ := strconv.ParseUint(os.Getenv("LEAFD_TEST_ORDERED_SEED"), 10, 64)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	db, ft, dsn := clockedDB(t)
	px := e2e.StartProxy(t, mysqlAddr(t, dsn))
	leases := []time.Duration{2 * time.Second, 3 * time.Second, 2 * time.Second}
	args := func(i int) []string {
		d := dsn
		if i == 1 {
			d = proxiedDSN(t, dsn, px)
		}
		return []string{"--mysql-dsn", d, "--ordered-lease", leases[i].String(), "--log-format", "json"}
	}
	ls := e2e.StartMany(t, args(0), args(1), args(2))
	createOrdered(t, ls[0], "seq", 100)
	px.SetMode(e2e.ProxyDelay, leases[1]/16)
	load := startLinLoad(t, "seq", ls, 2)
	load.served(t, -1, 1000, 30*time.Second, "before the attack")
	fault := time.Now()
	end := fault.Add(3 * time.Minute)
	var offset time.Duration
	killed := -1
	for r := 0; r < rounds && time.Now().Before(end); r++ {
		phase := time.Duration(rng.Int64N(int64(3 * time.Second)))
		at := time.Now().Add(phase)
		e2e.Poll(4*time.Second, func() bool { return !time.Now().Before(at) })
		offset = time.Duration(rng.Int64N(int64(180*time.Second))) - 90*time.Second
		stepClock(t, db, ft, offset)
		switch {
		case killed >= 0:
			ls[killed].Restart()
			killed = -1
		case r%3 == 2:
			if killed = servingHere(ls, "seq", 20*time.Second); killed >= 0 {
				ls[killed].Kill()
			}
		}
		load.served(t, -1, 200, 30*time.Second, fmt.Sprintf("round %d (clock %+v, killed %d)", r, offset, killed))
	}
	if killed >= 0 {
		ls[killed].Restart()
	}
	load.served(t, -1, 300, 30*time.Second, "after the attack")
	load.check(t, "ordered_clock_attack", fault, outageBound(3*time.Second), 3000, []int{0, 1, 2}, orderedCodes...)
}

// servingHere is the index of the instance whose IDS.INFO says it serves tag (leader_here
// 1), polled for up to d; -1 if none does. Instances that do not know the tag yet (NOTAG: it
// was only forwarded) are passed over.
func servingHere(ls []*e2e.Leafd, tag string, d time.Duration) int {
	found := -1
	e2e.Poll(d, func() bool {
		for i, l := range ls {
			v, err := l.Do("IDS.INFO", tag)
			if err != nil {
				continue
			}
			vs, _ := v.([]any)
			for j := 0; j+1 < len(vs); j += 2 {
				if fmt.Sprint(vs[j]) == "leader_here" && fmt.Sprint(vs[j+1]) == "1" {
					found = i
					return true
				}
			}
		}
		return false
	})
	return found
}
