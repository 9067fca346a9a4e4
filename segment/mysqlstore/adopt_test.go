package mysqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// TestMySQLNotAdopted: with the fence on, a row without a fence row (Leaf's, inserted by hand,
// or one whose adoption a failover lost) is refused with ErrNotAdopted and max_id never moves:
// no jump is ever computed from the row alone, so none can be computed twice.
func TestMySQLNotAdopted(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	sqlExec(t, dsn, leafDDL, "INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('h', 1000, 20)")
	s := fenced(t, dsn)
	ctx := context.Background()
	for range 3 {
		_, err := s.Allocate(ctx, "h", 0)
		var te *segment.TagError
		if !errors.Is(err, segment.ErrNotAdopted) || !errors.As(err, &te) || te.Tag != "h" {
			t.Fatalf("allocation of a fence-less row: got %v, want ErrNotAdopted naming the tag", err)
		}
		if _, err := s.AllocateAbove(ctx, "h", 0, 5000); !errors.Is(err, segment.ErrNotAdopted) {
			t.Fatalf("allocation above a floor of a fence-less row: got %v, want ErrNotAdopted", err)
		}
	}
	if got := maxIDOf(t, dsn, "h"); got != 1000 {
		t.Fatalf("max_id after refusals: got %d, want 1000 (never moved)", got)
	}
	if got := sqlQuery(t, dsn, "SELECT COUNT(*) FROM leafd_fence WHERE biz_tag = 'h'"); got != "0" {
		t.Fatalf("fence rows of h after refusals: got %s, want 0 (nothing taken over)", got)
	}
	// The readiness probe of a tag not held (CheckTag) says the same, and moves nothing.
	if err := s.CheckTag(ctx, "h"); !errors.Is(err, segment.ErrNotAdopted) {
		t.Fatalf("CheckTag of a fence-less row: got %v, want ErrNotAdopted", err)
	}
	if err := s.CheckTag(ctx, "nope"); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("CheckTag of a missing row: got %v, want ErrUnknownTag", err)
	}
	// A fenced tag whose fence row was lost (a failover that lost its adoption) is the same.
	if err := s.Create(ctx, segment.Tag{Name: "c", Step: 10}); err != nil {
		t.Fatal(err)
	}
	sqlExec(t, dsn, "DELETE FROM leafd_fence WHERE biz_tag = 'c'")
	if _, err := s.Allocate(ctx, "c", 0); !errors.Is(err, segment.ErrNotAdopted) {
		t.Fatalf("fence row lost: got %v, want ErrNotAdopted", err)
	}
}

// TestMySQLAdopt: adoption writes the fence rows of the tags that have none and moves nothing,
// so each continues at max_id as Leaf would ([max_id, max_id + step)); a dry run writes
// nothing; a tag below an instance's mark (the floors) is refused; a tag created by leafd is
// left as it is; a second run changes nothing.
func TestMySQLAdopt(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	// Leaf's table as Leaf left it: no leafd table at all.
	sqlExec(t, dsn, leafDDL,
		"INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('order', 5000001, 2000)",
		"INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('invoice', 1, 1000)",
		"INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('behind', 300, 10)")
	ctx := context.Background()
	dry := openTestMySQL(t, dsn, func(c *MySQLConfig) { c.FailoverAllocs, c.MaxStep, c.CreateTable = 3, 50, false })
	res, err := dry.Adopt(ctx, AdoptConfig{DryRun: true})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if got := states(res); got != "behind=would adopt invoice=would adopt order=would adopt" {
		t.Fatalf("dry run: got %s", got)
	}
	if res, err = dry.Adopt(ctx, AdoptConfig{DryRun: true, Floors: map[string]int64{"behind": 400}}); err != nil || states(res) != "behind=refused invoice=would adopt order=would adopt" {
		t.Fatalf("dry run below a mark: got %s, %v, want behind refused", states(res), err)
	}
	// An instance reports its mark under its clients' spelling; the row's may differ (the
	// default collation serves `Behind` from `behind`): the floor still counts.
	if res, err = dry.Adopt(ctx, AdoptConfig{DryRun: true, Floors: map[string]int64{"Behind": 400}}); err != nil || states(res) != "behind=refused invoice=would adopt order=would adopt" {
		t.Fatalf("dry run below a mark reported as Behind: got %s, %v, want behind refused", states(res), err)
	}
	if got := sqlQuery(t, dsn, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leafd_fence'"); got != "0" {
		t.Fatalf("dry run created leafd_fence (%s tables)", got)
	}

	s := openTestMySQL(t, dsn, func(c *MySQLConfig) { c.FailoverAllocs, c.MaxStep, c.CreateTable = 3, 50, false })
	res, err = s.Adopt(ctx, AdoptConfig{Floors: map[string]int64{"behind": 400, "order": 5000001}})
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	if got := states(res); got != "behind=refused invoice=adopted order=adopted" {
		t.Fatalf("Adopt: got %s", got)
	}
	for _, a := range res {
		if a.Tag == "behind" && (a.Err == nil || !strings.Contains(a.Err.Error(), "raise-max-id")) {
			t.Fatalf("refused tag: error %v, want it to name raise-max-id", a.Err)
		}
	}
	if err := s.CheckTag(ctx, "order"); err != nil {
		t.Fatalf("CheckTag of an adopted row: %v", err)
	}
	for tag, want := range map[string]int64{"order": 5000001 + 2000, "invoice": 1 + 1000} {
		if a, err := s.Allocate(ctx, tag, 0); err != nil || a.MaxID != want {
			t.Fatalf("first allocation of adopted %s: got %+v, %v, want max_id %d (range from max_id, no jump)", tag, a, err, want)
		}
	}
	if _, err := s.Allocate(ctx, "behind", 0); !errors.Is(err, segment.ErrNotAdopted) {
		t.Fatalf("refused tag: got %v, want ErrNotAdopted", err)
	}
	// The database row exists (epoch 1): a tag created after the adoption starts at START.
	if err := s.Create(ctx, segment.Tag{Name: "fresh", MaxID: 7, Step: 10}); err != nil {
		t.Fatal(err)
	}
	if got := maxIDOf(t, dsn, "fresh"); got != 7 {
		t.Fatalf("tag created after the adoption: max_id %d, want 7 (no failover seen)", got)
	}
	// Once raised above the floor, the tag is adopted; a second run changes nothing else.
	sqlExec(t, dsn, "UPDATE leaf_alloc SET max_id = 400 WHERE biz_tag = 'behind'")
	res, err = s.Adopt(ctx, AdoptConfig{Floors: map[string]int64{"behind": 400}})
	if err != nil {
		t.Fatal(err)
	}
	if got := states(res); got != "behind=adopted fresh=already adopted invoice=already adopted order=already adopted" {
		t.Fatalf("second Adopt: got %s", got)
	}
	if a, err := s.Allocate(ctx, "behind", 0); err != nil || a.MaxID != 410 {
		t.Fatalf("behind after raise and adopt: got %+v, %v, want max_id 410", a, err)
	}
	// A failover after the adoption (the fence row names another server): the usual
	// takeover, one gap.
	sqlExec(t, dsn, "UPDATE leafd_fence SET server_id = server_id + 1000 WHERE biz_tag = 'invoice'")
	if a, err := s.Allocate(ctx, "invoice", 0); err != nil || a.MaxID != 1001+3*1000+1000 {
		t.Fatalf("takeover of an adopted tag: got %+v, %v, want max_id %d (one gap of 3 × the stored step)", a, err, 1001+3*1000+1000)
	}
	off := openTestMySQL(t, dsn, func(c *MySQLConfig) { c.FailoverAllocs = 0 })
	if _, err := off.Adopt(ctx, AdoptConfig{}); err == nil {
		t.Fatal("Adopt with the fence off: want an error")
	}
}

func states(res []Adoption) string {
	var b []string
	for _, a := range res {
		b = append(b, a.Tag+"="+a.State)
	}
	return strings.Join(b, " ")
}

// TestMySQLAdoptReplicaRefused: adopting a replica by mistake is refused (it replicates from
// the primary; SHOW REPLICA STATUS has a row), and so is a read-only server; nothing is written.
func TestMySQLAdoptReplicaRefused(t *testing.T) {
	r := testenv.StartReplication(t)
	r.Primary.Exec("CREATE DATABASE leafd", "CREATE TABLE leafd.leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', max_id bigint NOT NULL DEFAULT 1, step int NOT NULL, description varchar(256) DEFAULT NULL, update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (biz_tag))",
		"INSERT INTO leafd.leaf_alloc(biz_tag, max_id, step) VALUES ('order', 100, 10)")
	r.WaitCaughtUp(30 * time.Second)
	r.StopApplier() // lagging
	ctx := context.Background()
	rs := openTestMySQL(t, r.Replica.DSN("leafd"), func(c *MySQLConfig) { c.FailoverAllocs, c.CreateTable = 3, false })
	if _, err := rs.Adopt(ctx, AdoptConfig{}); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("Adopt on a replica: got %v, want ErrNotPrimary", err)
	}
	if got := r.Replica.QueryString("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'leafd' AND TABLE_NAME = 'leafd_fence'"); got != "0" {
		t.Fatalf("refused adoption created leafd_fence on the replica")
	}
	// A replica of a MariaDB named connection has no row in SHOW REPLICA STATUS (adopting
	// one would give duplicates after a failover to it).
	_, port, _ := strings.Cut(r.Primary.Addr(), ":")
	r.Replica.Exec("STOP ALL SLAVES", "RESET SLAVE ALL",
		"CHANGE MASTER 'm1' TO MASTER_HOST='127.0.0.1', MASTER_PORT="+port+", MASTER_USER='root', MASTER_PASSWORD='', MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=slave_pos",
		"START SLAVE 'm1'")
	if got := r.Replica.QueryString("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'leafd' AND TABLE_NAME = 'leafd_fence'"); got != "0" {
		t.Fatalf("leafd_fence exists on the replica before the named-connection check")
	}
	if _, err := rs.Adopt(ctx, AdoptConfig{}); !errors.Is(err, ErrNotPrimary) || !strings.Contains(err.Error(), "replicates from") {
		t.Fatalf("Adopt on a replica of a named connection: got %v, want ErrNotPrimary (replicates from)", err)
	}
	r.Primary.Exec("SET GLOBAL read_only = ON")
	ps := openTestMySQL(t, r.Primary.DSN("leafd"), func(c *MySQLConfig) { c.FailoverAllocs, c.CreateTable = 3, false })
	if _, err := ps.Adopt(ctx, AdoptConfig{}); !errors.Is(err, ErrNotPrimary) || !strings.Contains(err.Error(), "read_only") {
		t.Fatalf("Adopt on a read-only server: got %v, want ErrNotPrimary (read_only)", err)
	}
	r.Primary.Exec("SET GLOBAL read_only = OFF")
	if res, err := ps.Adopt(ctx, AdoptConfig{}); err != nil || states(res) != "order=adopted" {
		t.Fatalf("Adopt on the primary: got %s, %v", states(res), err)
	}
}

// TestMySQLFirstUseManyInstances: 30 new tags, 8 simultaneous first requests each, spread
// over 4 instances (stores with their own pools, auto-create on), on one database: every
// request gets an ID. Creation and allocation lock leaf_alloc and leafd_fence in different
// orders (Create must lock the database row first); the deadlocks the server resolves by
// rolling one transaction back are run again (retryDeadlock), bounded.
func TestMySQLFirstUseManyInstances(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	var gens []*segment.Generator
	var stores []*MySQLStore
	for range 4 {
		st := openTestMySQL(t, dsn, nil)
		stores = append(stores, st)
		cfg := segment.Config{AutoCreate: true, DefaultStep: 100, WaitTimeout: 5 * time.Second, LoadTimeout: 5 * time.Second}
		gens = append(gens, newTestGen(t, cfg, st, newFakeMarks()))
	}
	const tags, per = 30, 8
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		seen  = map[int64]string{}
		fails []string
		start = make(chan struct{})
	)
	for i := range tags {
		tag := fmt.Sprintf("new%02d", i)
		for j := range per {
			wg.Go(func() {
				<-start
				id, err := gens[(i+j)%4].Next(tag)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					fails = append(fails, tag+": "+err.Error())
					return
				}
				key := id<<8 | int64(i)
				if prev, ok := seen[key]; ok {
					fails = append(fails, fmt.Sprintf("%s: ID %d twice (%s)", tag, id, prev))
				}
				seen[key] = tag
			})
		}
	}
	close(start)
	wg.Wait()
	var retried uint64
	for _, st := range stores {
		retried += st.Deadlocks()
	}
	t.Logf("%d replies, %d failed; deadlock victims run again: %d", tags*per, len(fails), retried)
	if len(fails) > 0 {
		t.Fatalf("%d of %d first requests failed, e.g. %s", len(fails), tags*per, fails[0])
	}
	// One lock order (leaf_alloc row, then fence row, in Create as in the allocation): no
	// deadlock at all, not only none left after the retries.
	if retried > 0 {
		t.Fatalf("%d deadlock victims: Create and the allocation lock in different orders", retried)
	}
}

// TestRetryDeadlock: a transaction the server rolled back as a deadlock victim (1213) runs
// again, at most deadlockRetries times in all and never past its context; any other error
// ends it at once.
func TestRetryDeadlock(t *testing.T) {
	s := &MySQLStore{log: zap.NewNop()}
	deadlock := &mysql.MySQLError{Number: mysqlErrDeadlock, Message: "Deadlock found"}
	calls := 0
	err := s.retryDeadlock(context.Background(), "t", "x", func(context.Context) error {
		calls++
		if calls < 3 {
			return deadlock
		}
		return nil
	})
	if err != nil || calls != 3 || s.Deadlocks() != 2 {
		t.Fatalf("two deadlocks then success: got %v after %d calls (%d counted), want nil after 3 (2)", err, calls, s.Deadlocks())
	}
	calls = 0
	bounded, stop := context.WithTimeout(context.Background(), 2*time.Second) // an unbounded retry ends here, not in a hang
	defer stop()
	err = s.retryDeadlock(bounded, "t", "x", func(context.Context) error { calls++; return deadlock })
	if !errors.Is(err, deadlock) || calls != deadlockRetries {
		t.Fatalf("always a deadlock: got %v after %d calls, want the deadlock after %d (bounded)", err, calls, deadlockRetries)
	}
	calls = 0
	other := errors.New("boom")
	if err := s.retryDeadlock(context.Background(), "t", "x", func(context.Context) error { calls++; return other }); err != other || calls != 1 {
		t.Fatalf("another error: got %v after %d calls, want it after 1", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	if err := s.retryDeadlock(ctx, "t", "x", func(context.Context) error { calls++; return deadlock }); !errors.Is(err, deadlock) || calls != 1 {
		t.Fatalf("context done: got %v after %d calls, want the deadlock after 1", err, calls)
	}
}
