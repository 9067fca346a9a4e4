package volume

// End-to-end tests of segment IDs from one MySQL/MariaDB table shared by several leafd
// processes under volume: the real binary (built with -race by TestMain), real go-redis
// clients, the shared MariaDB of scripts/test.sh or a private one from testenv. The
// invariant: no ID is ever handed out twice, and every range belongs to one instance.

import (
	"strconv"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// (a) Three instances, 50 connections, 100k IDs with step 100: a thousand contended refills,
// no ID twice, strictly increasing per connection, and exactly one allocation transaction per
// segment.
func TestMySQLManyInstances(t *testing.T) {
	t.Parallel()
	dsn, db := e2e.SharedDB(t)
	const step, want = 100, 100_000
	var ls []*e2e.Leafd
	for range 3 {
		// A generous wait: this test is about disjoint ranges, not latency, and a starved
		// 2-core CI machine can take longer than the default 500 ms for one refill.
		ls = append(ls, e2e.StartMySQL(t, dsn, "--max-step", strconv.Itoa(step), "--wait-timeout", "10s"))
	}
	e2e.CreateTag(t, ls[0], db, "orders", step)

	var n e2e.Counts
	t0 := time.Now()
	// 50 connections: 17 + 17 + 16.
	loads := e2e.RunLoad(e2e.Load{Tag: "orders", Total: 50, Count: &n, Addrs: e2e.Addrs(ls...), Stop: e2e.Until(&n.OK, want, t0.Add(120*time.Second))})
	elapsed := time.Since(t0)
	tt := e2e.Sum(loads)
	rate := float64(tt.IDs) / elapsed.Seconds()
	t.Logf("%d IDs from 3 instances over 50 connections in %v: %.0f IDs/s", tt.IDs, elapsed.Round(time.Millisecond), rate)
	e2e.BenchOut(t, "mysql_3_instances_step100_ids_per_s", rate, "IDs/s")

	checkVolume(t, tt.IDs, want)
	e2e.CheckCodes(t, "3 instances", tt)
	e2e.CheckOrder(t, loads)
	all := e2e.CheckUnique(t, loads)

	// One allocation transaction per segment: every committed allocation in the table is a
	// load some instance counted, and no ID lies outside the allocated ranges.
	maxID := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")
	allocs := (maxID - 1) / step
	var loadsOK, failed int64
	for _, l := range ls {
		loadsOK += l.InfoInt("segment", "segment_loads_ok")
		failed += l.InfoInt("segment", "segment_loads_failed")
	}
	if loadsOK != allocs || failed != 0 {
		t.Errorf("got %d allocations in leaf_alloc and %d loads (%d failed) in the instances, want one allocation per load and none failed", allocs, loadsOK, failed)
	}
	ranges := map[int64]bool{}
	for _, x := range all {
		ranges[(x.ID-1)/step] = true
	}
	if last := all[len(all)-1].ID; last >= maxID {
		t.Errorf("got ID %d, want below max_id %d", last, maxID)
	}
	t.Logf("%d allocations (one per segment), %d segments used, %d loaded but not (fully) used", allocs, len(ranges), allocs-int64(len(ranges)))
	e2e.StopClean(t, ls...)
}

// (g) Four instances on one tag with step 10 and 5×10⁴ INCR: the IDs are unique, and each
// instance's IDs lie in whole ranges of 10 aligned as the table hands them out, no range
// shared by two instances.
//
// A private MariaDB with innodb_flush_log_at_trx_commit=2: 5×10³ allocations of one row are
// serialized by its row lock, and an fsync per commit would make them take half a minute.
// Commit atomicity and isolation, what disjointness depends on, do not change.
func TestMySQLDisjointRanges(t *testing.T) {
	t.Parallel()
	m := testenv.StartMariaDB(t)
	admin := e2e.OpenSQL(t, m.DSN(""))
	e2e.SQLExec(t, admin, "SET GLOBAL innodb_flush_log_at_trx_commit = 2")
	e2e.SQLExec(t, admin, "CREATE DATABASE leafd")
	dsn := m.DSN("leafd")
	const step, start, want = 10, 1, 50_000
	var ls []*e2e.Leafd
	for range 4 {
		// A generous wait: this test is about disjoint ranges, not latency, and a starved
		// 2-core CI machine can take longer than the default 500 ms for one refill.
		ls = append(ls, e2e.StartMySQL(t, dsn, "--max-step", strconv.Itoa(step), "--wait-timeout", "10s"))
	}
	db := e2e.OpenSQL(t, dsn)
	// Created by leafd, so with its fence row: no failover gap, every allocation is one step.
	if _, err := ls[0].Do("IDS.CREATE", "orders", "STEP", step, "START", start, "DESC", "disjoint"); err != nil {
		t.Fatalf("IDS.CREATE: %v", err)
	}

	var n e2e.Counts
	t0 := time.Now()
	loads := e2e.RunLoad(e2e.Load{Tag: "orders", Conns: 6, Count: &n, Addrs: e2e.Addrs(ls...), Stop: e2e.Until(&n.OK, want, t0.Add(120*time.Second))})
	tt := e2e.Sum(loads)
	t.Logf("%d IDs from 4 instances in %v", tt.IDs, time.Since(t0).Round(time.Millisecond))
	checkVolume(t, tt.IDs, want)
	e2e.CheckCodes(t, "4 instances, step 10", tt)
	e2e.CheckOrder(t, loads)
	all := e2e.CheckUnique(t, loads)

	maxID := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")
	owner := map[int64]int{} // range index -> instance
	bad := 0
	for _, x := range all {
		if x.ID < start || x.ID >= maxID {
			t.Errorf("ID %d outside the allocated [%d, %d)", x.ID, start, maxID)
			continue
		}
		r := (x.ID - start) / step
		if o, seen := owner[r]; seen && o != x.Inst && bad < 10 {
			bad++
			t.Errorf("range [%d, %d) used by instances %d and %d, want one owner", start+r*step, start+(r+1)*step, o, x.Inst)
		}
		owner[r] = x.Inst
	}
	allocs := (maxID - start) / step
	var loadsOK int64
	for _, l := range ls {
		loadsOK += l.InfoInt("segment", "segment_loads_ok")
	}
	if loadsOK != allocs {
		t.Errorf("got %d allocations in leaf_alloc and %d loads in the instances, want equal (one transaction per segment)", allocs, loadsOK)
	}
	t.Logf("%d ranges allocated, %d used by exactly one instance each", allocs, len(owner))
	e2e.StopClean(t, ls...)
}

// checkVolume: the volume tests run until want IDs or 120 s. They are about disjoint ranges
// and one transaction per segment, not throughput: alone on 2 cores they reach want in 15-20 s,
// but CI runs them beside the segment package's MariaDB tests, where one run got 80% of it.
// A fifth of want (thousands of contended allocations) still proves the point; less means
// the instances stalled, which fails.
func checkVolume(t *testing.T, got, want int) {
	t.Helper()
	switch {
	case got < want/5:
		t.Errorf("got %d IDs within 120s, want at least %d (a fifth of the %d aimed at): the instances stalled", got, want/5, want)
	case got < want:
		t.Logf("got %d of the %d IDs aimed at within 120s (a loaded machine); the checks below run on them", got, want)
	}
}
