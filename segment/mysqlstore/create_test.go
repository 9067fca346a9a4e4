package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// holdCreations blocks s's creation committer in its transaction (a test transaction holds
// the database fence row that every creation locks), then lets the caller queue creations:
// queued(n) returns once n wait, release lets the held one and then those n run, the n in one
// batch. The held creation (of the tag held) runs alone.
func holdCreations(t *testing.T, s *MySQLStore, dsn, held string) (queued func(n int), release func()) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := tx.QueryRowContext(ctx, "SELECT 1 FROM leafd_fence WHERE biz_tag = '' FOR UPDATE").Scan(&one); err != nil {
		t.Fatalf("lock the database fence row: %v", err)
	}
	heldDone := make(chan error, 1)
	go func() { heldDone <- s.Create(ctx, segment.Tag{Name: held, Step: 10}) }()
	waitFor(t, "the held creation taken by the committer", func() bool {
		s.creates.mu.Lock()
		defer s.creates.mu.Unlock()
		return s.creates.running && len(s.creates.queue) == 0
	})
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = tx.Commit()
			if err := <-heldDone; err != nil {
				t.Errorf("held creation: %v", err)
			}
		})
	}
	t.Cleanup(release)
	queued = func(n int) {
		waitFor(t, "the creations queued", func() bool {
			s.creates.mu.Lock()
			defer s.creates.mu.Unlock()
			return len(s.creates.queue) == n
		})
	}
	return queued, release
}

type caResult struct {
	name    string
	a       segment.Alloc
	created bool
	err     error
}

// TestMySQLCreateBatch: creations queued together commit in one transaction; the same new
// tag queued eight times is created once and leases eight distinct ranges; a tag that exists
// and one whose first range would overflow are refused alone, the others created.
func TestMySQLCreateBatch(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := fenced(t, dsn)
	ctx := context.Background()
	if err := s.Create(ctx, segment.Tag{Name: "old", Step: 10}); err != nil {
		t.Fatal(err)
	}
	queued, release := holdCreations(t, s, dsn, "held")
	b0, _, _ := s.CreateBatches()
	out := make(chan caResult, 16)
	ca := func(name string, start int64) {
		go func() {
			a, created, err := s.CreateAllocate(ctx, segment.Tag{Name: name, MaxID: start, Step: 10}, 0, 0)
			out <- caResult{name, a, created, err}
		}()
	}
	for range 8 {
		ca("same", 1)
	}
	ca("n1", 1)
	ca("n2", 100)
	ca("huge", segment.MaxRangeEnd-5)
	createOld := make(chan error, 1)
	go func() { createOld <- s.Create(ctx, segment.Tag{Name: "old", Step: 10}) }()
	queued(12)
	release()

	var sameEnds []int64
	created := map[string]int{}
	for range 11 {
		r := <-out
		switch {
		case r.name == "huge" && (r.err != nil || r.a.MaxID != segment.MaxRangeEnd+5):
			t.Errorf("huge: got %+v, %v; want the range past the largest ID, for the loader to refuse", r.a, r.err)
		case r.err != nil:
			t.Fatalf("%s: %v", r.name, r.err)
		case r.name == "same":
			sameEnds = append(sameEnds, r.a.MaxID)
		case r.name == "n1" && r.a.MaxID != 11, r.name == "n2" && r.a.MaxID != 110:
			t.Errorf("%s: first range ends at %d, want its START + 10", r.name, r.a.MaxID)
		}
		if r.created {
			created[r.name]++
		}
	}
	if err := <-createOld; !errors.Is(err, segment.ErrTagExists) {
		t.Errorf("Create of an existing tag in the batch: got %v, want TAGEXISTS", err)
	}
	if created["same"] != 1 || created["n1"] != 1 || created["n2"] != 1 || created["huge"] != 1 {
		t.Errorf("created %v, want same, n1, n2 and huge once each", created)
	}
	sort.Slice(sameEnds, func(i, j int) bool { return sameEnds[i] < sameEnds[j] })
	for i, e := range sameEnds {
		if want := int64(11 + 10*i); e != want {
			t.Fatalf("ranges of 'same' end at %v, want 11, 21, ... 81 (distinct)", sameEnds)
		}
	}
	if b1, _, _ := s.CreateBatches(); b1-b0 < 1 {
		t.Errorf("no creation batch committed")
	}
	// Each created tag carries its fence row with its first range as high-water.
	if got := sqlQuery(t, dsn, "SELECT max_end FROM leafd_fence WHERE biz_tag = 'n2'"); got != "110" {
		t.Errorf("n2's high-water: %s, want 110", got)
	}
}

// TestMySQLCreateBatchFallsBack: a batch that meets a shaped name or a tag created again (its
// high-water in leafd_fence) is decided one creation at a time: the shaped one refused, the
// re-created one above its high-water, the others created.
func TestMySQLCreateBatchFallsBack(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := fenced(t, dsn)
	ctx := context.Background()
	if err := s.CreateShape(ctx, "shaped", []byte(`{"format":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, segment.Tag{Name: "again", Step: 10}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Allocate(ctx, "again", 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteTag(ctx, "again"); err != nil { // high-water 31 stays
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, bad string }{{"shape", "shaped"}, {"high-water", "again"}} {
		t.Run(tc.name, func(t *testing.T) {
			queued, release := holdCreations(t, s, dsn, "held-"+tc.name)
			_, _, solo0 := s.CreateBatches()
			out := make(chan caResult, 3)
			for _, name := range []string{tc.bad, "ok-" + tc.name + "-1", "ok-" + tc.name + "-2"} {
				go func() {
					a, created, err := s.CreateAllocate(ctx, segment.Tag{Name: name, MaxID: 1, Step: 10}, 0, 0)
					out <- caResult{name, a, created, err}
				}()
			}
			queued(3)
			release()
			for range 3 {
				r := <-out
				switch {
				case r.name == "shaped":
					if !errors.Is(r.err, segment.ErrShaped) {
						t.Errorf("shaped: got %v, want SHAPED", r.err)
					}
				case r.err != nil:
					t.Errorf("%s: %v", r.name, r.err)
				case r.name == "again" && r.a.MaxID-10 < 31:
					t.Errorf("again: first range [%d, %d) starts below its high-water 31", r.a.MaxID-10, r.a.MaxID)
				case r.name != "again" && r.a.MaxID != 11:
					t.Errorf("%s: first range ends at %d, want 11", r.name, r.a.MaxID)
				}
			}
			if _, _, solo1 := s.CreateBatches(); solo1-solo0 != 4 {
				t.Errorf("%d creations ran alone, want 4 (the held one and the 3 of the batch)", solo1-solo0)
			}
		})
	}
	if got := sqlQuery(t, dsn, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = 'shaped'"); got != "0" {
		t.Errorf("plain rows of the shaped name: %s, want 0", got)
	}
}

// TestMySQLCreateBatchOrdered: ORDERED creations queued together are each recorded as ordered
// (their leafd_leader row, written by the single creation's transaction): the batch does not
// take them. Mutant: ordered creations left in the batch: caught (no leafd_leader rows).
func TestMySQLCreateBatchOrdered(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := fenced(t, dsn)
	ctx := context.Background()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	// The table package ordered creates at leafd's start (only biz_tag matters here).
	if _, err := db.ExecContext(ctx, "CREATE TABLE leafd_leader (biz_tag VARCHAR(128) NOT NULL PRIMARY KEY, server_id bigint NOT NULL DEFAULT 0)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, segment.Tag{Name: "first", Step: 10}); err != nil {
		t.Fatal(err)
	}
	queued, release := holdCreations(t, s, dsn, "held")
	errs := make(chan error, 6)
	for i := range 6 {
		go func() { errs <- s.Create(ctx, segment.Tag{Name: fmt.Sprintf("o%d", i), Step: 10, Ordered: true}) }()
	}
	queued(6)
	release()
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM leafd_leader WHERE biz_tag LIKE 'o%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Fatalf("%d of 6 ORDERED tags created together have their leafd_leader row", n)
	}
}
