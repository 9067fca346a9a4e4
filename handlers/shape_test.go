package handlers

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/segment"
	"github.com/redis/go-redis/v9"
)

// testClock is the handlers' injected wall clock (Config.Now): periods follow it.
type testClock struct{ ns atomic.Int64 }

func newTestClock(t time.Time) *testClock { c := &testClock{}; c.set(t); return c }
func (c *testClock) now() time.Time       { return time.Unix(0, c.ns.Load()) }
func (c *testClock) set(t time.Time)      { c.ns.Store(t.UnixNano()) }

var shanghai = func() *time.Location {
	l, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		panic(err)
	}
	return l
}()

const testKeyHex = "2B7E151628AED2A6ABF7158809CF4F3C"

func testKey() []byte {
	k := make([]byte, 16)
	for i := range k {
		v, _ := strconv.ParseUint(testKeyHex[2*i:2*i+2], 16, 8)
		k[i] = byte(v)
	}
	return k
}

func shapedServer(t *testing.T, clk *testClock, key []byte, o serverOpts) *testServer {
	t.Helper()
	o.shapes = true
	o.config = func(c *Config) { c.Now = clk.now; c.IDKey = key }
	return startServer(t, o)
}

func wantErr(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), code) {
		t.Fatalf("got %v, want an error starting with %s", err, code)
	}
}

// docs/REFERENCE.md's example, end to end: a daily order number in Shanghai, IDS.NEXT, INCR's
// integer, IDS.PARSE, IDS.INFO.
func TestShapedDaily(t *testing.T) {
	forEachProto(t, func(t *testing.T, proto int) {
		clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, shanghai))
		s := shapedServer(t, clk, nil, serverOpts{autoCreate: true})
		c := s.client(t, proto, "")
		ctx := context.Background()
		if err := c.Do(ctx, "IDS.CREATE", "order", "FORMAT", "ORD{yyyyMMdd}{seq:6}", "RESET", "day", "TZ", "Asia/Shanghai").Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := c.Do(ctx, "IDS.NEXT", "order").Text(); err != nil || got != "ORD20261201000001" {
			t.Fatalf("IDS.NEXT: got %q, %v; want ORD20261201000001", got, err)
		}
		got, err := c.Do(ctx, "IDS.NEXT", "order", 3).StringSlice()
		if want := []string{"ORD20261201000002", "ORD20261201000003", "ORD20261201000004"}; err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("IDS.NEXT order 3: got %v, %v; want %v", got, err, want)
		}
		if v, err := c.Incr(ctx, "order").Result(); err != nil || v != 5 {
			t.Fatalf("INCR order: got %d, %v; want the integer 5", v, err)
		}
		p := c.Do(ctx, "IDS.PARSE", "order", "ORD20261201000003").Val()
		fields := flatMap(t, p)
		if fields["counter"] != "3" || fields["period"] != "20261201" || fields["row"] != "order@20261201" ||
			fields["period_start"] != "2026-12-01T00:00:00+08:00" {
			t.Fatalf("IDS.PARSE: got %v", fields)
		}
		for _, bad := range []string{"ORD20261201000000", "ORD20261232000001", "ord20261201000001", "ORD2026120100000x"} {
			wantErr(t, c.Do(ctx, "IDS.PARSE", "order", bad).Err(), "BADID")
		}
		info := flatMap(t, c.Do(ctx, "IDS.INFO", "order").Val())
		if info["format"] != "ORD{yyyyMMdd}{seq:6}" || info["reset"] != "day" || info["tz"] != "Asia/Shanghai" ||
			info["row"] != "order@20261201" || info["tag"] != "order@20261201" || info["opaque"] != "0" {
			t.Fatalf("IDS.INFO: got %v", info)
		}
		// A plain tag: IDS.NEXT gives its decimal IDs as strings.
		if got, err := c.Do(ctx, "IDS.NEXT", "plain").Text(); err != nil || got != "1" {
			t.Fatalf("IDS.NEXT plain: got %q, %v", got, err)
		}
		wantErr(t, c.Do(ctx, "IDS.PARSE", "plain", "1").Err(), "NOSHAPE")
	})
}

// flatMap reads a RESP3 map or a RESP2 flat array into strings.
func flatMap(t *testing.T, v any) map[string]string {
	t.Helper()
	out := map[string]string{}
	switch m := v.(type) {
	case map[any]any:
		for k, x := range m {
			out[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			out[fmt.Sprint(m[i])] = fmt.Sprint(m[i+1])
		}
	default:
		t.Fatalf("reply %T %v is not a map", v, v)
	}
	return out
}

// A period boundary crossed mid-segment: the first ID of the new period carries the new date
// and counter 1 (the old segment of 1000 is not used past its period); a clock stepping back
// across midnight continues the old period's counter (its own row), never restarts it.
func TestPeriodBoundaryMidSegment(t *testing.T) {
	clk := newTestClock(time.Date(2026, 12, 1, 23, 59, 59, 0, shanghai))
	// Auto-create off (MySQL's default): each period's row comes from the shaped path itself.
	s := shapedServer(t, clk, nil, serverOpts{})
	c := s.client(t, 3, "")
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "order", "FORMAT", "ORD{yyyyMMdd}{seq:6}", "RESET", "day", "TZ", "Asia/Shanghai", "STEP", "1000").Err(); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		v, err := c.Do(ctx, "IDS.NEXT", "order").Text()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for i := 1; i <= 10; i++ {
		if got, want := next(), fmt.Sprintf("ORD20261201%06d", i); got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
	clk.set(time.Date(2026, 12, 2, 0, 0, 0, 0, shanghai)) // midnight, 990 IDs left in the segment
	for i := 1; i <= 5; i++ {
		if got, want := next(), fmt.Sprintf("ORD20261202%06d", i); got != want {
			t.Fatalf("after midnight: got %s, want %s", got, want)
		}
	}
	if info := flatMap(t, c.Do(ctx, "IDS.INFO", "order").Val()); info["row"] != "order@20261202" {
		t.Fatalf("IDS.INFO after midnight: row %s", info["row"])
	}
	// The clock steps back across midnight: the 1st's row again, above its 10 IDs.
	clk.set(time.Date(2026, 12, 1, 23, 59, 59, 500e6, shanghai))
	got := next()
	if !strings.HasPrefix(got, "ORD20261201") {
		t.Fatalf("after the step back: got %s, want the 1st's date", got)
	}
	if n, _ := strconv.Atoi(got[11:]); n <= 10 {
		t.Fatalf("after the step back: counter %d, want above 10 (no restart within a period)", n)
	}
}

// The shape is fixed once created: another IDS.CREATE of the name (another template) is
// TAGEXISTS, and so is a shape over a plain tag's name; a plain row is never created under
// a shaped name, even by an instance that did not know the shape (it learns it instead).
func TestShapeChangeRefused(t *testing.T) {
	eachStore(t, testShapeChangeRefused)
}

// eachStore runs test on auto-creating servers of each store: "bolt", the embedded store,
// and "mysql", a fresh database of the test MariaDB (with its marks in a temp dir).
func eachStore(t *testing.T, test func(t *testing.T, o serverOpts)) {
	t.Helper()
	t.Run("bolt", func(t *testing.T) { test(t, serverOpts{autoCreate: true}) })
	t.Run("mysql", func(t *testing.T) {
		test(t, serverOpts{autoCreate: true, mysqlDSN: testenv.FreshDatabase(t, testenv.MySQLDSN(t)), dir: t.TempDir()})
	})
}

func testShapeChangeRefused(t *testing.T, o serverOpts) {
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, nil, o)
	c := s.client(t, 3, "")
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "inv", "FORMAT", "INV{seq:8}").Err(); err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Do(ctx, "IDS.NEXT", "inv").Text(); v != "INV00000001" {
		t.Fatalf("got %s", v)
	}
	wantErr(t, c.Do(ctx, "IDS.CREATE", "inv", "FORMAT", "INV{seq:10}").Err(), "TAGEXISTS")
	c.Incr(ctx, "plain")
	wantErr(t, c.Do(ctx, "IDS.CREATE", "plain", "FORMAT", "P{seq:8}").Err(), "TAGEXISTS")

	// A shape written to the store by another instance: this one's INCR learns it.
	st := s.h.cfg.Shapes
	if err := st.CreateShape(ctx, "elsewhere", []byte(`{"format":"E{seq:6}"}`)); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Incr(ctx, "elsewhere").Result(); err != nil || v != 1 {
		t.Fatalf("INCR elsewhere: got %d, %v; want 1 from row elsewhere@", v, err)
	}
	if v, _ := c.Do(ctx, "IDS.NEXT", "elsewhere").Text(); v != "E000002" {
		t.Fatalf("IDS.NEXT elsewhere: got %s, want E000002", v)
	}
	tags, err := s.h.cfg.Shapes.(segment.Store).Tags(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range tags {
		if tag == "elsewhere" || tag == "inv" {
			t.Fatalf("a plain row %q exists under a shaped name (rows: %v)", tag, tags)
		}
	}
	// The store itself refuses the plain row.
	err = s.h.cfg.Shapes.(segment.Store).Create(ctx, segment.Tag{Name: "inv", MaxID: 1, Step: 10})
	if err == nil || !strings.Contains(err.Error(), "shape") {
		t.Fatalf("store Create of a shaped name: got %v, want ErrShaped", err)
	}
}

func TestShapeRefusals(t *testing.T) {
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, nil, serverOpts{autoCreate: true})
	c := s.client(t, 2, "")
	ctx := context.Background()
	for _, tc := range []struct {
		args []any
		code string
	}{
		{[]any{"a", "FORMAT", "A{seq:3}", "START", "1000"}, "BADFORMAT"},
		{[]any{"a", "FORMAT", "A{seq:6}", "RESET", "day"}, "BADFORMAT"},
		{[]any{"a", "FORMAT", "A{yyyyMMdd}{seq:6}"}, "BADFORMAT"},
		{[]any{"a", "FORMAT", "A{yyyyMMdd}{seq:6}", "RESET", "week"}, "BADFORMAT"},
		{[]any{"a", "FORMAT", "A{yyyyMMdd}{seq:6}", "RESET", "day", "TZ", "Nowhere/City"}, "BADFORMAT"},
		{[]any{"a", "OPAQUE"}, "NOKEY"},
		{[]any{"a@b", "FORMAT", "A{seq:6}"}, "BADTAG"},
		{[]any{"a", "FORMAT"}, "ERR syntax"},
	} {
		wantErr(t, c.Do(ctx, append([]any{"IDS.CREATE"}, tc.args...)...).Err(), tc.code)
	}
	// A counter that reaches the width's end is LIMIT, never a longer string.
	if err := c.Do(ctx, "IDS.CREATE", "small", "FORMAT", "S{seq:2}", "STEP", "10").Err(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 99; i++ {
		if v, err := c.Do(ctx, "IDS.NEXT", "small").Text(); err != nil || v != fmt.Sprintf("S%02d", i) {
			t.Fatalf("ID %d: got %q, %v", i, v, err)
		}
	}
	wantErr(t, c.Do(ctx, "IDS.NEXT", "small").Err(), "LIMIT")
	wantErr(t, c.Incr(ctx, "small").Err(), "LIMIT")
	// INCRBY and IDS.SEGMENT have no meaning on a shaped name.
	wantErr(t, c.IncrBy(ctx, "small", 2).Err(), "SHAPED")
	wantErr(t, c.Do(ctx, "IDS.SEGMENT", "small", 2).Err(), "SHAPED")
}

// Opaque tags: INCR of an opaque integer tag gives positive values below 10^18 that are not
// the counters, all distinct, each parsed back to its counter; a formatted opaque tag keeps
// its width. Under another key the tag is refused (NOKEY), never served.
func TestOpaque(t *testing.T) {
	dir := t.TempDir()
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, testKey(), serverOpts{autoCreate: true, dir: dir, markFile: true})
	c := s.client(t, 3, "")
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "o", "OPAQUE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "IDS.CREATE", "p", "FORMAT", "P{yyyyMMdd}{seq36:6}", "RESET", "day", "OPAQUE").Err(); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	sequential := 0
	for i := int64(1); i <= 300; i++ {
		v, err := c.Incr(ctx, "o").Result()
		if err != nil {
			t.Fatal(err)
		}
		if v <= 0 || v >= 1e18 || seen[v] {
			t.Fatalf("INCR o: %d (non-positive, too wide or repeated)", v)
		}
		if v == i {
			sequential++
		}
		seen[v] = true
		f := flatMap(t, c.Do(ctx, "IDS.PARSE", "o", strconv.FormatInt(v, 10)).Val())
		if f["counter"] != strconv.FormatInt(i, 10) {
			t.Fatalf("IDS.PARSE o %d: counter %s, want %d", v, f["counter"], i)
		}
	}
	if sequential > 1 {
		t.Fatalf("%d opaque IDs equal their counter", sequential)
	}
	ids, err := c.Do(ctx, "IDS.NEXT", "p", 100).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for i, id := range ids {
		if len(id) != 15 || !strings.HasPrefix(id, "P20261201") || got[id] {
			t.Fatalf("IDS.NEXT p: %q (wrong shape or repeated)", id)
		}
		got[id] = true
		if f := flatMap(t, c.Do(ctx, "IDS.PARSE", "p", id).Val()); f["counter"] != strconv.Itoa(i+1) {
			t.Fatalf("IDS.PARSE p %s: counter %s, want %d", id, f["counter"], i+1)
		}
	}
	s.stop()

	other := testKey()
	other[15] ^= 1
	s2 := shapedServer(t, clk, other, serverOpts{autoCreate: true, dir: dir, markFile: true})
	c2 := s2.client(t, 3, "")
	wantErr(t, c2.Incr(ctx, "o").Err(), "NOKEY")
	wantErr(t, c2.Do(ctx, "IDS.NEXT", "p").Err(), "NOKEY")
}

// Pruning a period, then a clock back in it: its row is created again above every ID issued
// from it (the marks), never from 1.
func TestPruneThenRecreatePeriod(t *testing.T) {
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, nil, serverOpts{autoCreate: true, markFile: true})
	c := s.client(t, 3, "")
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "d", "FORMAT", "D{yyyyMMdd}{seq:6}", "RESET", "day", "STEP", "10").Err(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		c.Do(ctx, "IDS.NEXT", "d")
	}
	clk.set(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	c.Do(ctx, "IDS.NEXT", "d")
	wantErr(t, c.Do(ctx, "IDS.PRUNE", "d", "20261203").Err(), "ERR period")
	if n, err := c.Do(ctx, "IDS.PRUNE", "d", "20261202").Int(); err != nil || n != 1 {
		t.Fatalf("IDS.PRUNE: got %d, %v; want 1 row", n, err)
	}
	rows, _ := segment.PeriodRows(ctx, s.h.cfg.Shapes.(segment.Store), "d")
	if fmt.Sprint(rows) != "[d@20261202]" {
		t.Fatalf("rows after the prune: %v", rows)
	}
	clk.set(time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC))
	v, err := c.Do(ctx, "IDS.NEXT", "d").Text()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(v[9:]); n <= 10 {
		t.Fatalf("the pruned period restarted: got %s, want a counter above the 10 leased before", v)
	}
}

// Two instances on one MariaDB, their clocks either side of midnight, serving one daily tag:
// no string twice, each string's date is the period its counter came from (the row), every
// counter per period strictly increasing per connection.
func TestTwoInstancesAcrossMidnightMySQL(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	midnight := time.Date(2026, 12, 2, 0, 0, 0, 0, shanghai)
	clkA := newTestClock(midnight.Add(-300 * time.Millisecond)) // A is late: still the 1st
	clkB := newTestClock(midnight.Add(200 * time.Millisecond))  // B is early: the 2nd
	a := shapedServer(t, clkA, nil, serverOpts{mysqlDSN: dsn, dir: t.TempDir()})
	b := shapedServer(t, clkB, nil, serverOpts{mysqlDSN: dsn, dir: t.TempDir()})
	ctx := context.Background()
	ca, cb := a.client(t, 3, ""), b.client(t, 3, "")
	if err := ca.Do(ctx, "IDS.CREATE", "order", "FORMAT", "ORD{yyyyMMdd}{seq:8}", "RESET", "day", "TZ", "Asia/Shanghai", "STEP", "50").Err(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	all := map[string]string{}
	var wg sync.WaitGroup
	run := func(name string, c *redis.Client, clk *testClock) {
		defer wg.Done()
		last := map[string]int{}
		for i := 0; i < 400; i++ {
			if i == 200 { // both pass midnight
				clk.set(midnight.Add(time.Second))
			}
			ids, err := c.Do(ctx, "IDS.NEXT", "order", 5).StringSlice()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for _, id := range ids {
				day, n := id[3:11], id[11:]
				ctr, _ := strconv.Atoi(n)
				if ctr <= last[day] {
					t.Errorf("%s: %s after counter %d of %s", name, id, last[day], day)
				}
				last[day] = ctr
				if prev, dup := all[id]; dup {
					t.Errorf("%s issued by %s and %s", id, prev, name)
				}
				all[id] = name
			}
			mu.Unlock()
		}
	}
	wg.Add(2)
	go run("A", ca, clkA)
	go run("B", cb, clkB)
	wg.Wait()
	days := map[string]int{}
	for id := range all {
		days[id[3:11]]++
	}
	if len(all) != 4000 || days["20261201"] == 0 || days["20261202"] == 0 {
		t.Fatalf("%d IDs by day %v; want 4000 over both days", len(all), days)
	}
	// Each string's date is its row's: the rows hold exactly the counters issued per day.
	for day := range days {
		rows := sqlCount(t, dsn, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = 'order@"+day+"'")
		if rows != 1 {
			t.Fatalf("row order@%s: %d rows", day, rows)
		}
	}
	if n := sqlCount(t, dsn, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = 'order'"); n != 0 {
		t.Fatalf("a plain row 'order' exists")
	}
}

func sqlCount(t *testing.T, dsn, q string) int {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// MayBlock: a shaped INCR or IDS.NEXT runs on the event loop once its period's row is
// created and its values are in memory; the first request of a period (a store call) runs
// off it.
func TestShapedMayBlock(t *testing.T) {
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := shapedServer(t, clk, nil, serverOpts{autoCreate: true})
	c := s.client(t, 2, "")
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "d", "FORMAT", "D{yyyyMMdd}{seq:6}", "RESET", "day").Err(); err != nil {
		t.Fatal(err)
	}
	// The commands' mayWait flags, as MayBlock asks them after a connection's own checks
	// (arity, auth, MULTI), which TestMayBlockTable covers.
	may := func(a ...string) bool {
		out := make([][]byte, len(a))
		for i, x := range a {
			out[i] = []byte(x)
		}
		return s.h.table[strings.ToLower(a[0])].mayWait(s.h, nil, out)
	}
	if !may("IDS.NEXT", "d") || !may("INCR", "d") {
		t.Fatal("before the period's row exists: want MayBlock")
	}
	c.Do(ctx, "IDS.NEXT", "d")
	if may("IDS.NEXT", "d") || may("INCR", "d") || may("IDS.NEXT", "d", "5") {
		t.Fatal("row created, values in memory: want no MayBlock")
	}
	clk.set(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	if !may("IDS.NEXT", "d") || !may("INCR", "d") {
		t.Fatal("a new period: want MayBlock")
	}
}

// Leaf's HTTP API returns the formatted ID of a shaped tag, the integer of a plain one.
func TestShapedHTTP(t *testing.T) {
	clk := newTestClock(time.Date(2026, 12, 1, 10, 0, 0, 0, shanghai))
	s := shapedServer(t, clk, nil, serverOpts{autoCreate: true})
	c := s.client(t, 2, "")
	ctx := context.Background()
	if err := c.Do(ctx, "IDS.CREATE", "order", "FORMAT", "ORD{yyyyMMdd}{seq:6}", "RESET", "day", "TZ", "Asia/Shanghai").Err(); err != nil {
		t.Fatal(err)
	}
	hs := httpServer(t, s.h)
	for _, want := range []string{"ORD20261201000001", "ORD20261201000002"} {
		if status, _, body := testkit.Fetch(t, hs, "GET", "/api/segment/get/order"); status != 200 || body != want {
			t.Fatalf("got %d %q, want 200 %q", status, body, want)
		}
	}
	if v, _ := c.Do(ctx, "IDS.NEXT", "order").Text(); v != "ORD20261201000003" {
		t.Fatalf("IDS.NEXT after the HTTP API: %s", v)
	}
	if status, _, body := testkit.Fetch(t, hs, "GET", "/api/segment/get/plain"); status != 200 || body != "1" {
		t.Fatalf("plain: got %d %q", status, body)
	}
}
