package segment

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOrderUnderRefreshStress runs "connections" (goroutines issuing INCR, INCRBY and
// IDS.SEGMENT one after another) against a few tags while another goroutine drops their
// buffers (refreshes that do not list them, Retire), changes their stored step and forces
// loads. Every ID must be unique per tag, and each connection must see strictly increasing
// IDs per tag. Run under -race.
func TestOrderUnderRefreshStress(t *testing.T) {
	clk := newFakeClock()
	tags := []string{"a", "b", "c"}
	st := newFakeStore(map[string]int64{"a": 7, "b": 13, "c": 50})
	cfg := testConfig(clk)
	cfg.MaxStep = 64
	cfg.MaxBatch = 40
	cfg.RetryBackoff = time.Nanosecond
	g := newTestGen(t, cfg, st, newFakeMarks())

	const conns, perConn = 6, 400
	type rec struct {
		tag string
		ids []int64 // the IDs of one reply, in order
	}
	var (
		wg   sync.WaitGroup
		stop atomic.Bool
		out  = make([][]rec, conns)
	)
	for c := range conns {
		wg.Go(func() {
			for i := range perConn {
				tag := tags[(c+i)%len(tags)]
				var r rec
				var err error
				switch i % 5 {
				case 0, 1, 2:
					var v int64
					v, err = g.Next(tag)
					r = rec{tag, []int64{v}}
				case 3:
					var v int64
					n := int64(1 + i%5)
					v, err = g.NextN(tag, n)
					for x := v - n + 1; x <= v; x++ {
						r.ids = append(r.ids, x)
					}
					r.tag = tag
				case 4:
					var ids []int64
					ids, err = g.AppendIDs(nil, tag, 1+i%30)
					r = rec{tag, ids}
				}
				if err != nil {
					if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLimit) {
						continue // a load raced with a drop and failed fast; order is what counts
					}
					t.Errorf("conn %d: %s: %v", c, tag, err)
					return
				}
				out[c] = append(out[c], r)
			}
		})
	}
	var churn sync.WaitGroup
	churn.Go(func() {
		for i := 0; !stop.Load(); i++ {
			tag := tags[i%len(tags)]
			switch i % 4 {
			case 0: // a refresh that does not list the tag
				st.set(func(s *fakeStore) { s.hidden[tag] = true })
				if _, err := g.refresh(t.Context()); err != nil {
					t.Errorf("refresh: %v", err)
				}
				st.set(func(s *fakeStore) { delete(s.hidden, tag) })
			case 1:
				g.Retire(tag)
			case 2: // the operator changes the stored step
				st.set(func(s *fakeStore) { s.rows[tag].step = int64(3 + i%40) })
			case 3:
				if b, err := g.buffer(tag); err == nil {
					g.preload(b)
				}
			}
			clk.Add(time.Duration(i%3) * time.Minute) // the dynamic step moves too
			time.Sleep(50 * time.Microsecond)
		}
	})
	wg.Wait()
	stop.Store(true)
	churn.Wait()

	seen := map[string]map[int64]int{}
	total := 0
	for c, recs := range out {
		last := map[string]int64{}
		for _, r := range recs {
			for _, v := range r.ids {
				if v <= last[r.tag] {
					t.Fatalf("conn %d: %s: got %d after %d; want strictly increasing", c, r.tag, v, last[r.tag])
				}
				last[r.tag] = v
				if seen[r.tag] == nil {
					seen[r.tag] = map[int64]int{}
				}
				if prev, dup := seen[r.tag][v]; dup {
					t.Fatalf("%s: ID %d issued twice (conns %d and %d)", r.tag, v, prev, c)
				}
				seen[r.tag][v] = c
				if !st.inLeased(r.tag, v) {
					t.Fatalf("%s: ID %d outside every leased range", r.tag, v)
				}
				total++
			}
		}
	}
	if total < conns*perConn/2 {
		t.Fatalf("got %d IDs, want most of the %d requests served", total, conns*perConn)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.maxInTag > 1 {
		t.Fatalf("got %d concurrent leases of one tag, want 1 (the tag guard serializes them)", st.maxInTag)
	}
	t.Logf("%d IDs; %d leases", total, st.allocs)
}

// TestGuardSerializesBuffersOfATag is the window of the regression guard: a lease of a
// dropped buffer is in flight (its mark read) when its replacement loads. The replacement's
// lease must wait for it and see its mark; else both compare with the same old mark and a
// store regression in between lets them accept the same range.
func TestGuardSerializesBuffersOfATag(t *testing.T) {
	clk := newFakeClock()
	st := newFakeStore(map[string]int64{"a": 100})
	cfg := testConfig(clk)
	cfg.MaxStep = 100
	mk := newFakeMarks()
	g := newTestGen(t, cfg, st, mk)
	if got := mustNext(t, g, "a"); got != 1 { // [1, 101)
		t.Fatalf("got %d, want 1", got)
	}
	waitIdle(t, g, "a")
	old, _ := g.buffer("a")
	block, started := make(chan struct{}), make(chan string) // unbuffered: a lease waits to be seen
	st.set(func(s *fakeStore) { s.block, s.started = block, started })
	old.mu.Lock()
	g.startLoadLocked(old)
	oldDone := old.done
	old.mu.Unlock()
	g.submit(old)
	<-started // old's lease is inside Allocate; it read the mark 101
	g.drop(old)

	type res struct {
		v   int64
		err error
	}
	got := make(chan res, 1)
	go func() {
		v, err := g.Next("a") // the replacement buffer loads
		got <- res{v, err}
	}()
	select {
	case <-started:
		t.Fatal("the replacement leased while the dropped buffer's lease was in flight")
	case <-time.After(100 * time.Millisecond): // only a broken guard is caught by this wait
	}
	close(block)
	<-oldDone // the dropped buffer's lease [101, 201) is granted (and not published)
	old.mu.Lock()
	published := old.next
	old.mu.Unlock()
	if published != nil {
		t.Fatalf("the dropped buffer published [%d, %d) after its drop", published.start, published.end)
	}
	// The store regresses by one step before the replacement's lease.
	st.set(func(s *fakeStore) { s.lower["a"] = 100 })
	<-started
	r := <-got
	if !errors.Is(r.err, ErrRegression) {
		t.Fatalf("replacement: got %d, %v; want ErrRegression (the store regressed below the mark %d)", r.v, r.err, mk.get("a"))
	}
	if m := mk.get("a"); m != 201 {
		t.Fatalf("mark: got %d, want 201 (the dropped buffer's lease [101, 201))", m)
	}
}

// A panic inside a load (the store, the marks) is a failed load: logged, counted, the tag
// retries after the back-off; the process and the loader pool live on.
func TestLoadPanicIsAFailedLoad(t *testing.T) {
	clk, st, g := startGen(t, map[string]int64{"a": 10}, func(cfg *Config) {
		cfg.MaxLoaders = 1
	})
	st.set(func(s *fakeStore) { s.panics = 1 })
	if _, err := g.Next("a"); !errors.Is(err, ErrUnavailable) || !containsStr(err.Error(), "panic") {
		t.Fatalf("got %v, want ErrUnavailable naming the panic", err)
	}
	if s := g.Stats(); s.LoadsPanicked != 1 || s.LoadsFailed != 1 {
		t.Fatalf("got panicked=%d failed=%d, want 1, 1", s.LoadsPanicked, s.LoadsFailed)
	}
	clk.Add(time.Second)
	if got := mustNext(t, g, "a"); got != 1 {
		t.Fatalf("after the panic: got %d, want 1", got)
	}
}

func containsStr(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexStr(s, sub) >= 0)
}

func indexStr(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// The loader pool bounds the concurrent store calls across all tags, and one buffer never has
// two loads at once.
func TestLoaderPoolBound(t *testing.T) {
	clk := newFakeClock()
	rows := map[string]int64{}
	for i := range 20 {
		rows[fmt.Sprintf("t%d", i)] = 10
	}
	st := newFakeStore(rows)
	st.set(func(s *fakeStore) { s.latency = 5 * time.Millisecond })
	cfg := testConfig(clk)
	cfg.MaxLoaders = 3
	g := newTestGen(t, cfg, st, newFakeMarks())
	var wg sync.WaitGroup
	for i := range 20 {
		for range 3 {
			wg.Go(func() {
				for range 25 {
					if _, err := g.Next(fmt.Sprintf("t%d", i)); err != nil && !errors.Is(err, ErrUnavailable) {
						t.Errorf("Next: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.maxIn > 3 {
		t.Fatalf("got %d concurrent Allocate calls, want at most MaxLoaders = 3", st.maxIn)
	}
	if st.maxIn < 2 {
		t.Fatalf("got at most %d concurrent Allocate calls, want the pool used (2 or 3)", st.maxIn)
	}
	if st.maxInTag > 1 {
		t.Fatalf("got %d concurrent loads of one tag, want 1", st.maxInTag)
	}
}

// Concurrent INCRBY on one tag reserve disjoint ranges (the CAS on the cursor).
func TestNextNConcurrentDisjoint(t *testing.T) {
	_, _, g := startGen(t, map[string]int64{"a": 1 << 20}, nil)
	mustNext(t, g, "a")
	const workers, per = 8, 3000
	got := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				n := int64(1 + (w+i)%4)
				r, err := g.NextN("a", n)
				if err != nil {
					t.Errorf("NextN: %v", err)
					return
				}
				for v := r - n + 1; v <= r; v++ {
					got[w] = append(got[w], v)
				}
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, ids := range got {
		for _, v := range ids {
			if seen[v] {
				t.Fatalf("ID %d reserved twice", v)
			}
			seen[v] = true
		}
	}
}
