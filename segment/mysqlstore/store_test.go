package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// leafDDL is the table definition from Leaf's README, verbatim.
const leafDDL = "CREATE TABLE `leaf_alloc` (\n" +
	"  `biz_tag` varchar(128)  NOT NULL DEFAULT '',\n" +
	"  `max_id` bigint(20) NOT NULL DEFAULT '1',\n" +
	"  `step` int(11) NOT NULL,\n" +
	"  `description` varchar(256)  DEFAULT NULL,\n" +
	"  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB"

func openTestMySQL(t *testing.T, dsn string, mutate func(*MySQLConfig)) *MySQLStore {
	t.Helper()
	cfg := DefaultMySQLConfig()
	cfg.DSN = dsn
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := OpenMySQL(context.Background(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("OpenMySQL: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// sqlExec runs statements directly, outside the store.
func sqlExec(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, st := range stmts {
		if _, err := db.ExecContext(ctx, st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
}

func sqlQuery(t *testing.T, dsn, q string) string {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("sql.Open: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var s sql.NullString
	if err := db.QueryRowContext(ctx, q).Scan(&s); err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("%s: %v", q, err)
	}
	return s.String
}

func TestMySQLConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     MySQLConfig
		wantErr string
	}{
		{name: "defaults with DSN", cfg: MySQLConfig{DSN: "u:p@tcp(db:3306)/leaf"}},
		{name: "empty DSN", cfg: MySQLConfig{}, wantErr: "DSN is empty"},
		{name: "bad DSN", cfg: MySQLConfig{DSN: "not a dsn"}, wantErr: "DSN"},
		{name: "negative conns", cfg: MySQLConfig{DSN: "u@/x", MaxOpenConns: -1}, wantErr: "MaxOpenConns"},
		{name: "negative timeout", cfg: MySQLConfig{DSN: "u@/x", QueryTimeout: -time.Second}, wantErr: "QueryTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("got %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
	d := DefaultMySQLConfig()
	if d.MaxOpenConns != 8 || d.QueryTimeout != 3*time.Second || !d.CreateTable {
		t.Fatalf("DefaultMySQLConfig: got %+v", d)
	}
}

// TestMySQLDriverConfig: leafd's driver defaults apply where the DSN is silent, and the DSN
// wins where it speaks (interpolateParams halves a far database's allocation round trips).
func TestMySQLDriverConfig(t *testing.T) {
	for _, tt := range []struct {
		dsn         string
		interpolate bool
		wait        string
		read        time.Duration
	}{
		{"u:p@tcp(db:3306)/leaf", true, "6", 3 * time.Second},
		{"u:p?x@tcp(db:3306)/leaf", true, "6", 3 * time.Second}, // a '?' in the password is not the parameters'
		{"u:p@tcp(db:3306)/leaf?interpolateParams=false", false, "6", 3 * time.Second},
		{"u:p@tcp(db:3306)/leaf?parseTime=true&interpolateParams=true&wait_timeout=60&readTimeout=1s", true, "60", time.Second},
	} {
		cfg := DefaultMySQLConfig()
		cfg.DSN = tt.dsn
		d, err := driverConfig(cfg.withDefaults())
		if err != nil {
			t.Fatalf("%s: %v", tt.dsn, err)
		}
		if d.InterpolateParams != tt.interpolate || d.Params["wait_timeout"] != tt.wait || d.ReadTimeout != tt.read {
			t.Errorf("%s: interpolateParams %v, wait_timeout %q, readTimeout %v; want %v, %q, %v",
				tt.dsn, d.InterpolateParams, d.Params["wait_timeout"], d.ReadTimeout, tt.interpolate, tt.wait, tt.read)
		}
	}
}

func TestMySQLCreatesTable(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := openTestMySQL(t, dsn, nil)
	got := sqlQuery(t, dsn, "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = 'leaf_alloc'")
	if got != "5" {
		t.Fatalf("leaf_alloc has %s columns, want 5", got)
	}
	ctx := context.Background()
	if err := s.Create(ctx, segment.Tag{Name: "t", Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if a, err := s.Allocate(ctx, "t", 0); err != nil || a != (segment.Alloc{MaxID: 11, Step: 10}) {
		t.Fatalf("Allocate: got %+v, %v, want {11 10}", a, err)
	}
	// Opening again on an existing table is fine.
	openTestMySQL(t, dsn, nil)

	// A table that disappears is created again: the call that finds it missing fails, the
	// next one recreates it.
	sqlExec(t, dsn, "DROP TABLE leaf_alloc")
	if _, err := s.Allocate(ctx, "t", 0); err == nil {
		t.Fatal("Allocate on a dropped table succeeded")
	}
	if err := s.Create(ctx, segment.Tag{Name: "t", Step: 10}); err != nil {
		t.Fatalf("Create after the table was dropped: %v", err)
	}
}

func TestMySQLLeafTable(t *testing.T) {
	for _, create := range []bool{true, false} {
		name := "CreateTable off"
		if create {
			name = "CreateTable on"
		}
		t.Run(name, func(t *testing.T) {
			dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
			sqlExec(t, dsn, leafDDL,
				"INSERT INTO leaf_alloc(biz_tag, max_id, step, description) VALUES('leaf-segment-test', 1, 2000, 'Test leaf Segment Mode Get Id')")
			// Leaf's exact ranges: the failover fence off (with it, a row without a fence row
			// takes the gap first; TestMySQLFenceHandInserted).
			s := openTestMySQL(t, dsn, func(c *MySQLConfig) { c.CreateTable, c.FailoverAllocs = create, 0 })
			ctx := context.Background()
			tags, err := s.Tags(ctx)
			if err != nil || !slices.Equal(tags, []string{"leaf-segment-test"}) {
				t.Fatalf("Tags: got %q, %v, want [leaf-segment-test]", tags, err)
			}
			if a, err := s.Allocate(ctx, "leaf-segment-test", 0); err != nil || a != (segment.Alloc{MaxID: 2001, Step: 2000}) {
				t.Fatalf("Allocate: got %+v, %v, want {2001 2000}", a, err)
			}
			if a, err := s.Allocate(ctx, "leaf-segment-test", 4000); err != nil || a != (segment.Alloc{MaxID: 6001, Step: 2000}) {
				t.Fatalf("Allocate custom step: got %+v, %v, want {6001 2000}", a, err)
			}
			if got := sqlQuery(t, dsn, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'leaf-segment-test'"); got != "6001" {
				t.Fatalf("max_id in the table: got %s, want 6001", got)
			}
		})
	}
}

func TestMySQLAllocateSequence(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := openTestMySQL(t, dsn, nil)
	ctx := context.Background()
	if err := s.Create(ctx, segment.Tag{Name: "order", MaxID: 1, Step: 1000, Description: "orders"}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	tests := []struct {
		name string
		step int64
		want segment.Alloc
	}{
		{name: "stored step", step: 0, want: segment.Alloc{MaxID: 1001, Step: 1000}},
		{name: "stored step again", step: -1, want: segment.Alloc{MaxID: 2001, Step: 1000}},
		{name: "custom step", step: 5000, want: segment.Alloc{MaxID: 7001, Step: 1000}},
		{name: "custom step above int(11)", step: math.MaxInt32 + 1, want: segment.Alloc{MaxID: 7001 + math.MaxInt32 + 1, Step: 1000}},
		{name: "back to stored", step: 0, want: segment.Alloc{MaxID: 8001 + math.MaxInt32 + 1, Step: 1000}},
	}
	for _, tt := range tests {
		got, err := s.Allocate(ctx, "order", tt.step)
		if err != nil {
			t.Fatalf("%s: Allocate: %v", tt.name, err)
		}
		if got != tt.want {
			t.Fatalf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
	if got := sqlQuery(t, dsn, "SELECT description FROM leaf_alloc WHERE biz_tag = 'order'"); got != "orders" {
		t.Fatalf("description: got %q, want orders", got)
	}
}

func TestMySQLErrors(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := openTestMySQL(t, dsn, func(c *MySQLConfig) { c.FailoverAllocs = 0 }) // exact max_id values below
	ctx := context.Background()
	if err := s.Create(ctx, segment.Tag{Name: "a", Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	sqlExec(t, dsn,
		"INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('big', 9223372036854775800, 5)",
		"INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('zero-step', 1, 0)",
		"INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES ('negative-step', 100, -10)")

	if _, err := s.Allocate(ctx, "big", 0); err != nil {
		t.Fatalf("Allocate big: %v", err)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{name: "unknown tag", call: func() error { _, err := s.Allocate(ctx, "missing", 0); return err }, want: segment.ErrUnknownTag},
		{name: "unknown tag custom step", call: func() error { _, err := s.Allocate(ctx, "missing", 5); return err }, want: segment.ErrUnknownTag},
		{name: "tag exists", call: func() error { return s.Create(ctx, segment.Tag{Name: "a", Step: 1}) }, want: segment.ErrTagExists},
		{name: "invalid name", call: func() error { return s.Create(ctx, segment.Tag{Name: "a b", Step: 1}) }, want: segment.ErrInvalidTag},
		{name: "zero step", call: func() error { return s.Create(ctx, segment.Tag{Name: "b", Step: 0}) }, want: segment.ErrLimit},
		{name: "max_id overflow", call: func() error { _, err := s.Allocate(ctx, "big", 0); return err }, want: segment.ErrLimit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	// A stored step that would not advance max_id is an error, and nothing is changed.
	for _, tag := range []string{"zero-step", "negative-step"} {
		if a, err := s.Allocate(ctx, tag, 0); err == nil || errors.Is(err, segment.ErrUnknownTag) {
			t.Fatalf("Allocate %s: got %+v, %v, want an invalid-step error", tag, a, err)
		}
	}
	if got := sqlQuery(t, dsn, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'negative-step'"); got != "100" {
		t.Fatalf("negative-step max_id: got %s, want 100 (rolled back)", got)
	}
	// A custom step still works on such a row.
	if a, err := s.Allocate(ctx, "zero-step", 7); err != nil || a != (segment.Alloc{MaxID: 8, Step: 0}) {
		t.Fatalf("Allocate zero-step with step 7: got %+v, %v, want {8 0}", a, err)
	}
	tags, err := s.Tags(ctx)
	if err != nil || !slices.Equal(tags, []string{"a", "big", "negative-step", "zero-step"}) {
		t.Fatalf("Tags: got %q, %v", tags, err)
	}
}

// TestMySQLConcurrentInstances allocates on one tag from 8 goroutines spread over two
// stores (two connection pools, like two leafd instances): the ranges must be disjoint and,
// together, cover exactly what max_id advanced by.
func TestMySQLConcurrentInstances(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	stores := []*MySQLStore{openTestMySQL(t, dsn, nil), openTestMySQL(t, dsn, nil)}
	ctx := context.Background()
	if err := stores[0].Create(ctx, segment.Tag{Name: "hot", MaxID: 1, Step: 100}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	const goroutines, perG = 8, 60
	type span struct{ lo, hi int64 }
	var (
		mu    sync.Mutex
		spans []span
		wg    sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			s := stores[g%2]
			for i := range perG {
				step := int64(0)
				if i%4 == g%4 {
					step = int64(1 + (g*perG+i)%37)
				}
				a, err := s.Allocate(ctx, "hot", step)
				if err != nil {
					t.Errorf("Allocate: %v", err)
					return
				}
				if step <= 0 {
					step = a.Step
				}
				mu.Lock()
				spans = append(spans, span{a.MaxID - step, a.MaxID})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.lo - b.lo) })
	next := int64(1)
	for _, sp := range spans {
		if sp.lo != next {
			t.Fatalf("range [%d,%d) follows end %d: overlap or hole", sp.lo, sp.hi, next)
		}
		next = sp.hi
	}
	if got := sqlQuery(t, dsn, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'hot'"); got != strconv.FormatInt(next, 10) {
		t.Fatalf("max_id: got %s, want %d", got, next)
	}
	if len(spans) != goroutines*perG {
		t.Fatalf("got %d ranges, want %d", len(spans), goroutines*perG)
	}
}

// TestMySQLOutage checks that a hung server (SIGSTOP) and a crashed one (SIGKILL) make calls
// fail within about QueryTimeout with an error, never a result, and that the store recovers
// by itself, without reusing IDs.
func TestMySQLOutage(t *testing.T) {
	m := testenv.StartMariaDB(t)
	dsn := testenv.FreshDatabase(t, m.DSN(""))
	const timeout = time.Second
	s := openTestMySQL(t, dsn, func(c *MySQLConfig) { c.QueryTimeout = timeout })
	ctx := context.Background()
	if err := s.Create(ctx, segment.Tag{Name: "t", Step: 10}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	last, err := s.Allocate(ctx, "t", 0)
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}

	calls := []struct {
		name string
		call func() error
	}{
		{name: "Allocate", call: func() error {
			a, err := s.Allocate(ctx, "t", 0)
			if err == nil {
				t.Errorf("Allocate returned %+v during an outage", a)
			}
			return err
		}},
		{name: "Allocate custom step", call: func() error { _, err := s.Allocate(ctx, "t", 3); return err }},
		{name: "Tags", call: func() error { _, err := s.Tags(ctx); return err }},
		{name: "Create", call: func() error { return s.Create(ctx, segment.Tag{Name: "u", Step: 1}) }},
	}
	expectFailures := func(phase string) {
		t.Helper()
		for _, c := range calls {
			start := time.Now()
			err := c.call()
			d := time.Since(start)
			if err == nil {
				t.Fatalf("%s: %s succeeded", phase, c.name)
			}
			if d > timeout+2*time.Second {
				t.Fatalf("%s: %s took %v, want about QueryTimeout %v", phase, c.name, d, timeout)
			}
			t.Logf("%s: %s failed after %v: %v", phase, c.name, d.Round(time.Millisecond), err)
		}
	}
	expectRecovery := func(phase string) {
		t.Helper()
		var a segment.Alloc
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; {
			if a, err = s.Allocate(ctx, "t", 0); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: Allocate did not recover: %v", phase, err)
		}
		if a.MaxID-a.Step < last.MaxID {
			t.Fatalf("%s: range [%d,%d) reuses IDs below %d", phase, a.MaxID-a.Step, a.MaxID, last.MaxID)
		}
		last = a
	}

	m.Pause()
	expectFailures("paused")
	m.Resume()
	expectRecovery("resumed")

	m.Kill()
	expectFailures("killed")
	m.Start()
	expectRecovery("restarted")
}

// TestMySQLDownAtOpen: an instance started while the database is down opens fine, fails its
// calls, and works (creating the table) once the database is up.
func TestMySQLDownAtOpen(t *testing.T) {
	m := testenv.StartMariaDB(t)
	dsn := testenv.FreshDatabase(t, m.DSN(""))
	m.Kill()

	start := time.Now()
	s := openTestMySQL(t, dsn, func(c *MySQLConfig) { c.QueryTimeout = time.Second })
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("OpenMySQL took %v with the database down", d)
	}
	ctx := context.Background()
	if a, err := s.Allocate(ctx, "t", 0); err == nil {
		t.Fatalf("Allocate with the database down: got %+v, want an error", a)
	}

	m.Start()
	if err := s.Create(ctx, segment.Tag{Name: "t", Step: 10}); err != nil {
		t.Fatalf("Create after the database came up: %v", err)
	}
	if a, err := s.Allocate(ctx, "t", 0); err != nil || a != (segment.Alloc{MaxID: 11, Step: 10}) {
		t.Fatalf("Allocate: got %+v, %v, want {11 10}", a, err)
	}
}

func TestMySQLRows(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := openTestMySQL(t, dsn, nil)
	ctx := context.Background()
	before := time.Now().Add(-2 * time.Second)
	if err := s.Create(ctx, segment.Tag{Name: "b", MaxID: 5, Step: 10, Description: "bee"}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := s.Create(ctx, segment.Tag{Name: "a", Step: 3}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := s.Allocate(ctx, "b", 0); err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	rows, err := s.Rows(ctx)
	if err != nil {
		t.Fatalf("Rows: %v", err)
	}
	want := []segment.Tag{{Name: "a", MaxID: 1, Step: 3}, {Name: "b", MaxID: 15, Step: 10, Description: "bee"}}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d", len(rows), len(want))
	}
	for i := range want {
		// The server's clock, in seconds: allow for the truncation and a little skew.
		if ut := rows[i].UpdateTime; ut.Before(before) || ut.After(time.Now().Add(2*time.Second)) {
			t.Fatalf("row %d: update time %v, want about now", i, ut)
		}
		rows[i].UpdateTime = time.Time{}
		if rows[i] != want[i] {
			t.Fatalf("row %d: got %+v, want %+v", i, rows[i], want[i])
		}
	}
}
