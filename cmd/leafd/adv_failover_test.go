package main

// Adversarial review of the failover fence (adv12): a tag whose creation the promoted replica
// never received. The fence row is written in the creation transaction, so the replica lacks
// both rows; re-creating the tag on the new primary (IDS.CREATE by the application, or
// --auto-create on) writes a fresh fence row naming the new primary, the fence sees nothing,
// and the tag starts again at START: IDs handed out from the old primary are handed out again
// by any instance without a mark of the tag.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
)

// TestAdvLostCreate FAILS on the code as merged (duplicates); it documents a hole of the fence.
func TestAdvLostCreate(t *testing.T) {
	r := testenv.StartReplication(t)
	r.Primary.Exec("CREATE DATABASE leafd")
	r.WaitCaughtUp(30 * time.Second)
	px := startProxy(t, r.Primary.Addr())
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", px.Addr(), "leafd"
	dsn := cfg.FormatDSN()
	args := []string{"--max-step", "10", "--default-step", "10", "--mysql-failover-allocs", "16", "--load-timeout", "2s", "--auto-create", "on"}
	x := mysqlLeafd(t, dsn, args...)
	z := mysqlLeafd(t, dsn, args...)
	// Make sure both instances have opened the store (tables exist, replicated).
	if _, err := do(x, "IDS.CREATE", "warm", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := incrOnce(z, "warm"); err != nil {
		t.Fatal(err)
	}
	r.WaitCaughtUp(30 * time.Second)

	// The replica stops applying: what follows is lost at the failover (2 creations, 3
	// allocations per tag: far below the 16 the fence is set to cover).
	r.StopApplier()
	if _, err := do(x, "IDS.CREATE", "explicit", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	served := map[string]map[int64]string{"explicit": {}, "auto": {}}
	for tag := range served {
		for range 25 {
			id, err := incrOnce(x, tag) // "auto" is auto-created by x on the old primary
			if err != nil {
				t.Fatalf("INCR %s on x: %v", tag, err)
			}
			served[tag][id] = "x (old primary)"
		}
	}

	px.SetMode(proxyReset, 0)
	lost := r.Promote()
	px.SetTarget(r.Primary.Addr())
	px.SetMode(proxyPass, 0)
	t.Logf("failover: %d transactions lost", lost)

	// z never served these tags (no mark). The application re-creates the tag it created
	// before (NOTAG now), or auto-create does it on INCR.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := do(z, "IDS.CREATE", "explicit", "STEP", 10)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("IDS.CREATE explicit on the new primary: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	dups := 0
	for tag, m := range served {
		for range 25 {
			id, err := incrOnce(z, tag)
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
		id, err := incrOnce(x, tag)
		t.Logf("x INCR %s after the failover: %d %v", tag, id, err)
	}
	if dups > 0 {
		t.Errorf("%d duplicate IDs in all", dups)
	}
}

// TestAdvLostTakeover: two failovers in a row, the second losing ONE transaction — the first
// allocation of the tag on the first promoted server, which is also its fence takeover. The
// second promoted server computes the same takeover from the same stale max_id (its fence row
// names a server that is not itself, gap = the same) and leases exactly the range the lost
// takeover had granted. FAILS on the code as merged (duplicates).
func TestAdvLostTakeover(t *testing.T) {
	r := testenv.StartReplication(t)
	r.Primary.Exec("CREATE DATABASE leafd")
	r.WaitCaughtUp(30 * time.Second)
	px := startProxy(t, r.Primary.Addr())
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", px.Addr(), "leafd"
	dsn := cfg.FormatDSN()
	args := []string{"--max-step", "10", "--mysql-failover-allocs", "16", "--load-timeout", "2s"}
	x := mysqlLeafd(t, dsn, args...)
	y := mysqlLeafd(t, dsn, args...)
	if _, err := do(x, "IDS.CREATE", "t", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	served := map[int64]string{}
	incr := func(l *leafd, who string, n int) {
		t.Helper()
		for range n {
			id, _, err := waitIncr(l, "t", 30*time.Second)
			if err != nil {
				t.Fatalf("INCR t on %s: %v", who, err)
			}
			if prev, ok := served[id]; ok {
				t.Errorf("ID %d served by %s was served before by %s", id, who, prev)
			}
			served[id] = who
		}
	}
	incr(x, "x on A", 5)
	r.WaitCaughtUp(30 * time.Second)

	failover := func() int64 {
		px.SetMode(proxyReset, 0)
		lost := r.Promote()
		px.SetTarget(r.Primary.Addr())
		px.SetMode(proxyPass, 0)
		return lost
	}
	// Failover 1, nothing lost; the old primary is rebuilt as a replica and catches up.
	t.Logf("failover 1: %d transactions lost", failover())
	r.Rejoin("leafd")
	r.WaitCaughtUp(60 * time.Second)
	// The rebuilt replica stops applying; x uses up its two segments from A and takes the
	// tag over on B (one transaction: jump + first range), then serves from it.
	r.StopApplier()
	incr(x, "x on B", 25)
	// Failover 2 loses that one transaction (and the preloaded next range, if any).
	t.Logf("failover 2: %d transactions lost", failover())
	incr(y, "y on A'", 25)
	t.Logf("x log tail:\n%s\ny log tail:\n%s", tail(x.Log(), 5), tail(y.Log(), 5))
}

// TestAdvMixedMaxStep FAILS on the code as merged (duplicates): the gap is computed by the instance that takes over, from ITS
// --max-step. An instance with a larger --max-step lost two of its (large) ranges; one with
// --max-step 10 takes the tag over with a gap of 16 × 10 and leases inside them.
func TestAdvMixedMaxStep(t *testing.T) {
	r := testenv.StartReplication(t)
	r.Primary.Exec("CREATE DATABASE leafd")
	r.WaitCaughtUp(30 * time.Second)
	px := startProxy(t, r.Primary.Addr())
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", px.Addr(), "leafd"
	dsn := cfg.FormatDSN()
	x := mysqlLeafd(t, dsn, "--max-step", "100000", "--mysql-failover-allocs", "16", "--load-timeout", "2s")
	y := mysqlLeafd(t, dsn, "--max-step", "10", "--mysql-failover-allocs", "16", "--load-timeout", "2s")
	if _, err := do(x, "IDS.CREATE", "t", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	served := map[int64]string{}
	dups := 0
	batch := func(l *leafd, who string, n int) {
		t.Helper()
		for range n {
			var res any
			var err error
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				if res, err = do(l, "IDS.SEGMENT", "t", 1000); err == nil || time.Now().After(deadline) {
					break
				}
			}
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
		info, _ := do(x, "IDS.INFO", "t")
		if s := fmt.Sprint(info); strings.Contains(s, "next_ready 1") &&
			r.Primary.QueryString("SELECT max_id FROM leafd.leaf_alloc WHERE biz_tag = 't'") != frozen &&
			r.Primary.QueryString("SELECT max_id FROM leafd.leaf_alloc WHERE biz_tag = 't'") == highWater(s) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("x never held a next segment the replica lacks")
		}
	}
	px.SetMode(proxyReset, 0)
	lost := r.Promote()
	px.SetTarget(r.Primary.Addr())
	px.SetMode(proxyPass, 0)
	t.Logf("failover: %d transactions lost", lost)
	for range 50 { // y's segments hold 10 IDs: INCR, not batches
		id, _, err := waitIncr(y, "t", 30*time.Second)
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
	info, _ := do(x, "IDS.INFO", "t")
	t.Logf("x IDS.INFO t after the failover: %v", info)
	// x serves what its two segments hold (nothing to allocate), up to its first refusal.
	for i := 0; i < 300; i++ {
		res, err := do(x, "IDS.SEGMENT", "t", 1000)
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
	t.Logf("y log tail:\n%s", tail(y.Log(), 3))
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
