package client

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // the refused dials of the failover tests are expected
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	code := m.Run()
	if cleanupBinary != nil {
		cleanupBinary()
	}
	if code == 0 {
		goleak.VerifyTestMain(exitCode(0))
	}
	os.Exit(code)
}

// exitCode is a testing.M stand-in for goleak after m.Run has run.
type exitCode int

func (e exitCode) Run() int { return int(e) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func newClient(t *testing.T, o Options) *Client {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// inGranted reports whether every id lies in a range the server granted.
func inGranted(f *fakeLeafd, ids []int64) (int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := slices.Clone(f.granted)
	slices.SortFunc(r, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	for _, id := range ids {
		i, _ := slices.BinarySearchFunc(r, id, func(g [2]int64, v int64) int {
			switch {
			case g[1] < v:
				return -1
			case g[0] > v:
				return 1
			}
			return 0
		})
		if i >= len(r) || r[i][0] > id || r[i][1] < id {
			return id, false
		}
	}
	return 0, true
}

func TestNextConcurrentUnique(t *testing.T) {
	f := startFake(t)
	c := newClient(t, Options{Addrs: []string{f.addr}, MinBatch: 10, MaxBatch: 5000})
	const goroutines, each = 8, 20000
	got := make([][]int64, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				id, err := c.Next(context.Background(), "order")
				if err != nil {
					t.Error(err)
					return
				}
				got[g] = append(got[g], id)
			}
		})
	}
	wg.Wait()
	var all []int64
	for g, ids := range got {
		if !slices.IsSorted(ids) {
			t.Errorf("goroutine %d: IDs not increasing", g)
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	if d := len(all) - len(slices.Compact(slices.Clone(all))); d != 0 {
		t.Fatalf("%d duplicate IDs in %d", d, len(all))
	}
	if id, ok := inGranted(f, all); !ok {
		t.Fatalf("ID %d outside every range the server granted", id)
	}
	if n := f.count("INCRBY"); n < 2 {
		t.Fatalf("INCRBY sent %d times, want several (ranges of at most 5000 for %d IDs)", n, goroutines*each)
	}
}

func TestNextNDistinctIncreasing(t *testing.T) {
	f := startFake(t)
	c := newClient(t, Options{Addrs: []string{f.addr}, MinBatch: 7, MaxBatch: 7})
	var all []int64
	for range 50 {
		ids, err := c.NextN(context.Background(), "n", 10) // straddles ranges of 7
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != 10 || !slices.IsSorted(ids) {
			t.Fatalf("NextN 10: got %v, want 10 increasing", ids)
		}
		all = append(all, ids...)
	}
	slices.Sort(all)
	if d := len(all) - len(slices.Compact(slices.Clone(all))); d != 0 {
		t.Fatalf("%d duplicates", d)
	}
	if id, ok := inGranted(f, all); !ok {
		t.Fatalf("ID %d outside the granted ranges", id)
	}
	if _, err := c.NextN(context.Background(), "n", 0); !errors.Is(err, ErrLimit) {
		t.Fatalf("NextN 0: got %v, want LIMIT", err)
	}
}

// TestPrefetchBeforeRunOut: the taker of a range's first tenth starts the next fetch, so the
// rest of the range and the next one are taken without waiting. The server holds the fetch
// until the test lets it go: no timing decides the outcome.
func TestPrefetchBeforeRunOut(t *testing.T) {
	f := startFake(t)
	c := newClient(t, Options{Addrs: []string{f.addr}, MinBatch: 100, MaxBatch: 100})
	ctx := context.Background()
	if _, err := c.Next(ctx, "p"); err != nil { // the first range: one wait, by design
		t.Fatal(err)
	}
	waits := c.waits.Load()
	f.mu.Lock()
	f.arrived, f.hold = make(chan int64, 1), make(chan struct{})
	arrived, hold := f.arrived, f.hold
	f.mu.Unlock()
	for range 9 { // takes 2..10: the 10th is the range's first tenth
		if _, err := c.Next(ctx, "p"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no INCRBY started by the first tenth of the range")
	}
	close(hold)
	tb := c.lookup("p")
	deadline := time.Now().Add(10 * time.Second)
	for {
		tb.mu.Lock()
		ready := tb.next != nil
		tb.mu.Unlock()
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the prefetched range never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	for range 150 { // the rest of the first range and half the next
		if _, err := c.Next(ctx, "p"); err != nil {
			t.Fatal(err)
		}
	}
	if w := c.waits.Load() - waits; w != 0 {
		t.Fatalf("%d takes waited for a fetch, want 0 (the next range was fetched ahead)", w)
	}
}

func TestErrorsTyped(t *testing.T) {
	f := startFake(t)
	f.noTag = true
	f.shaped["ord"] = true
	c := newClient(t, Options{Addrs: []string{f.addr}})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		tag  string
		want error
	}{
		{"unknown tag", "nosuch", ErrNoTag},
		{"shaped tag", "ord", ErrShaped},
	} {
		id, err := c.Next(ctx, tc.tag)
		if !errors.Is(err, tc.want) || id != 0 {
			t.Errorf("%s: got %d, %v; want 0, %v", tc.name, id, err, tc.want)
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %T is not an *Error", tc.name, err)
		}
	}
	f.setFail("UNAVAILABLE no segment ready (store unreachable); retry later")
	if id, err := c.Next(ctx, "x"); !errors.Is(err, ErrUnavailable) || id != 0 || !Retryable(err) {
		t.Errorf("store down: got %d, %v; want 0, a retryable UNAVAILABLE", id, err)
	}
	if id, err := c.Snowflake(ctx); !errors.Is(err, ErrUnavailable) || id != 0 {
		t.Errorf("snowflake, store down: got %d, %v; want 0, UNAVAILABLE", id, err)
	}
	dead := newClient(t, Options{Addrs: []string{"127.0.0.1:1"}, Timeout: 200 * time.Millisecond})
	if id, err := dead.Next(ctx, "x"); !errors.Is(err, ErrUnavailable) || id != 0 {
		t.Errorf("no address reachable: got %d, %v; want 0, UNAVAILABLE", id, err)
	}
	_ = c.Close()
	if id, err := c.Next(ctx, "x"); !errors.Is(err, ErrClosed) || id != 0 {
		t.Errorf("after Close: got %d, %v; want 0, CLOSED", id, err)
	}
}

// TestCloseDropsBuffer: nothing fetched is handed out after Close.
func TestCloseDropsBuffer(t *testing.T) {
	f := startFake(t)
	c := newClient(t, Options{Addrs: []string{f.addr}, MinBatch: 1000})
	ctx := context.Background()
	if _, err := c.Next(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snowflake(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	if _, err := c.Next(ctx, "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close with IDs buffered: got %v, want CLOSED", err)
	}
	if _, err := c.Snowflake(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Snowflake after Close with IDs buffered: got %v, want CLOSED", err)
	}
}

func TestFailoverToNextAddress(t *testing.T) {
	down, up := startFake(t), startFake(t)
	down.setFail("UNAVAILABLE store unreachable; retry later")
	c := newClient(t, Options{Addrs: []string{"127.0.0.1:1", down.addr, up.addr}, Timeout: 300 * time.Millisecond})
	id, err := c.Next(context.Background(), "f")
	if err != nil || id != 1 {
		t.Fatalf("got %d, %v; want 1 from the third address", id, err)
	}
	if up.count("INCRBY") != 1 {
		t.Fatalf("the answering address saw %d INCRBY, want 1", up.count("INCRBY"))
	}
}

func TestOrderedNotBuffered(t *testing.T) {
	f := startFake(t)
	f.ordered["o"] = true
	c := newClient(t, Options{Addrs: []string{f.addr}})
	ctx := context.Background()
	for want := int64(1); want <= 5; want++ {
		id, err := c.Next(ctx, "o")
		if err != nil || id != want {
			t.Fatalf("Next %d: got %d, %v", want, id, err)
		}
	}
	if n := f.count("INCR"); n != 5 {
		t.Fatalf("INCR sent %d times for 5 Next of an ordered tag, want 5", n)
	}
	if n := f.count("INCRBY"); n != 0 {
		t.Fatalf("an ordered tag was buffered: %d INCRBY", n)
	}
	ids, err := c.NextN(ctx, "o", 3)
	if err != nil || !slices.Equal(ids, []int64{6, 7, 8}) {
		t.Fatalf("NextN 3: got %v, %v; want [6 7 8]", ids, err)
	}
}

// TestLimitShrinksTheRange: a range larger than the server serves contiguously is asked
// again at the size IDS.INFO gives.
func TestLimitShrinksTheRange(t *testing.T) {
	f := startFake(t)
	f.maxIncrBy = 50
	c := newClient(t, Options{Addrs: []string{f.addr}, MinBatch: 400, MaxBatch: 400})
	for want := int64(1); want <= 120; want++ {
		id, err := c.Next(context.Background(), "l")
		if err != nil || id != want {
			t.Fatalf("Next: got %d, %v; want %d", id, err, want)
		}
	}
}

// fakeClock is the client's monotonic clock under a test's control.
type fakeClock struct{ ns atomic.Int64 }

func (f *fakeClock) now() time.Duration  { return time.Duration(f.ns.Load()) }
func (f *fakeClock) add(d time.Duration) { f.ns.Add(int64(d)) }

func TestDynamicBatch(t *testing.T) {
	f := startFake(t)
	c := newClient(t, Options{Addrs: []string{f.addr}, MinBatch: 10, MaxBatch: 80, BatchTarget: time.Second})
	clk := &fakeClock{}
	clk.add(time.Hour)
	c.now = clk.now
	tb := c.lookup("d")
	tb.kind = kindPlain
	sizes := []int64{}
	step := func(d time.Duration) {
		clk.add(d)
		sizes = append(sizes, tb.size())
	}
	step(0)                       // first: MinBatch
	step(10 * time.Millisecond)   // fast: double
	step(10 * time.Millisecond)   // double
	step(10 * time.Millisecond)   // double (80, the max)
	step(10 * time.Millisecond)   // stays at the max
	step(1500 * time.Millisecond) // within [target, 2 target]: kept
	step(5 * time.Second)         // slow: halve
	if want := []int64{10, 20, 40, 80, 80, 80, 40}; !slices.Equal(sizes, want) {
		t.Fatalf("sizes: got %v, want %v", sizes, want)
	}
}

// TestSnowflakeAgeBound: no buffered snowflake ID is handed out once its batch is older than
// SnowflakeMaxAge; a fresh batch is fetched instead.
func TestSnowflakeAgeBound(t *testing.T) {
	f := startFake(t)
	c := newClient(t, Options{Addrs: []string{f.addr}, SnowflakeMaxAge: 50 * time.Millisecond})
	clk := &fakeClock{}
	c.now = clk.now
	ctx := context.Background()
	a, err := c.Snowflake(ctx)
	if err != nil {
		t.Fatal(err)
	}
	firstBatch := f.count("IDS.SNOWFLAKE")
	b, err := c.Snowflake(ctx)
	if err != nil || b != a+1 {
		t.Fatalf("second ID: got %d, %v; want %d from the same batch", b, err, a+1)
	}
	if f.count("IDS.SNOWFLAKE") != firstBatch {
		t.Fatal("a fresh batch was not used")
	}
	clk.add(51 * time.Millisecond)
	f.mu.Lock()
	last := f.sfNext
	f.mu.Unlock()
	cID, err := c.Snowflake(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cID <= last {
		t.Fatalf("after the age bound: got %d from the old batch (its IDs end at %d), want one of a new batch", cID, last)
	}
}

func TestSnowflakeLimitShrinks(t *testing.T) {
	f := startFake(t)
	f.maxBatch = 30
	c := newClient(t, Options{Addrs: []string{f.addr}, SnowflakeBatch: 1000})
	c.sf.batch = 1000
	var prev int64
	for range 100 {
		id, err := c.Snowflake(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if id <= prev {
			t.Fatalf("snowflake IDs not increasing: %d after %d", id, prev)
		}
		prev = id
	}
}

func TestOptions(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New with no address: got nil error")
	}
	if _, err := New(Options{Addrs: []string{"x:1"}, MinBatch: 10, MaxBatch: 5}); err == nil {
		t.Fatal("MaxBatch below MinBatch: got nil error")
	}
}
