package mysqlstore

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// fenced opens a store with the fence on: 3 lost allocations of at most MaxStep 50.
func fenced(t *testing.T, dsn string) *MySQLStore {
	t.Helper()
	return openTestMySQL(t, dsn, func(c *MySQLConfig) { c.FailoverAllocs, c.MaxStep = 3, 50 })
}

func maxIDOf(t *testing.T, dsn, tag string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(sqlQuery(t, dsn, "SELECT max_id FROM leaf_alloc WHERE biz_tag = '"+tag+"'"), 10, 64)
	if err != nil {
		t.Fatalf("max_id of %s: %v", tag, err)
	}
	return v
}

// TestMySQLFence: the fence moves max_id forward by FailoverAllocs × max(MaxStep, step)
// exactly once whenever the database is not the one that granted the tag's last range, and
// never otherwise.
func TestMySQLFence(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := fenced(t, dsn)
	ctx := context.Background()
	const gap = 3 * 50
	if err := s.Create(ctx, segment.Tag{Name: "t", Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	alloc := func(st *MySQLStore, step int64) segment.Alloc {
		t.Helper()
		a, err := st.Allocate(ctx, "t", step)
		if err != nil {
			t.Fatalf("Allocate: %v", err)
		}
		return a
	}
	// A tag created by leafd carries its fence: no gap.
	if a := alloc(s, 0); a.MaxID != 11 {
		t.Fatalf("first allocation of a created tag: got max_id %d, want 11 (no gap)", a.MaxID)
	}
	if a := alloc(s, 0); a.MaxID != 21 {
		t.Fatalf("second allocation: got max_id %d, want 21", a.MaxID)
	}

	tests := []struct {
		name    string
		fake    string // SQL that makes the database look failed over
		step    int64
		wantGap int64
	}{
		{name: "granted by another server", fake: "UPDATE leafd_fence SET server_id = server_id + 1000", wantGap: gap},
		{name: "another server, MySQL uuid", fake: "UPDATE leafd_fence SET server_uuid = 'other'", wantGap: gap},
		{name: "epoch below one seen (failback that lost transactions)", fake: "UPDATE leafd_fence SET epoch = epoch - 1", wantGap: gap},
		{name: "requested step above MaxStep", fake: "UPDATE leafd_fence SET server_id = server_id + 1000", step: 70, wantGap: 3 * 70},
		{name: "nothing changed", fake: "", wantGap: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := maxIDOf(t, dsn, "t")
			if tt.fake != "" {
				sqlExec(t, dsn, tt.fake)
			}
			step := tt.step
			if step == 0 {
				step = 10
			}
			if a := alloc(s, tt.step); a.MaxID != before+tt.wantGap+step {
				t.Fatalf("got max_id %d, want %d + gap %d + step %d", a.MaxID, before, tt.wantGap, step)
			}
			// Once: the fence now names this server.
			if a := alloc(s, 0); a.MaxID != before+tt.wantGap+step+10 {
				t.Fatalf("next allocation: got max_id %d, want %d (no second gap)", a.MaxID, before+tt.wantGap+step+10)
			}
		})
	}

	// Another instance (a new store: no epoch seen) that allocates after the takeover takes no
	// gap either.
	sqlExec(t, dsn, "UPDATE leafd_fence SET server_id = server_id + 1000")
	before := maxIDOf(t, dsn, "t")
	other := fenced(t, dsn)
	if a := alloc(other, 0); a.MaxID != before+gap+10 {
		t.Fatalf("other instance after a failover: got max_id %d, want %d", a.MaxID, before+gap+10)
	}
	if a := alloc(s, 0); a.MaxID != before+gap+20 {
		t.Fatalf("first instance after the other took the fence: got max_id %d, want %d (no second gap)", a.MaxID, before+gap+20)
	}
}

// TestMySQLFenceHandInserted: a row inserted by hand (or by Leaf) has no fence row: it is
// refused (ErrNotAdopted, TestMySQLNotAdopted) until adopted, and then continues at max_id
// with no gap. With the fence off the store is exactly Leaf's.
func TestMySQLFenceHandInserted(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	sqlExec(t, dsn, leafDDL, "INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('h', 1000, 20)")
	s := fenced(t, dsn)
	ctx := context.Background()
	if _, err := s.Allocate(ctx, "h", 0); !errors.Is(err, segment.ErrNotAdopted) {
		t.Fatalf("first allocation of a hand-inserted row: got %v, want ErrNotAdopted", err)
	}
	if _, err := s.Adopt(ctx, AdoptConfig{}); err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if a, err := s.Allocate(ctx, "h", 0); err != nil || a.MaxID != 1000+20 {
		t.Fatalf("first allocation of an adopted hand-inserted row: got %+v, %v, want max_id %d (no gap)", a, err, 1000+20)
	}
	off := openTestMySQL(t, dsn, func(c *MySQLConfig) { c.FailoverAllocs = 0 })
	sqlExec(t, dsn, "DELETE FROM leafd_fence")
	if a, err := off.Allocate(ctx, "h", 0); err != nil || a.MaxID != 1000+40 {
		t.Fatalf("fence off: got %+v, %v, want max_id %d (no gap)", a, err, 1000+40)
	}
	if _, err := s.Allocate(ctx, "missing", 0); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("unknown tag with the fence: got %v, want ErrUnknownTag", err)
	}
}

// TestMySQLFenceConcurrent: after a failover, 8 goroutines of two instances allocate at
// once: exactly one gap is taken, and the ranges are disjoint and contiguous above it.
func TestMySQLFenceConcurrent(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	stores := []*MySQLStore{fenced(t, dsn), fenced(t, dsn)}
	ctx := context.Background()
	if err := stores[0].Create(ctx, segment.Tag{Name: "c", Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	sqlExec(t, dsn, "UPDATE leafd_fence SET server_id = server_id + 1000")
	var (
		mu     sync.Mutex
		starts []int64
		wg     sync.WaitGroup
	)
	for g := range 8 {
		wg.Go(func() {
			for range 10 {
				a, err := stores[g%2].Allocate(ctx, "c", 0)
				if err != nil {
					t.Errorf("Allocate: %v", err)
					return
				}
				mu.Lock()
				starts = append(starts, a.MaxID-10)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(starts)
	for i, s := range starts {
		if want := int64(1 + 3*50 + 10*i); s != want {
			t.Fatalf("range %d starts at %d, want %d (one gap of 150, then contiguous)", i, s, want)
		}
	}
}

// TestMySQLAllocateAbove: a range below the floor is refused inside the transaction, so a
// refused lease never moves max_id (nor takes over the fence); allocate hands the uncommitted
// range to the caller's regression check.
func TestMySQLAllocateAbove(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	ctx := context.Background()
	for _, fence := range []bool{false, true} {
		t.Run("fence "+strconv.FormatBool(fence), func(t *testing.T) {
			s := openTestMySQL(t, dsn, func(c *MySQLConfig) {
				c.MaxStep = 50
				if fence {
					c.FailoverAllocs = 3
				} else {
					c.FailoverAllocs = 0
				}
			})
			tag := "f" + strconv.FormatBool(fence)
			if err := s.Create(ctx, segment.Tag{Name: tag, Step: 10}); err != nil {
				t.Fatalf("Create: %v", err)
			}
			before := maxIDOf(t, dsn, tag)
			epoch := ""
			if fence {
				epoch = sqlQuery(t, dsn, "SELECT epoch FROM leafd_fence WHERE biz_tag = '"+tag+"'")
			}
			for range 3 {
				_, err := s.AllocateAbove(ctx, tag, 0, 100_000)
				if !errors.Is(err, segment.ErrRegression) {
					t.Fatalf("AllocateAbove below the floor: got %v, want ErrRegression", err)
				}
				a, err := s.allocateFloor(ctx, tag, 0, 100_000)
				if err != nil || a.MaxID-10 >= 100_000 {
					t.Fatalf("allocate below the floor: got %+v, %v, want the uncommitted range below 100000 and no error", a, err)
				}
			}
			if got := maxIDOf(t, dsn, tag); got != before {
				t.Fatalf("max_id after refused leases: got %d, want %d (unchanged)", got, before)
			}
			if got := ""; fence {
				if got = sqlQuery(t, dsn, "SELECT epoch FROM leafd_fence WHERE biz_tag = '"+tag+"'"); got != epoch {
					t.Fatalf("fence epoch after refused leases: got %s, want %s", got, epoch)
				}
			}
			if !fence {
				if a, err := s.AllocateAbove(ctx, tag, 0, before); err != nil || a.MaxID != before+10 {
					t.Fatalf("AllocateAbove at the floor: got %+v, %v, want max_id %d", a, err, before+10)
				}
				return
			}
			// A takeover moves max_id to max(stale + gap, floor) and commits: an instance
			// holding marks above a lost takeover moves the table up for every instance.
			sqlExec(t, dsn, "UPDATE leafd_fence SET server_id = server_id + 1000 WHERE biz_tag = '"+tag+"'")
			if a, err := s.AllocateAbove(ctx, tag, 0, 100_000); err != nil || a.MaxID != 100_010 {
				t.Fatalf("takeover below the floor: got %+v, %v, want max_id 100010 (range from the floor)", a, err)
			}
			if got := maxIDOf(t, dsn, tag); got != 100_010 {
				t.Fatalf("max_id after the takeover: got %d, want 100010 (committed)", got)
			}
			// Above the floor the takeover is the plain gap.
			sqlExec(t, dsn, "UPDATE leafd_fence SET server_id = server_id + 1000 WHERE biz_tag = '"+tag+"'")
			if a, err := s.AllocateAbove(ctx, tag, 0, 100_010); err != nil || a.MaxID != 100_010+150+10 {
				t.Fatalf("takeover above the floor: got %+v, %v, want max_id %d", a, err, 100_010+150+10)
			}
		})
	}
}

// TestMySQLSemiSync: with RequireSemiSync the store leases only while the primary replicates
// semi-synchronously; when the replica stops acknowledging, the commit that timed out and
// every later one are refused with ErrUnavailable, until semi-sync is back.
func TestMySQLSemiSync(t *testing.T) {
	r := testenv.StartReplication(t)
	r.Primary.Exec("CREATE DATABASE leafd")
	r.WaitCaughtUp(30 * time.Second)
	dsn := r.Primary.DSN("leafd")
	s := openTestMySQL(t, dsn, func(c *MySQLConfig) { c.RequireSemiSync = true })
	ctx := context.Background()
	if err := s.Create(ctx, segment.Tag{Name: "t", Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	// Semi-sync off (the default): refused before anything is committed.
	if a, err := s.Allocate(ctx, "t", 0); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("semi-sync off: got %+v, %v, want ErrUnavailable", a, err)
	}
	if got := maxIDOf(t, dsn, "t"); got != 1 {
		t.Fatalf("semi-sync off: max_id %d after the refusal, want 1 (nothing leased)", got)
	}
	r.Primary.Exec("SET GLOBAL rpl_semi_sync_master_timeout = 500", "SET GLOBAL rpl_semi_sync_master_enabled = ON")
	r.Replica.Exec("SET GLOBAL rpl_semi_sync_slave_enabled = ON", "STOP SLAVE IO_THREAD", "START SLAVE IO_THREAD")
	waitUntil(t, 20*time.Second, "semi-sync on", func() bool {
		return r.Primary.QueryString("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS'") == "ON" &&
			r.Primary.QueryString("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'") == "1"
	})
	if _, err := s.Allocate(ctx, "t", 0); err != nil {
		t.Fatalf("semi-sync on: Allocate: %v", err)
	}
	// The replica stops acknowledging: the next commit waits 500 ms, is not acknowledged,
	// and the primary falls back to asynchronous replication.
	r.Replica.Exec("STOP SLAVE IO_THREAD")
	_, err := s.Allocate(ctx, "t", 0)
	if !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("commit not acknowledged: got %v, want ErrUnavailable", err)
	}
	t.Logf("refused: %v", err)
	if _, err := s.Allocate(ctx, "t", 0); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("after the fallback to async: got %v, want ErrUnavailable", err)
	}
	// Back.
	r.Replica.Exec("START SLAVE IO_THREAD")
	waitUntil(t, 20*time.Second, "semi-sync back on", func() bool {
		_, err := s.Allocate(ctx, "t", 0)
		return err == nil
	})
}

func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMySQLFenceDatabaseRow: the database-wide fence row (biz_tag is the empty string). A tag created after a
// failover (the row names another server, or is missing where other fence rows exist) starts
// past the safety gap, once; and a takeover uses the largest gap any instance recorded.
func TestMySQLFenceDatabaseRow(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	ctx := context.Background()
	s := fenced(t, dsn) // gap 3 × 50
	big := openTestMySQL(t, dsn, func(c *MySQLConfig) { c.FailoverAllocs, c.MaxStep = 4, 100 })
	if got := sqlQuery(t, dsn, "SELECT gap FROM leafd_fence WHERE biz_tag = ''"); got != "400" {
		t.Fatalf("recorded gap: got %s, want 400 (the largest configured)", got)
	}
	create := func(name string, start int64) {
		t.Helper()
		if err := s.Create(ctx, segment.Tag{Name: name, MaxID: start, Step: 10}); err != nil {
			t.Fatalf("Create %s: %v", name, err)
		}
	}
	create("a", 100)
	if got := maxIDOf(t, dsn, "a"); got != 100 {
		t.Fatalf("tag created on the same primary: got max_id %d, want 100", got)
	}
	// A takeover by the small instance jumps by the recorded 400, not its own 150.
	sqlExec(t, dsn, "UPDATE leafd_fence SET server_id = server_id + 1000 WHERE biz_tag = 'a'")
	if a, err := s.Allocate(ctx, "a", 0); err != nil || a.MaxID != 100+400+10 {
		t.Fatalf("takeover with a larger recorded gap: got %+v, %v, want max_id %d", a, err, 100+400+10)
	}
	for _, c := range []struct {
		fake string
		gap  int64
	}{
		{"UPDATE leafd_fence SET server_id = server_id + 1000 WHERE biz_tag = ''", 400}, // epoch 2: one recorded gap
		{"DELETE FROM leafd_fence WHERE biz_tag = ''", 800},                             // row lost (epoch 2 seen): two gaps of the largest per-tag takeover
	} {
		fake := c.fake
		sqlExec(t, dsn, fake)
		name := "b" + strconv.Itoa(len(fake))
		create(name, 100)
		if got := maxIDOf(t, dsn, name); got != 100+c.gap {
			t.Fatalf("%s: tag created after a failover: got max_id %d, want 100 + gap %d", fake, got, c.gap)
		}
		// Every later creation too (any may re-create a lost tag), with no further takeover.
		create(name+"x", 100)
		if got := maxIDOf(t, dsn, name+"x"); got != 100+c.gap {
			t.Fatalf("%s: second creation: got max_id %d, want %d", fake, got, 100+c.gap)
		}
	}
	_ = big
}

// TestMySQLHighWater: the fence row keeps the highest range end ever granted for a tag
// (max_end), and it survives the deletion of the leaf_alloc row. A re-creation of the tag by
// any instance — in another letter case too, as the column's collation matches it — starts
// above it, and a row re-inserted by hand below it is moved up at its next allocation.
func TestMySQLHighWater(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	x, z := fenced(t, dsn), fenced(t, dsn) // two instances
	ctx := context.Background()
	if err := x.Create(ctx, segment.Tag{Name: "r", MaxID: 1, Step: 10}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := x.Allocate(ctx, "r", 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := sqlQuery(t, dsn, "SELECT max_end FROM leafd_fence WHERE biz_tag = 'r'"); got != "21" {
		t.Fatalf("max_end after [1, 11) and [11, 21): got %s, want 21", got)
	}
	start := func(st *MySQLStore, tag string) int64 {
		t.Helper()
		a, err := st.Allocate(ctx, tag, 0)
		if err != nil {
			t.Fatalf("Allocate %s: %v", tag, err)
		}
		return a.MaxID - a.Step
	}
	highWater := func() int64 {
		t.Helper()
		v, err := strconv.ParseInt(sqlQuery(t, dsn, "SELECT max_end FROM leafd_fence WHERE biz_tag = 'r'"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, name := range []string{"r", "R"} {
		hw := highWater()
		sqlExec(t, dsn, "DELETE FROM leaf_alloc WHERE biz_tag = 'r'")
		if err := z.Create(ctx, segment.Tag{Name: name, MaxID: 1, Step: 10}); err != nil {
			t.Fatal(err)
		}
		if m := maxIDOf(t, dsn, name); m < hw { // Create itself starts there, for Leaf's instances too
			t.Fatalf("re-created as %q through another instance: stored max_id %d, below the high-water %d", name, m, hw)
		}
		if s := start(z, name); s < hw {
			t.Fatalf("re-created as %q through another instance: first range starts at %d, below the high-water %d", name, s, hw)
		}
	}
	// Re-inserted by hand (Leaf, a script): the next allocation moves max_id up.
	hw := highWater()
	sqlExec(t, dsn, "DELETE FROM leaf_alloc WHERE biz_tag = 'r'", "INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('r', 1, 10)")
	if s := start(x, "r"); s < hw {
		t.Fatalf("row re-inserted by hand at 1: first range starts at %d, below the high-water %d", s, hw)
	}

	// An existing leafd_fence of an earlier version (no max_end) is upgraded at open; its
	// old rows start at 0 and take the high-water at their next allocation.
	sqlExec(t, dsn, "ALTER TABLE leafd_fence DROP COLUMN max_end")
	y := fenced(t, dsn)
	a, err := y.Allocate(ctx, "r", 0)
	if err != nil {
		t.Fatalf("Allocate after the upgrade: %v", err)
	}
	if got := sqlQuery(t, dsn, "SELECT max_end FROM leafd_fence WHERE biz_tag = 'r'"); got != strconv.FormatInt(a.MaxID, 10) {
		t.Fatalf("max_end after the upgrade and one allocation: got %s, want %d", got, a.MaxID)
	}
}

// TestMySQLHighWaterBinaryCollation: under a binary collation "bk" and "BK" are two tags with
// two rows and two fence rows: each has its own high-water, and neither moves the other.
func TestMySQLHighWaterBinaryCollation(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	sqlExec(t, dsn, "ALTER DATABASE CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	s := fenced(t, dsn)
	ctx := context.Background()
	for _, n := range []string{"bk", "BK"} {
		if err := s.Create(ctx, segment.Tag{Name: n, MaxID: 1, Step: 10}); err != nil {
			t.Fatalf("Create %s: %v", n, err)
		}
	}
	for range 3 {
		if _, err := s.Allocate(ctx, "bk", 0); err != nil {
			t.Fatal(err)
		}
	}
	if a, err := s.Allocate(ctx, "BK", 0); err != nil || a.MaxID != 11 {
		t.Fatalf("first allocation of BK beside bk: got %+v, %v, want max_id 11", a, err)
	}
}
