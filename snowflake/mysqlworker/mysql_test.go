package mysqlworker

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/snowflake"
)

func sqlFixture(t *testing.T) (string, *sqlStore) {
	t.Helper()
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	st, err := openSQL(dsn, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dsn, st
}

// TestSQLCompareAndSet: the SQL conditions on MariaDB. Insert is decided by the primary key;
// Take needs the row's version AND a released or expired lease (UTC_TIMESTAMP(3)); the holder's writes
// need its token and epoch.
func TestSQLCompareAndSet(t *testing.T) {
	_, st := sqlFixture(t)
	ctx := context.Background()
	c := claim{Holder: "a", Token: "ta", Lease: time.Hour}
	if ok, err := st.Insert(ctx, 5, c); !ok || err != nil {
		t.Fatalf("insert: %v %v", ok, err)
	}
	if ok, err := st.Insert(ctx, 5, claim{Token: "tb", Lease: time.Hour}); ok || err != nil {
		t.Fatalf("second insert of id 5: ok=%v err=%v, want refused by the primary key", ok, err)
	}
	r, _, err := st.Get(ctx, 5)
	if err != nil || r.Free || r.Epoch != 1 || r.Version != 1 {
		t.Fatalf("row %+v %v", r, err)
	}
	if ok, _ := st.Take(ctx, 5, r.Version, claim{Token: "tb", Lease: time.Hour}); ok {
		t.Fatal("Take of a row with a live lease succeeded")
	}
	if ok, _ := st.Renew(ctx, 5, r.Epoch, "wrong", 100, time.Hour); ok {
		t.Fatal("Renew with another token succeeded")
	}
	if ok, _ := st.Renew(ctx, 5, r.Epoch+1, "ta", 100, time.Hour); ok {
		t.Fatal("Renew with another epoch succeeded")
	}
	if ok, err := st.Renew(ctx, 5, r.Epoch, "ta", 100, time.Millisecond); !ok || err != nil {
		t.Fatalf("holder's renewal: %v %v", ok, err)
	}
	time.Sleep(20 * time.Millisecond) // the 1ms lease expires on the database's clock
	r, _, _ = st.Get(ctx, 5)
	if !r.Free || r.ReservedUntil != 100 || r.Version != 2 {
		t.Fatalf("after an expired renewal: %+v", r)
	}
	if ok, _ := st.Take(ctx, 5, r.Version-1, claim{Token: "tb", Lease: time.Hour}); ok {
		t.Fatal("Take with a stale version succeeded")
	}
	if ok, err := st.Take(ctx, 5, r.Version, claim{Token: "tb", Lease: time.Hour}); !ok || err != nil {
		t.Fatalf("Take of the expired row: %v %v", ok, err)
	}
	if ok, _ := st.Renew(ctx, 5, r.Epoch, "ta", 200, time.Hour); ok {
		t.Fatal("the old holder renewed after the takeover")
	}
	r2, _, _ := st.Get(ctx, 5)
	if r2.Epoch != r.Epoch+1 || r2.Token != "tb" || r2.ReservedUntil != 100 {
		t.Fatalf("after the takeover: %+v", r2)
	}
	if ok, _ := st.Release(ctx, 5, r2.Epoch, "tb", 50); !ok {
		t.Fatal("release")
	}
	r3, _, _ := st.Get(ctx, 5)
	if !r3.Free || r3.ReservedUntil != 100 {
		t.Fatalf("released row %+v: want free, bound kept at 100", r3)
	}
}

// TestSQLRace: eight sources acquire at once on MariaDB: eight distinct ids.
func TestSQLRace(t *testing.T) {
	dsn, _ := sqlFixture(t)
	var srcs []*Source
	for range 8 {
		s, err := NewSource(Config{DSN: dsn, DataDir: t.TempDir(), Lease: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		srcs = append(srcs, s)
	}
	ids := make([]int64, len(srcs))
	var wg sync.WaitGroup
	for i, s := range srcs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for {
				w, err := s.Acquire(ctx)
				if err == nil {
					ids[i] = w.ID
					return
				}
				if ctx.Err() != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("two sources got worker id %d: %v", id, ids)
		}
		seen[id] = true
	}
}

// TestGeneratorsOnMariaDB: two generators on one database serve with distinct worker ids after
// the taker's wait, and a clean Close releases the row for the next one.
func TestGeneratorsOnMariaDB(t *testing.T) {
	dsn, st := sqlFixture(t)
	cfg := snowflake.Config{LeaseWindow: 500 * time.Millisecond, MaxStartWait: 5 * time.Second}
	var gens []*snowflake.Generator
	for range 2 {
		src, err := NewSource(Config{DSN: dsn, DataDir: t.TempDir(), Lease: time.Second, Margin: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		g, err := snowflake.New(cfg, src, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		gens = append(gens, g)
	}
	workers := map[int64]bool{}
	for _, g := range gens {
		deadline := time.Now().Add(5 * time.Second)
		var id int64
		var err error
		for id, err = g.Next(); err != nil && time.Now().Before(deadline); id, err = g.Next() {
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		workers[g.Decode(id).WorkerID] = true
	}
	if len(workers) != 2 {
		t.Fatalf("worker ids %v, want 2 distinct", workers)
	}
	if err := gens[0].Close(); err != nil {
		t.Fatal(err)
	}
	rows, _ := st.List(context.Background())
	free := 0
	for _, r := range rows {
		if r.Free {
			free++
		}
	}
	if free != 1 {
		t.Fatalf("after one Close: %d free rows, want 1 (%+v)", free, rows)
	}
}

// TestRenewalGoroutine: with no Extend at all (a taker waiting out its wait), the source's own
// goroutine keeps the lease: renewals accumulate and the lease never lapses.
func TestRenewalGoroutine(t *testing.T) {
	dsn, st := sqlFixture(t)
	s, err := NewSource(Config{DSN: dsn, DataDir: t.TempDir(), Lease: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Status().Renewals < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := s.Status(); got.Renewals < 5 || got.SelfFences != 0 || got.Acquisitions != 1 {
		t.Fatalf("after 5 lease thirds: %+v; want renewals, no self-fence, one acquisition", got)
	}
	r, _, _ := st.Get(context.Background(), 0)
	if r.Free {
		t.Fatalf("row free while renewed: %+v", r)
	}
}
