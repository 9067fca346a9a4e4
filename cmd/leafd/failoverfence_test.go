package main

// The failover fence on the built binary. A tag whose creation the promoted replica never
// received lacks both its rows there; re-creating it on the new primary (IDS.CREATE by the
// application, or --auto-create on) would start again at START and hand out IDs already
// served. The database-wide fence row (segment/mysqlstore/fence.go) makes every tag created after
// the failover start one more safety gap above START. The lost takeover of a second failover
// (a limit, docs/MYSQL.md) is covered by the segment unit test TestMySQLAllocateAbove (a
// takeover commits max_id at or above the caller's mark).

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// TestFenceLostCreate: tags created and used on the old primary and lost at the failover, then
// re-created on the new primary (explicitly and by auto-create), give no duplicate.
func TestFenceLostCreate(t *testing.T) {
	t.Parallel()
	r, px, dsn := e2e.Replicated(t)
	args := []string{"--max-step", "10", "--default-step", "10", "--mysql-failover-allocs", "16", "--load-timeout", "2s", "--auto-create", "on"}
	x := e2e.StartMySQL(t, dsn, args...)
	z := e2e.StartMySQL(t, dsn, args...)
	// Make sure both instances have opened the store (tables exist, replicated).
	if _, err := x.Do("IDS.CREATE", "warm", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := z.Incr("warm"); err != nil {
		t.Fatal(err)
	}
	r.WaitCaughtUp(30 * time.Second)

	// The replica stops applying: what follows is lost at the failover (2 creations, 3
	// allocations per tag: far below the 16 the fence is set to cover).
	r.StopApplier()
	if _, err := x.Do("IDS.CREATE", "explicit", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	served := map[string]map[int64]string{"explicit": {}, "auto": {}}
	for tag := range served {
		for range 25 {
			id, err := x.Incr(tag) // "auto" is auto-created by x on the old primary
			if err != nil {
				t.Fatalf("INCR %s on x: %v", tag, err)
			}
			served[tag][id] = "x (old primary)"
		}
	}

	px.SetMode(e2e.ProxyReset, 0)
	lost := r.Promote()
	px.SetTarget(r.Primary.Addr())
	px.SetMode(e2e.ProxyPass, 0)
	t.Logf("failover: %d transactions lost", lost)

	// z never served these tags (no mark). The application re-creates the tag it created
	// before (NOTAG now), or auto-create does it on INCR.
	var err error
	if !e2e.Poll(30*time.Second, func() bool {
		_, err = z.Do("IDS.CREATE", "explicit", "STEP", 10)
		return err == nil
	}) {
		t.Fatalf("IDS.CREATE explicit on the new primary: %v", err)
	}
	dups := 0
	for tag, m := range served {
		for range 25 {
			id, err := z.Incr(tag)
			if err != nil {
				t.Logf("INCR %s on z: %v", tag, err)
				continue
			}
			if who, ok := m[id]; ok {
				dups++
				if dups <= 4 {
					t.Errorf("tag %s: ID %d served by z (new primary) was served before by %s", tag, id, who)
				}
			}
			m[id] = "z"
		}
	}
	// x, which holds marks, refuses instead (REGRESSION) or serves from its buffer.
	for tag := range served {
		id, err := x.Incr(tag)
		t.Logf("x INCR %s after the failover: %d %v", tag, id, err)
	}
	if dups > 0 {
		t.Errorf("%d duplicate IDs in all", dups)
	}
}

// TestFenceMixedMaxStep: an instance with a larger --max-step lost two of its (large) ranges;
// one with --max-step 10 takes the tag over, with the largest gap any instance recorded in the
// database fence row (16 × 100000), not its own 16 × 10.
func TestFenceMixedMaxStep(t *testing.T) {
	t.Parallel()
	r, px, dsn := e2e.Replicated(t)
	x := e2e.StartMySQL(t, dsn, "--max-step", "100000", "--mysql-failover-allocs", "16", "--load-timeout", "2s")
	y := e2e.StartMySQL(t, dsn, "--max-step", "10", "--mysql-failover-allocs", "16", "--load-timeout", "2s")
	// IDS.CREATE again while UNAVAILABLE: the first store work on the two private MariaDBs
	// (tables, fence row) can outlast its timeout on a loaded machine, and the claim here is
	// the fence's gap. A retry after a creation whose reply was lost finds the tag.
	var err error
	for tries := 1; ; tries++ {
		_, err = x.Do("IDS.CREATE", "t", "STEP", 10)
		code, _ := e2e.ReplyCode(err)
		if code == "TAGEXISTS" && tries > 1 {
			err = nil
		}
		if code != "UNAVAILABLE" || tries == 5 {
			break
		}
		t.Logf("IDS.CREATE, try %d: %v", tries, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	served := map[int64]string{}
	dups := 0
	batch := func(l *e2e.Leafd, who string, n int) {
		t.Helper()
		for range n {
			var res any
			var err error
			e2e.Poll(30*time.Second, func() bool {
				res, err = l.Do("IDS.SEGMENT", "t", 1000)
				return err == nil
			})
			if err != nil {
				t.Fatalf("IDS.SEGMENT on %s: %v", who, err)
			}
			for _, v := range res.([]any) {
				id := v.(int64)
				if prev, ok := served[id]; ok {
					dups++
					if dups <= 3 {
						t.Errorf("ID %d served by %s was served before by %s", id, who, prev)
					}
				}
				served[id] = who
			}
		}
	}
	batch(x, "x", 30) // the dynamic step grows towards 100000
	r.WaitCaughtUp(30 * time.Second)
	r.StopApplier()
	frozen := r.Replica.QueryString("SELECT max_id FROM leafd.leaf_alloc WHERE biz_tag = 't'")
	// Until x holds a preloaded next segment that the replica lacks.
	for deadline := time.Now().Add(60 * time.Second); ; {
		batch(x, "x", 1)
		info, _ := x.Do("IDS.INFO", "t")
		if s := fmt.Sprint(info); strings.Contains(s, "next_ready 1") &&
			r.Primary.QueryString("SELECT max_id FROM leafd.leaf_alloc WHERE biz_tag = 't'") != frozen &&
			r.Primary.QueryString("SELECT max_id FROM leafd.leaf_alloc WHERE biz_tag = 't'") == highWater(s) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("x never held a next segment the replica lacks")
		}
	}
	px.SetMode(e2e.ProxyReset, 0)
	lost := r.Promote()
	px.SetTarget(r.Primary.Addr())
	px.SetMode(e2e.ProxyPass, 0)
	t.Logf("failover: %d transactions lost", lost)
	for range 50 { // y's segments hold 10 IDs: INCR, not batches
		id, _, err := y.WaitIncr("t", 30*time.Second)
		if err != nil {
			t.Fatalf("INCR on y: %v", err)
		}
		if prev, ok := served[id]; ok {
			dups++
			if dups <= 3 {
				t.Errorf("ID %d served by y was served before by %s", id, prev)
			}
		}
		served[id] = "y"
	}
	info, _ := x.Do("IDS.INFO", "t")
	t.Logf("x IDS.INFO t after the failover: %v", info)
	// x serves what its two segments hold (nothing to allocate), up to its first refusal.
	for i := 0; i < 300; i++ {
		res, err := x.Do("IDS.SEGMENT", "t", 1000)
		if err != nil {
			t.Logf("x after %d batches: %v", i, err)
			break
		}
		for _, v := range res.([]any) {
			id := v.(int64)
			if prev, ok := served[id]; ok {
				dups++
				if dups <= 6 {
					t.Errorf("ID %d served by x (a range from the old primary) was served before by %s", id, prev)
				}
			}
			served[id] = "x"
		}
	}
	t.Logf("y log tail:\n%s", e2e.Tail(y.Log(), 3))
	if dups > 0 {
		t.Errorf("%d duplicate IDs", dups)
	}
}

// highWater extracts high_water_mark from a printed IDS.INFO reply.
func highWater(info string) string {
	_, after, ok := strings.Cut(info, "high_water_mark ")
	if !ok {
		return ""
	}
	f := strings.Fields(after)
	if len(f) == 0 {
		return ""
	}
	return strings.TrimRight(f[0], "]")
}
