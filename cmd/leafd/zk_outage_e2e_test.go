package main

// Six ZooKeeper outage, restart and failover scenarios of a snowflake worker on the built
// binary (docs/SNOWFLAKE.md, "The six scenarios on the binary"): one private ZooKeeper, a
// fault proxy in front of it per instance that needs one, every snowflake ID recorded.
// Sequences start at 0 (--snowflake-seq-zero) so that two processes serving one worker id
// in one millisecond always collide: a duplicate cannot hide behind random sequence starts.

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/snowflake"
)

// sfLoad draws IDS.SNOWFLAKE 50 from one connection every 2 ms into an IDSet until its context
// ends, counting what was served and refused.
type sfLoad struct {
	ok, noWorker atomic.Int64
	maxID        atomic.Int64
	sawHeld      atomic.Bool // a NOWORKER said it waits for another live holder
	mu           sync.Mutex
	lastNoWorker string
	other        []string
}

func (s *sfLoad) run(ctx context.Context, wg *sync.WaitGroup, c *redis.Client, who string, ids *e2e.IDSet) {
	wg.Go(func() {
		for ctx.Err() == nil {
			v, err := c.Do(ctx, "IDS.SNOWFLAKE", 50).Int64Slice()
			switch {
			case err == nil:
				ids.Add(who, v...)
				s.ok.Add(int64(len(v)))
				if len(v) > 0 && slices.Max(v) > s.maxID.Load() {
					s.maxID.Store(slices.Max(v))
				}
			case strings.HasPrefix(err.Error(), "NOWORKER "):
				s.noWorker.Add(1)
				if strings.Contains(err.Error(), "held by another live process") {
					s.sawHeld.Store(true)
				}
				s.mu.Lock()
				s.lastNoWorker = err.Error()
				s.mu.Unlock()
			case ctx.Err() == nil:
				s.mu.Lock()
				s.other = append(s.other, err.Error())
				s.mu.Unlock()
			}
			time.Sleep(2 * time.Millisecond) // pacing: bounded memory for the ID set
		}
	})
}

func (s *sfLoad) refusal() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastNoWorker
}

// loads runs one sfLoad per instance until stop is called.
type loads struct {
	ids    *e2e.IDSet
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ctx    context.Context
}

func newLoads(t *testing.T) *loads {
	l := &loads{ids: e2e.NewIDSet()}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	t.Cleanup(l.stop)
	return l
}

func (l *loads) add(who string, c *redis.Client) *sfLoad {
	s := &sfLoad{}
	s.run(l.ctx, &l.wg, c, who, l.ids)
	return s
}

func (l *loads) stop() { l.cancel(); l.wg.Wait() }

// withFlag returns args with flag set to v (replaced when present).
func withFlag(args []string, flag, v string) []string {
	out := slices.Clone(args)
	for i := range out {
		if out[i] == flag && i+1 < len(out) {
			out[i+1] = v
			return out
		}
	}
	return append(out, flag, v)
}

// TestZKOutageScenarios: six scenarios on one ZooKeeper of their own. They run one after the
// other within the test, which runs in parallel with the others: parallel subtests would
// queue behind every parallel test of the package and end the suite.
func TestZKOutageScenarios(t *testing.T) {
	t.Parallel()
	z := testenv.StartZooKeeper(t)
	seq0 := "--snowflake-seq-zero"

	// 1. A copy of a running instance's data dir, started with the same --name and
	// --advertise-addr while the ZooKeeper link of both refuses connections (the original
	// serves on its outage tolerance): the copy answers NOWORKER, and still NOWORKER once the
	// link heals while the original lives (the copy is another instance, a standby).
	t.Run("copied data dir during an outage", func(t *testing.T) {
		name := e2e.ZKTestName(t)
		px := e2e.StartProxy(t, z.Addr())
		// A session that outlives the outage, so the original keeps its live node.
		tol := []string{"--zk-outage-tolerance", "30s", "--lease-window", "1s", "--start-wait-max", "40s", seq0, "--zk-session-timeout", "20s"}
		o := e2e.Start(t, e2e.ZKArgs(t, px.Addr(), name, tol...)...)
		e2e.WorkerOf(t, o)
		ld := newLoads(t)
		lo := ld.add("original", o.Client(2))
		e2e.Eventually(t, 10*time.Second, "original serving", func() bool { return lo.ok.Load() > 1000 })
		dirC := t.TempDir()
		testkit.CopyDir(t, o.DataDir, dirC)
		px.SetMode(e2e.ProxyReset, 0)
		argsC := withFlag(withFlag(e2e.ZKArgs(t, px.Addr(), name, tol...), "--advertise-addr", o.Addr), "--data-dir", dirC)
		c := e2e.Start(t, argsC...)
		lc := ld.add("copy", c.Client(2))
		n := lo.ok.Load()
		e2e.Eventually(t, 20*time.Second, "the copy refusing while the original serves in the outage", func() bool {
			return lc.noWorker.Load() >= 200 && lo.ok.Load() > n+5000
		})
		px.SetMode(e2e.ProxyPass, 0)
		n = lo.ok.Load()
		e2e.Eventually(t, 20*time.Second, "the copy waiting for the holder once ZooKeeper answers", func() bool {
			return lc.sawHeld.Load() && lo.ok.Load() > n+5000
		})
		ld.stop()
		if lc.ok.Load() != 0 {
			t.Errorf("the copy served %d IDs (worker of the original)\n%s", lc.ok.Load(), e2e.Tail(c.Log(), 30))
		}
		if !strings.Contains(c.Log(), "copied, restored or moved") {
			t.Errorf("the copy's log does not say why it refused the outage start:\n%s", e2e.Tail(c.Log(), 30))
		}
		t.Logf("%d distinct IDs recorded", ld.ids.Len())
		ld.ids.Check(t, 10000)
	})

	// 2. A stop whose lowering write times out but is applied (every packet 0.6 s late: the
	// write reaches ZooKeeper within its 1 s timeout, with 0.4 s to spare on a loaded machine,
	// and its reply comes back after it, at 1.2 s; load only makes the reply later), a
	// standby taking over at the stopped one's last millisecond, and the stopped one restarted
	// while ZooKeeper is unreachable: it must not serve from its data dir; once ZooKeeper is
	// back and the standby is gone, it serves.
	t.Run("ambiguous lowering write then outage restart", func(t *testing.T) {
		name := e2e.ZKTestName(t)
		px := e2e.StartProxy(t, z.Addr())
		argsH := e2e.ZKArgs(t, px.Addr(), name, "--zk-outage-tolerance", "20s", "--lease-window", "1s", "--start-wait-max", "30s", seq0,
			"--zk-session-timeout", "4s")
		h := e2e.Start(t, argsH...)
		e2e.WorkerOf(t, h)
		argsS := withFlag(e2e.ZKArgs(t, z.Addr(), name, "--lease-window", "1s", seq0), "--advertise-addr", h.Addr)
		s := e2e.Start(t, argsS...)
		ld := newLoads(t)
		lh, ls := ld.add("H", h.Client(2)), ld.add("standby", s.Client(2))
		e2e.Eventually(t, 10*time.Second, "H serving", func() bool { return lh.ok.Load() > 1000 })
		px.SetMode(e2e.ProxyDelay, 600*time.Millisecond)
		if err := h.Stop(20 * time.Second); err != nil {
			t.Fatalf("H's stop: %v", err)
		}
		e2e.Eventually(t, 40*time.Second, "standby serving", func() bool { return ls.ok.Load() > 1000 })
		// The standby started at H's last millisecond: the lowering write was applied.
		hLast := snowflake.DefaultLayout().Decode(lh.maxID.Load()).TimestampMs
		sb := e2e.SFInfoInt(t, s.Client(2), "snowflake_start_bound_ms")
		t.Logf("H's last ID in ms %d, the standby's start bound %d (%+d ms)", hLast, sb, sb-hLast)
		if sb > hLast+1000 {
			t.Errorf("the standby started %d ms past H's last ID: H's lowering write was not applied, the scenario was not modelled", sb-hLast)
		}
		px.SetMode(e2e.ProxyReset, 0)
		h.Restart()
		lh2 := ld.add("H restarted", h.Client(2))
		n := ls.ok.Load()
		e2e.Eventually(t, 20*time.Second, "H refusing while the standby serves", func() bool {
			return lh2.noWorker.Load() >= 300 && ls.ok.Load() > n+5000
		})
		if lh2.ok.Load() != 0 {
			t.Fatalf("H restarted in the outage served %d IDs from its data dir\n%s", lh2.ok.Load(), e2e.Tail(h.Log(), 30))
		}
		// ZooKeeper back for H, the standby gone: H serves again.
		px.SetMode(e2e.ProxyPass, 0)
		s.Kill()
		e2e.Eventually(t, 30*time.Second, "H serving again", func() bool { return lh2.ok.Load() > 1000 })
		ld.stop()
		t.Logf("%d distinct IDs recorded", ld.ids.Len())
		ld.ids.Check(t, 5000)
	})

	// 3. A data dir of <zk>/c1 restarted with --zk-addrs <unreachable>/c2, where another
	// instance holds the same worker id: NOWORKER, not the c1 id from the data dir.
	t.Run("other domain", func(t *testing.T) {
		name := e2e.ZKTestName(t)
		tol := []string{"--zk-outage-tolerance", "30s", "--lease-window", "1s", "--start-wait-max", "40s", seq0}
		a := e2e.Start(t, e2e.ZKArgs(t, z.Addr()+"/c1", name, tol...)...)
		b := e2e.Start(t, e2e.ZKArgs(t, z.Addr()+"/c2", name, tol...)...)
		if wa, wb := e2e.WorkerOf(t, a), e2e.WorkerOf(t, b); wa != wb {
			t.Fatalf("worker ids %d and %d, want the same id in both chroots", wa, wb)
		}
		ld := newLoads(t)
		// IDs are unique within a domain: c1's go to a set of their own.
		la, lb := &sfLoad{}, ld.add("B in c2", b.Client(2))
		c1 := e2e.NewIDSet()
		la.run(ld.ctx, &ld.wg, a.Client(2), "A in c1", c1)
		e2e.Eventually(t, 10*time.Second, "both serving", func() bool { return la.ok.Load() > 1000 && lb.ok.Load() > 1000 })
		a.Kill()
		down := e2e.StartProxy(t, z.Addr())
		down.SetMode(e2e.ProxyReset, 0)
		a2 := e2e.Start(t, withFlag(a.Args, "--zk-addrs", down.Addr()+"/c2")...)
		la2 := ld.add("A in c2 (unreachable)", a2.Client(2))
		n := lb.ok.Load()
		e2e.Eventually(t, 20*time.Second, "A refusing while B serves", func() bool {
			return la2.noWorker.Load() >= 300 && lb.ok.Load() > n+5000
		})
		ld.stop()
		t.Logf("%d distinct IDs in c1", c1.Len())
		c1.Check(t, 1000)
		if la2.ok.Load() != 0 {
			t.Errorf("A in another domain served %d IDs from its data dir\n%s", la2.ok.Load(), e2e.Tail(a2.Log(), 30))
		}
		if !strings.Contains(a2.Log(), "another worker-id domain") {
			t.Errorf("A's log does not name the domain:\n%s", e2e.Tail(a2.Log(), 30))
		}
		t.Logf("%d distinct IDs recorded", ld.ids.Len())
		ld.ids.Check(t, 5000)
	})

	// 4. Under --worker-reuse with one worker bit (two ids): X's first id is taken over by Y
	// and kept; X is restarted five times, a third identity taking X's free id over between
	// restarts. X must use its own free node each time: two nodes in all, no exhaustion.
	t.Run("reuse restarts keep own nodes", func(t *testing.T) {
		name := e2e.ZKTestName(t)
		extra := []string{"--worker-reuse", "--snowflake-bits", "51/1/11", "--lease-window", "500ms", seq0}
		x := e2e.Start(t, e2e.ZKArgs(t, z.Addr(), name, extra...)...)
		if w := e2e.WorkerOf(t, x); w != 0 {
			t.Fatalf("X: worker %d, want 0", w)
		}
		ids := e2e.NewIDSet()
		take := func(who string, l *e2e.Leafd) {
			v, err := l.Client(2).Do(context.Background(), "IDS.SNOWFLAKE", 100).Int64Slice()
			if err != nil {
				t.Fatalf("%s: %v", who, err)
			}
			ids.Add(who, v...)
		}
		take("X", x)
		if err := x.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		y := e2e.Start(t, e2e.ZKArgs(t, z.Addr(), name, extra...)...)
		if w := e2e.WorkerOf(t, y); w != 0 {
			t.Fatalf("Y: worker %d, want X's 0 taken over", w)
		}
		take("Y", y)
		adm := e2e.ZKAdmin(t, z.Addr())
		for i := range 5 {
			x.Restart()
			if w := e2e.WorkerOf(t, x); w != 1 {
				t.Fatalf("restart %d of X: worker %d, want its own free node 1\n%s", i, w, e2e.Tail(x.Log(), 20))
			}
			take("X", x)
			if i%2 == 0 {
				x.Kill()
			} else if err := x.Stop(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			e2e.WaitNoLive(t, adm, name, 1, 15*time.Second) // a killed X's session expires
			zi := e2e.Start(t, e2e.ZKArgs(t, z.Addr(), name, extra...)...)
			if w := e2e.WorkerOf(t, zi); w != 1 {
				t.Fatalf("round %d: Z got worker %d, want X's free 1", i, w)
			}
			take("Z", zi)
			if err := zi.Stop(10 * time.Second); err != nil {
				t.Fatal(err)
			}
		}
		kids, _, err := adm.Children("/snowflake/" + name + "/forever")
		if err != nil {
			t.Fatal(err)
		}
		if len(kids) != 2 {
			t.Errorf("forever nodes %v, want 2 (X's first, held by Y, and X's second)", kids)
		}
		t.Logf("%d distinct IDs recorded", ids.Len())
		ids.Check(t, 1000)
	})

	// 5. Restarts more often than the tolerance: a kill -9, then restarts killed while they
	// wait for the bound, half a second apart. The bound must not move, and the last restart
	// serves (a bound that each restart raised by the tolerance would ratchet until every
	// start was refused).
	t.Run("restarts do not ratchet the bound", func(t *testing.T) {
		name := e2e.ZKTestName(t)
		args := e2e.ZKArgs(t, z.Addr(), name, "--zk-outage-tolerance", "5s", "--lease-window", "1s", "--start-wait-max", "8s", seq0)
		r := e2e.Start(t, args...)
		w := e2e.WorkerOf(t, r)
		ids := e2e.NewIDSet()
		v, err := r.Client(2).Do(context.Background(), "IDS.SNOWFLAKE", 100).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		ids.Add("first run", v...)
		r.Kill()
		adm := e2e.ZKAdmin(t, z.Addr())
		var bounds []int64
		var lastKill time.Time
		for i := range 8 {
			// Each restart is killed before the clock passes the bound: it never issues.
			if i > 0 && time.Now().Add(1500*time.Millisecond).UnixMilli() > bounds[0] {
				break
			}
			r.Restart()
			st := e2e.MustState(t, adm, name, w)
			bounds = append(bounds, st.ReservedUntil)
			r.Kill()
			lastKill = time.Now()
			time.Sleep(300 * time.Millisecond) // pacing: restarts in quick succession, as a crash loop restarts
		}
		if len(bounds) < 3 {
			t.Fatalf("only %d restarts before the bound passed (machine too slow for the scenario)", len(bounds))
		}
		t.Logf("%d restarts that never issued, bounds %v", len(bounds), bounds)
		for _, b := range bounds[1:] {
			if b != bounds[0] {
				t.Fatalf("state node bounds over restarts that never issued: %v, want constant", bounds)
			}
		}
		r.Restart()
		c := r.Client(2)
		ids.Add("last restart", e2e.WaitServing(t, c, 10*time.Second))
		sb := e2e.SFInfoInt(t, c, "snowflake_start_bound_ms")
		switch {
		case sb == bounds[0]:
		case lastKill.UnixMilli() >= bounds[0] && sb > bounds[0] && sb <= bounds[0]+1000+500:
			// On a loaded machine the loop's last restart lived past the bound before its kill:
			// it could serve and extend the reservation by one --lease-window (1s). That
			// restart issued, so the bound moving once is right, not a ratchet.
			t.Logf("the last killed restart outlived the bound (killed %d ms after it): start bound %d, one window above",
				lastKill.UnixMilli()-bounds[0], sb)
		default:
			t.Errorf("last restart's start bound %d, want %d (the loop's last kill %d ms before the bound)",
				sb, bounds[0], bounds[0]-lastKill.UnixMilli())
		}
		ids.Check(t, 101)
	})

	// 6. A standby pair of one identity through three failovers: each time the holder's
	// ZooKeeper link is blackholed until the standby serves, then healed; the old holder goes
	// back to acquiring (NOWORKER saying it waits for the holder) and takes over at the next
	// failover.
	t.Run("standby pair through three failovers", func(t *testing.T) {
		name := e2e.ZKTestName(t)
		px := [2]*e2e.Proxy{e2e.StartProxy(t, z.Addr()), e2e.StartProxy(t, z.Addr())}
		args0 := e2e.ZKArgs(t, px[0].Addr(), name, "--lease-window", "1s", seq0)
		a := e2e.Start(t, args0...)
		e2e.WorkerOf(t, a)
		args1 := withFlag(e2e.ZKArgs(t, px[1].Addr(), name, "--lease-window", "1s", seq0), "--advertise-addr", a.Addr)
		b := e2e.Start(t, args1...)
		ls := [2]*e2e.Leafd{a, b}
		ld := newLoads(t)
		lds := [2]*sfLoad{ld.add("0", a.Client(2)), ld.add("1", b.Client(2))}
		holder := 0
		for round := range 3 {
			next := 1 - holder
			n := lds[holder].ok.Load()
			e2e.Eventually(t, 20*time.Second, "holder serving", func() bool { return lds[holder].ok.Load() > n+1000 })
			px[holder].SetMode(e2e.ProxyBlackhole, 0)
			m := lds[next].ok.Load()
			e2e.Eventually(t, 30*time.Second, "the standby taking over", func() bool { return lds[next].ok.Load() > m+1000 })
			px[holder].SetMode(e2e.ProxyPass, 0)
			// The old holder reconnects, finds the id held and waits for it.
			if !e2e.Poll(30*time.Second, func() bool {
				return strings.Contains(e2e.SFInfo(t, ls[holder].Client(2))["snowflake_status"], "held by another live process")
			}) {
				t.Fatalf("round %d: the old holder %d does not wait for the new one: status %q\n%s", round, holder,
					e2e.SFInfo(t, ls[holder].Client(2))["snowflake_status"], e2e.Tail(ls[holder].Log(), 30))
			}
			t.Logf("round %d: %d took over from %d; the old holder's last NOWORKER: %q", round, next, holder, lds[holder].refusal())
			holder = next
		}
		n := lds[holder].ok.Load()
		e2e.Eventually(t, 20*time.Second, "the last holder serving", func() bool { return lds[holder].ok.Load() > n+1000 })
		ld.stop()
		for i, l := range lds {
			if !l.sawHeld.Load() {
				t.Errorf("instance %d never answered NOWORKER saying it waits for the holder (last: %q)", i, l.refusal())
			}
		}
		t.Logf("%d distinct IDs recorded", ld.ids.Len())
		ld.ids.Check(t, 10000)
	})
}
