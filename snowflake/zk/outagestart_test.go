package zk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// The fences of a worker's outage start and restarts: the outage start from the data dir's
// cache needs proof (TestZKOutageStartRule), reuse takes its own free nodes first
// (TestZKReuseRestartsKeepOwnNodes), a start that never issued leaves the next start's bound
// alone (TestZKNeverIssuedStartKeepsBound), a holder that lost its id acquires again
// (TestZKStandbyPairFailovers). docs/SNOWFLAKE.md lists the mutants they kill.

// outageAcquire calls Acquire once, with ZooKeeper unreachable through the proxy.
func outageAcquire(t *testing.T, s *Source) (snowflake.Worker, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	return s.Acquire(ctx)
}

// TestZKOutageStartRule: with ZooKeeper unreachable, the cached worker id serves only when the
// data dir proves that no other process can hold it in this domain.
func TestZKOutageStartRule(t *testing.T) {
	addr := zkServer(t)
	ctx := context.Background()
	const tol = 30 * time.Second
	// setup: A holds an id through px with a tolerance, extends once, and crashes (no lowering).
	setup := func(t *testing.T, chroot string) (px *e2e.Proxy, cfg Config, until time.Time) {
		t.Helper()
		px = e2e.StartProxy(t, addr)
		cfg = zkCfg(px.Addr(), randomName(t), "10.24.0.1:6380", t.TempDir())
		cfg.Chroot = chroot
		cfg.OutageTolerance = tol
		a, err := NewSource(cfg)
		if err != nil {
			t.Fatal(err)
		}
		acquire(t, a)
		until = time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
		if err := a.Extend(ctx, until); err != nil {
			t.Fatal(err)
		}
		a.Close()
		return px, cfg, until
	}
	refused := func(t *testing.T, s *Source, why string) {
		t.Helper()
		w, err := outageAcquire(t, s)
		if err == nil {
			t.Fatalf("outage start served worker %d from the cache (%s); want a refusal until ZooKeeper answers", w.ID, why)
		}
		if !errors.Is(err, snowflake.ErrSourceUnavailable) || !strings.Contains(err.Error(), why) {
			t.Fatalf("outage start: got %v, want ErrSourceUnavailable saying %q", err, why)
		}
	}

	t.Run("restart of the same data dir after a crash serves within the tolerance", func(t *testing.T) {
		px, cfg, until := setup(t, "")
		px.SetMode(e2e.ProxyReset, 0)
		s := newZK(t, cfg)
		w, err := outageAcquire(t, s)
		if err != nil || w.Source != "zookeeper (local cache)" || !w.Bound.Equal(until) {
			t.Fatalf("got %+v, %v; want the cached id from the local cache above %v", w, err, until)
		}
	})
	t.Run("a copied data dir refuses", func(t *testing.T) {
		px, cfg, _ := setup(t, "")
		px.SetMode(e2e.ProxyReset, 0)
		cp := cfg
		cp.DataDir = t.TempDir()
		testkit.CopyDir(t, cfg.DataDir, cp.DataDir)
		s, err := NewSource(cp)
		if err != nil {
			t.Fatal(err)
		}
		refused(t, s, "copied")
		s.Close()
		// Also at its next open, when the copy is an instance of its own.
		refused(t, newZK(t, cp), "no outage tolerance confirmed")
	})
	t.Run("another chroot refuses", func(t *testing.T) {
		px, cfg, _ := setup(t, "/c1")
		px.SetMode(e2e.ProxyReset, 0)
		cfg.Chroot = "/c2"
		refused(t, newZK(t, cfg), "another worker-id domain")
	})
	t.Run("other servers refuse", func(t *testing.T) {
		_, cfg, _ := setup(t, "")
		other := e2e.StartProxy(t, addr)
		other.SetMode(e2e.ProxyReset, 0)
		cfg.Servers = []string{other.Addr()}
		refused(t, newZK(t, cfg), "another worker-id domain")
	})
	t.Run("a stop whose lowering write timed out but was applied refuses", func(t *testing.T) {
		px := e2e.StartProxy(t, addr)
		cfg := zkCfg(px.Addr(), randomName(t), "10.24.0.2:6380", t.TempDir())
		cfg.OutageTolerance = tol
		cfg.SessionTimeout = 10 * time.Second // the delay below must not end the session
		cfg.ReportInterval = time.Hour
		a, err := NewSource(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		w := acquire(t, a)
		if err := a.Extend(ctx, time.Now().Add(3*time.Second)); err != nil {
			t.Fatal(err)
		}
		// Every packet 700 ms late: the lowering write (1 s deadline with a tolerance) is
		// applied, its reply comes too late.
		px.SetMode(e2e.ProxyDelay, 700*time.Millisecond)
		low := time.Now().Add(time.Millisecond).Truncate(time.Millisecond)
		// The data dir records the write as applied before it is sent: a crash while it is in
		// flight (its reply takes 1.4 s here) must leave tolerance 0 too. The hook runs just
		// before the write is sent and reads the data dir then.
		var atSend statefile.State
		var atSendErr error
		sent := false
		testHookLowering = func() {
			sent = true
			b, err := os.ReadFile(filepath.Join(cfg.DataDir, snowflake.LocalStateFile))
			if err == nil {
				err = json.Unmarshal(b, &atSend)
			}
			atSendErr = err
		}
		defer func() { testHookLowering = nil }()
		done := make(chan error, 1)
		go func() { done <- a.Extend(ctx, low) }()
		err = <-done
		testHookLowering = nil
		if !sent || atSendErr != nil {
			t.Fatalf("the lowering write was not sent (%v, %v)", sent, atSendErr)
		}
		if atSend.ZKConfirmedMs != low.UnixMilli() || atSend.ToleranceMs != 0 {
			t.Fatalf("when the lowering write was sent the data dir said confirmed %v tolerance %dms; want %v and 0 (recorded before sending it)",
				time.UnixMilli(atSend.ZKConfirmedMs), atSend.ToleranceMs, low)
		}
		done <- err
		if err := <-done; err != nil {
			t.Fatalf("lowering Extend: %v", err)
		}
		adm := adminConn(t, addr)
		applied := false
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && !applied; time.Sleep(20 * time.Millisecond) {
			st := readState(t, adm, cfg.Name, w.ID)
			applied = st.ReservedUntil == low.UnixMilli() && st.ToleranceMs == 0
		}
		if !applied {
			t.Fatal("the lowering write never reached ZooKeeper: the test did not model the ambiguous write")
		}
		px.SetMode(e2e.ProxyReset, 0) // ZooKeeper unreachable from here on (the stop, the restart)
		a.Close()
		refused(t, newZK(t, cfg), "no outage tolerance confirmed")
	})
}

// TestZKReuseRestartsKeepOwnNodes: under --worker-reuse one identity restarted 20 times, while
// another holds its first node and a third identity takes its free node over between the
// restarts, uses its own free node every time: two nodes in all, with one worker bit (two ids)
// to spare none.
func TestZKReuseRestartsKeepOwnNodes(t *testing.T) {
	addr := zkServer(t)
	name := randomName(t)
	cfg := func(ip, dir string) Config {
		c := zkCfg(addr, name, ip, dir)
		c.Reuse, c.MaxWorkerID = true, 1
		c.ReportInterval = time.Hour
		return c
	}
	dirX := t.TempDir()
	x, err := NewSource(cfg("10.24.1.1:6380", dirX))
	if err != nil {
		t.Fatal(err)
	}
	if w := acquire(t, x); w.ID != 0 {
		t.Fatalf("X: worker %d, want 0", w.ID)
	}
	x.Close()
	y := newZK(t, cfg("10.24.1.2:6380", t.TempDir()))
	if w := acquire(t, y); w.ID != 0 {
		t.Fatalf("Y: worker %d, want X's 0 taken over", w.ID)
	}
	adm := adminConn(t, addr)
	ids := map[int64]bool{}
	for i := range 20 {
		x, err := NewSource(cfg("10.24.1.1:6380", dirX))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w, err := x.Acquire(ctx)
		cancel()
		x.Close()
		if err != nil {
			t.Fatalf("restart %d of X: %v", i, err)
		}
		ids[w.ID] = true
		// Another identity takes X's free node over, and is gone again.
		z := newZK(t, cfg(fmt.Sprintf("10.24.1.%d:6380", 10+i), t.TempDir()))
		if wz := acquire(t, z); wz.ID != w.ID {
			t.Fatalf("round %d: Z got worker %d, want X's free %d", i, wz.ID, w.ID)
		}
		z.Close()
	}
	kids, _, err := adm.Children("/snowflake/" + name + "/forever")
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != 2 || len(ids) != 1 || !ids[1] {
		t.Fatalf("forever nodes %v, X's ids %v; want two nodes and X on id 1 every time", kids, ids)
	}
}

// TestZKNeverIssuedStartKeepsBound: restarts killed while they wait for
// the start bound (they never issue) leave the next start the same bound: a claim announces
// tolerance 0 until its first extension.
func TestZKNeverIssuedStartKeepsBound(t *testing.T) {
	addr := zkServer(t)
	ctx := context.Background()
	cfg := zkCfg(addr, randomName(t), "10.24.2.1:6380", t.TempDir())
	cfg.OutageTolerance = 5 * time.Second
	cfg.ReportInterval = 50 * time.Millisecond // reports run between the restarts too
	a, err := NewSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	acquire(t, a)
	until := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	if err := a.Extend(ctx, until); err != nil {
		t.Fatal(err)
	}
	a.Close() // kill -9
	want := until.Add(cfg.OutageTolerance)
	for i := range 8 {
		s, err := NewSource(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w := acquire(t, s)
		if i%2 == 1 {
			time.Sleep(60 * time.Millisecond) // a report runs: it must not raise the bound either
		}
		s.Close() // killed during its wait for the bound (after the claim, or a report): never issued
		if !w.Bound.Equal(want) {
			t.Fatalf("restart %d: bound %v, want %v (the crashed run's lease plus its tolerance), not pushed further", i, w.Bound, want)
		}
		if i == 0 && !strings.Contains(w.BoundCause, "tolerance") {
			t.Errorf("bound cause %q does not name the tolerance", w.BoundCause)
		}
	}
}

// TestZKStandbyPairFailovers: two processes of one identity on two data
// dirs, a holder and a standby. Each time the holder loses its session (its live node goes)
// the standby takes over, and the old holder goes back to acquiring: it answers NOWORKER
// saying it waits for the holder, and takes the id again at the next failover. Three
// failovers, IDs drawn from both all the time: no duplicate, each side serves after its turn.
func TestZKStandbyPairFailovers(t *testing.T) {
	addr := zkServer(t)
	name := randomName(t)
	const ip = "10.24.3.1:6380"
	cfgOf := func() snowflake.Config {
		return snowflake.Config{LeaseWindow: 300 * time.Millisecond, ExtendTimeout: 2 * time.Second, RetryInterval: 20 * time.Millisecond}
	}
	var gs [2]*snowflake.Generator
	for i := range gs {
		c := zkCfg(addr, name, ip, t.TempDir())
		c.ReportInterval = time.Hour
		s, err := NewSource(c)
		if err != nil {
			t.Fatal(err)
		}
		g, err := snowflake.New(cfgOf(), s, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		gs[i] = g
		if i == 0 {
			waitReady(t, g)
		}
	}
	var (
		mu      sync.Mutex
		seen    = map[int64]int{}
		dups    int
		sawHeld [2]bool
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	defer halt() // before the generators close
	for i, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ids, err := g.AppendIDs(nil, 20)
				mu.Lock()
				if err != nil && strings.Contains(snowflake.Waiting(err), "held by another live process") {
					sawHeld[i] = true
				}
				for _, id := range ids {
					if seen[id]++; seen[id] > 1 {
						dups++
					}
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	adm := adminConn(t, addr)
	live := path.Join("/snowflake", name, "live", "0")
	holder := 0
	for round := range 3 {
		if !gs[holder].Info().HasWorker {
			t.Fatalf("round %d: holder %d not serving: %s", round, holder, gs[holder].Info().Status)
		}
		// The holder's session is gone (as after a partition): its live node disappears.
		if err := adm.Delete(live, -1); err != nil && !errors.Is(err, gozk.ErrNoNode) {
			t.Fatal(err)
		}
		next := 1 - holder
		deadline := time.Now().Add(15 * time.Second)
		for !(gs[next].Info().HasWorker && !gs[holder].Info().HasWorker) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no failover to %d: holder %+v, standby %+v", round, next, gs[holder].Info().Status, gs[next].Info().Status)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if w := gs[next].Info().WorkerID; w != 0 {
			t.Fatalf("round %d: new holder has worker %d, want 0", round, w)
		}
		// The old holder waits for the new one, and says so.
		want := "held by another live process"
		for !strings.Contains(gs[holder].Info().Status, want) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: old holder's status %q, want it to say %q", round, gs[holder].Info().Status, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
		holder = next
	}
	// Some IDs from the final holder, then stop.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := gs[holder].Next(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("final holder not serving: %v", err)
		}
	}
	halt()
	mu.Lock()
	defer mu.Unlock()
	if dups > 0 || len(seen) < 100 {
		t.Fatalf("%d duplicates among %d IDs", dups, len(seen))
	}
	for i, saw := range sawHeld {
		if !saw {
			t.Errorf("generator %d's NOWORKER never said it waits for the holder (snowflake.Waiting)", i)
		}
	}
}
