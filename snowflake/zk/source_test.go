package zk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/leafd/leafd/internal/quietlog"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/snowflake"
)

// zkServer returns the address of the ZooKeeper in LEAFD_TEST_ZK, or of a private one started
// for the test (skipped when ZooKeeper is not installed, failed under CI).
func zkServer(t *testing.T) string {
	t.Helper()
	if os.Getenv(testenv.EnvZK) != "" {
		return testenv.ZKAddr(t)
	}
	return testenv.StartZooKeeper(t).Addr()
}

func randomName(t *testing.T) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

func zkCfg(addr, name, ip string, dir string) Config {
	return Config{Servers: []string{addr}, Name: name, Addr: ip, DataDir: dir, SessionTimeout: 2 * time.Second,
		ReportInterval: 200 * time.Millisecond}
}

func newZK(t *testing.T, cfg Config) *Source {
	t.Helper()
	s, err := NewSource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// acquire acquires, retrying for up to 20s while ZooKeeper is unreachable (a connection
// dropped on a loaded machine is not what the tests are about).
func acquire(t *testing.T, s *Source) snowflake.Worker {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w, err := s.Acquire(ctx)
		cancel()
		if err == nil {
			return w
		}
		if !errors.Is(err, snowflake.ErrSourceUnavailable) || time.Now().After(deadline) {
			t.Fatalf("Acquire: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// adminConn is a plain client for inspecting and tampering with nodes.
func adminConn(t *testing.T, addr string) *gozk.Conn {
	t.Helper()
	c, ev, err := gozk.Connect([]string{addr}, 5*time.Second, gozk.WithLogInfo(false), gozk.WithLogger(zkLogger{quietlog.New(zap.NewNop(), 0, nil)}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range ev {
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	return c
}

func readNode(t *testing.T, c *gozk.Conn, path string) zkNode {
	t.Helper()
	b, _, err := c.Get(path)
	if err != nil {
		t.Fatalf("get %s: %v", path, err)
	}
	var n zkNode
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatalf("node %s: %v (%s)", path, err, b)
	}
	return n
}

// readState returns the state node of worker id of name.
func readState(t *testing.T, c *gozk.Conn, name string, id int64) zkState {
	t.Helper()
	p := fmt.Sprintf("/snowflake/%s/state/%d", name, id)
	b, _, err := c.Get(p)
	if err != nil {
		t.Fatalf("get %s: %v", p, err)
	}
	var st zkState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("node %s: %v (%s)", p, err, b)
	}
	return st
}

func TestParseNodeName(t *testing.T) {
	tests := []struct {
		name, in string
		addr     string
		seq      int64
		ok       bool
	}{
		{"leaf node", "10.0.0.8:9000-0000000007", "10.0.0.8:9000", 7, true},
		{"first", "127.0.0.1:6380-0000000000", "127.0.0.1:6380", 0, true},
		{"no dash", "10.0.0.8:9000", "", 0, false},
		{"not a number", "10.0.0.8:9000-abc", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, seq, ok := parseNodeName(tt.in)
			if addr != tt.addr || seq != tt.seq || ok != tt.ok {
				t.Errorf("got %q %d %v, want %q %d %v", addr, seq, ok, tt.addr, tt.seq, tt.ok)
			}
		})
	}
}

func TestDefaultAdvertiseAddr(t *testing.T) {
	got, err := DefaultAdvertiseAddr("0.0.0.0:6380")
	if errors.Is(err, ErrNoAdvertiseAddr) {
		// A host without a non-loopback IPv4 address: no identity, never 127.0.0.1.
		t.Logf("no non-loopback IPv4 address here: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(got)
	if err != nil || port != "6380" || net.ParseIP(host).To4() == nil {
		t.Fatalf("got %q, want an IPv4 address with port 6380", got)
	}
	if _, err := DefaultAdvertiseAddr("nonsense"); err == nil {
		t.Error("bad listen address: got nil error")
	}
	if _, err := DefaultAdvertiseAddr("127.0.0.1:0"); err == nil {
		t.Error("port 0: got nil error")
	}
}

func TestZKConfigValidate(t *testing.T) {
	good := Config{Servers: []string{"127.0.0.1:2181"}, Addr: "10.0.0.1:6380", DataDir: "/tmp/x"}
	tests := []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"good", func(*Config) {}, true},
		{"no servers", func(c *Config) { c.Servers = nil }, false},
		{"no addr", func(c *Config) { c.Addr = "" }, false},
		{"addr without port", func(c *Config) { c.Addr = "10.0.0.1" }, false},
		{"no data dir", func(c *Config) { c.DataDir = "" }, false},
		{"slash in name", func(c *Config) { c.Name = "a/b" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.mutate(&c)
			if err := c.Validate(); (err == nil) != tt.ok {
				t.Errorf("got %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

// TestZooKeeper runs the integration tests that share one ZooKeeper; each uses its own name.
func TestZooKeeper(t *testing.T) {
	addr := zkServer(t)

	t.Run("distinct ids, restart keeps the id, Leaf layout", func(t *testing.T) {
		name := randomName(t)
		s1 := newZK(t, zkCfg(addr, name, "10.0.0.1:6380", t.TempDir()))
		s2 := newZK(t, zkCfg(addr, name, "10.0.0.2:6380", t.TempDir()))
		w1, w2 := acquire(t, s1), acquire(t, s2)
		if w1.ID != 0 || w2.ID != 1 {
			t.Fatalf("got ids %d and %d, want 0 and 1 (the sequence numbers)", w1.ID, w2.ID)
		}
		until := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
		if err := s1.Extend(context.Background(), until); err != nil {
			t.Fatal(err)
		}
		s1.Close()

		c := adminConn(t, addr)
		kids, _, err := c.Children("/snowflake/" + name + "/forever")
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(kids)
		if want := []string{"10.0.0.1:6380-0000000000", "10.0.0.2:6380-0000000001"}; fmt.Sprint(kids) != fmt.Sprint(want) {
			t.Fatalf("nodes: got %v, want %v", kids, want)
		}
		n := readNode(t, c, "/snowflake/"+name+"/forever/"+kids[0])
		if n.IP != "10.0.0.1" || n.Port != "6380" || n.Timestamp == 0 {
			t.Errorf("node data: got %+v, want Leaf's ip/port/timestamp", n)
		}
		if st := readState(t, c, name, 0); st.ReservedUntil != until.UnixMilli() || st.Holder != "10.0.0.1:6380" {
			t.Errorf("state node: got %+v, want reserved_until %d held by 10.0.0.1:6380", st, until.UnixMilli())
		}

		// Restart on a fresh data dir (no cache): the node by ip:port gives the id back, with
		// the bound persisted in ZooKeeper.
		s1b := newZK(t, zkCfg(addr, name, "10.0.0.1:6380", t.TempDir()))
		w := acquire(t, s1b)
		if w.ID != 0 || !w.Bound.Equal(until) {
			t.Fatalf("restart: got %+v, want id 0 bound %v", w, until)
		}
	})

	t.Run("five at once on an empty path", func(t *testing.T) {
		name := randomName(t)
		var wg sync.WaitGroup
		ids := make([]int64, 5)
		errs := make([]error, 5)
		for i := range 5 {
			s := newZK(t, zkCfg(addr, name, fmt.Sprintf("10.0.1.%d:6380", i+1), t.TempDir()))
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				w, err := s.Acquire(ctx)
				ids[i], errs[i] = w.ID, err
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		if fmt.Sprint(ids) != "[0 1 2 3 4]" {
			t.Fatalf("got ids %v, want 0..4 each once", ids)
		}
	})

	t.Run("exhausted worker ids", func(t *testing.T) {
		name := randomName(t)
		for i := range 2 {
			cfg := zkCfg(addr, name, fmt.Sprintf("10.0.2.%d:6380", i+1), t.TempDir())
			cfg.MaxWorkerID = 1
			acquire(t, newZK(t, cfg))
		}
		cfg := zkCfg(addr, name, "10.0.2.9:6380", t.TempDir())
		cfg.MaxWorkerID = 1
		s := newZK(t, cfg)
		_, err := s.Acquire(context.Background())
		if err == nil || !strings.Contains(err.Error(), "exhausted") || errors.Is(err, snowflake.ErrSourceUnavailable) {
			t.Fatalf("got %v, want a permanent 'exhausted' error", err)
		}
		c := clock.NewFakeMs(time.Now().UnixMilli())
		gcfg := testConfig(c)
		gcfg.Layout = snowflake.Layout{TimeBits: 41, WorkerBits: 1, SeqBits: 21}
		cfg.DataDir = t.TempDir()
		s2, err := NewSource(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := snowflake.New(gcfg, s2, nil); err == nil || !strings.Contains(err.Error(), "exhausted") {
			t.Fatalf("New: got %v, want the exhaustion error", err)
		}
	})

	t.Run("generator on zookeeper", func(t *testing.T) {
		name := randomName(t)
		s := newZK(t, zkCfg(addr, name, "10.0.3.1:6380", t.TempDir()))
		g, err := snowflake.New(snowflake.Config{LeaseWindow: time.Second}, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		var last int64
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			id, err := g.Next()
			if err != nil {
				t.Fatal(err)
			}
			if id <= last {
				t.Fatalf("%d after %d", id, last)
			}
			last = id
		}
		in := g.Info()
		if in.WorkerID != 0 || in.Source != "zookeeper" || in.Extensions < 3 {
			t.Errorf("info: got %+v", in)
		}
		c := adminConn(t, addr)
		// The lease is published only after ZooKeeper confirmed it: no wait needed.
		if st, ms := readState(t, c, name, 0), g.Decode(last).TimestampMs; st.ReservedUntil <= ms {
			t.Errorf("zk reserved_until %d not above the last id's ms %d", st.ReservedUntil, ms)
		}
	})

	t.Run("reuse: takeover above the dead holder's bound", func(t *testing.T) {
		name := randomName(t)
		cfgA := zkCfg(addr, name, "10.0.4.1:6380", t.TempDir())
		cfgA.Reuse = true
		a := newZK(t, cfgA)
		wa := acquire(t, a)
		until := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
		if err := a.Extend(context.Background(), until); err != nil {
			t.Fatal(err)
		}
		a.Close() // the session ends: the live node goes

		// A non-reuse node is never taken over.
		plain := newZK(t, zkCfg(addr, name, "10.0.4.2:6380", t.TempDir()))
		if w := acquire(t, plain); w.ID == wa.ID {
			t.Fatalf("reuse off took over id %d", w.ID)
		}
		plain.Close()

		cfgB := zkCfg(addr, name, "10.0.4.3:6380", t.TempDir())
		cfgB.Reuse = true
		b := newZK(t, cfgB)
		wb := acquire(t, b)
		if wb.ID != wa.ID || !wb.Bound.Equal(until) {
			t.Fatalf("takeover: got %+v, want id %d bound %v", wb, wa.ID, until)
		}
		// A third reuse instance cannot take the same id while B is live; the no-reuse node of
		// "plain" is not eligible either, so it gets a new node.
		cfgC := zkCfg(addr, name, "10.0.4.4:6380", t.TempDir())
		cfgC.Reuse = true
		if wc := acquire(t, newZK(t, cfgC)); wc.ID == wa.ID {
			t.Fatalf("id %d given to two live instances", wc.ID)
		}
		// The former holder comes back: its id is held by B, so it gets another.
		cfgA.DataDir = t.TempDir()
		if w := acquire(t, newZK(t, cfgA)); w.ID == wa.ID {
			t.Fatalf("former holder got id %d back while B holds it", w.ID)
		}
	})

	t.Run("reuse then no reuse: the node stops being eligible", func(t *testing.T) {
		name := randomName(t)
		cfgA := zkCfg(addr, name, "10.0.8.1:6380", t.TempDir())
		cfgA.Reuse = true
		a := newZK(t, cfgA)
		wa := acquire(t, a)
		if err := a.Extend(context.Background(), time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		a.Close()
		cfgA.Reuse = false
		a2 := newZK(t, cfgA)
		if w := acquire(t, a2); w.ID != wa.ID {
			t.Fatalf("restart without reuse: got id %d, want %d", w.ID, wa.ID)
		}
		cfgB := zkCfg(addr, name, "10.0.8.2:6380", t.TempDir())
		cfgB.Reuse = true
		if w := acquire(t, newZK(t, cfgB)); w.ID == wa.ID {
			t.Fatalf("id %d taken over from a live no-reuse holder", w.ID)
		}
	})

	t.Run("reuse: new session re-creates the live node, or finds the id lost", func(t *testing.T) {
		name := randomName(t)
		cfg := zkCfg(addr, name, "10.0.7.1:6380", t.TempDir())
		cfg.Reuse = true
		cfg.ReportInterval = time.Hour
		a := newZK(t, cfg)
		w := acquire(t, a)
		live := fmt.Sprintf("/snowflake/%s/live/%d", name, w.ID)
		c := adminConn(t, addr)

		// What a session expiry does: the ephemeral node is gone. The new session's refresh
		// claims it again.
		if err := c.Delete(live, -1); err != nil {
			t.Fatal(err)
		}
		a.zkMu.Lock()
		a.session = 0 // as if the session had changed
		a.zkMu.Unlock()
		a.refresh()
		b, _, err := c.Get(live)
		var l zkLive
		if err != nil || json.Unmarshal(b, &l) != nil || l.Token != a.token {
			t.Fatalf("live node after a new session: got %s, %v; want ours", b, err)
		}
		if err := a.Extend(context.Background(), time.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}

		// Someone else took the id while our session was gone: we must stop.
		if err := c.Delete(live, -1); err != nil {
			t.Fatal(err)
		}
		other, _ := json.Marshal(zkLive{Holder: "10.0.7.2:6380", Instance: "elsewhere", Token: "other"})
		if _, err := c.Create(live, other, gozk.FlagEphemeral, gozk.WorldACL(gozk.PermAll)); err != nil {
			t.Fatal(err)
		}
		a.zkMu.Lock()
		a.session = 0
		a.zkMu.Unlock()
		a.refresh()
		if err := a.Extend(context.Background(), time.Now().Add(2*time.Second)); !errors.Is(err, snowflake.ErrNoWorker) {
			t.Fatalf("Extend after the id was taken: got %v, want ErrNoWorker", err)
		}
	})

	t.Run("reuse: a stalled holder cannot issue past its ZK bound", func(t *testing.T) {
		name := randomName(t)
		cfgA := zkCfg(addr, name, "10.0.5.1:6380", t.TempDir())
		cfgA.Reuse = true
		cfgA.ReportInterval = time.Hour // "stalled": no background activity of its own
		a := newZK(t, cfgA)
		ga, err := snowflake.New(snowflake.Config{LeaseWindow: time.Second, MaxWait: 5 * time.Millisecond}, a, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ga.Close()
		var aIDs []int64
		aIDs = append(aIDs, mustNext(t, ga))
		wA := ga.Info().WorkerID

		// Its session expires while it is stalled: the live node disappears.
		c := adminConn(t, addr)
		if err := c.Delete(fmt.Sprintf("/snowflake/%s/live/%d", name, wA), -1); err != nil {
			t.Fatal(err)
		}
		cfgB := zkCfg(addr, name, "10.0.5.2:6380", t.TempDir())
		cfgB.Reuse = true
		b := newZK(t, cfgB)
		gb, err := snowflake.New(snowflake.Config{LeaseWindow: time.Second}, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer gb.Close()
		waitReady(t, gb)
		if gb.Info().WorkerID != wA {
			t.Fatalf("B got worker %d, want A's %d taken over", gb.Info().WorkerID, wA)
		}
		bFirst := mustNext(t, gb)

		// A resumes: whatever it issues with the old id is below B's first ID, and it soon
		// stops using that id (it acquires another one: TestZKStandbyPairFailovers).
		deadline := time.Now().Add(3 * time.Second)
		var aErr error
		for time.Now().Before(deadline) {
			id, err := ga.Next()
			if err != nil {
				aErr = err
				break
			}
			if ga.Decode(id).WorkerID != wA {
				aErr = fmt.Errorf("A moved to worker id %d", ga.Decode(id).WorkerID)
				break
			}
			aIDs = append(aIDs, id)
		}
		if aErr == nil {
			t.Fatalf("stalled holder: kept issuing with worker id %d for 3s after the takeover", wA)
		}
		if maxA := aIDs[len(aIDs)-1]; maxA >= bFirst {
			t.Fatalf("overlap: A issued %d (ms %d), B's first is %d (ms %d)", maxA, ga.Decode(maxA).TimestampMs, bFirst, gb.Decode(bFirst).TimestampMs)
		}
		if _, err := gb.Next(); err != nil {
			t.Fatalf("B: %v", err)
		}
	})
}

// TestZooKeeperOutage kills and restarts a private ZooKeeper. Without ZooKeeper an instance
// issues at most its outage tolerance past the bound ZooKeeper last confirmed; a restart from
// the data dir's state likewise; a new instance waits for ZooKeeper.
func TestZooKeeperOutage(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	ctx := context.Background()

	name := randomName(t)
	dir := t.TempDir()
	tolCfg := zkCfg(z.Addr(), name, "10.0.6.1:6380", dir)
	tolCfg.OutageTolerance = 5 * time.Second
	s1, err := NewSource(tolCfg)
	if err != nil {
		t.Fatal(err)
	}
	w := acquire(t, s1)
	confirmed := time.Now().Add(time.Second).Truncate(time.Millisecond)
	if err := s1.Extend(ctx, confirmed); err != nil {
		t.Fatal(err)
	}
	reuseCfg := zkCfg(z.Addr(), name, "10.0.6.2:6380", t.TempDir())
	reuseCfg.Reuse = true
	r := newZK(t, reuseCfg)
	acquire(t, r)
	if err := r.Extend(ctx, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}

	z.Kill()

	// Within the tolerance: the data dir alone, promptly.
	until := confirmed.Add(3 * time.Second)
	start := time.Now()
	if err := s1.Extend(ctx, until); err != nil {
		t.Fatalf("Extend during the outage within the tolerance: %v", err)
	}
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Errorf("Extend took %v during the outage", el)
	}
	// Beyond it: refused.
	if err := s1.Extend(ctx, confirmed.Add(5*time.Second+time.Millisecond)); !errors.Is(err, snowflake.ErrSourceUnavailable) {
		t.Fatalf("Extend beyond the tolerance: got %v, want ErrSourceUnavailable", err)
	}
	// No tolerance (reuse on, the default 0): the bound must reach ZooKeeper.
	ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := r.Extend(ectx, time.Now().Add(3*time.Second)); err == nil {
		t.Error("Extend during the outage without tolerance: got nil error")
	}
	cancel()
	s1.Close()

	// Restart while ZooKeeper is down: the data dir gives the id and the bound.
	s2, err := NewSource(tolCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	w2 := acquire(t, s2)
	if w2.ID != w.ID || !w2.Bound.Equal(until) {
		t.Fatalf("from the data dir: got %+v, want id %d bound %v", w2, w.ID, until)
	}
	// Still within the tolerance of the last confirmed bound, not beyond.
	if err := s2.Extend(ctx, confirmed.Add(6*time.Second)); !errors.Is(err, snowflake.ErrSourceUnavailable) {
		t.Fatalf("restarted: Extend beyond the tolerance: got %v", err)
	}

	// A new instance with neither ZooKeeper nor local state: the generator starts without a worker.
	s3, err := NewSource(zkCfg(z.Addr(), name, "10.0.6.3:6380", t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	g3, err := snowflake.New(snowflake.Config{ExtendTimeout: 500 * time.Millisecond}, s3, nil)
	if err != nil {
		t.Fatalf("New without ZooKeeper and local state: %v", err)
	}
	defer g3.Close()
	if _, err := g3.Next(); !errors.Is(err, snowflake.ErrNoWorker) {
		t.Fatalf("got %v, want ErrNoWorker", err)
	}

	until2 := confirmed.Add(4 * time.Second)
	if err := s2.Extend(ctx, until2); err != nil {
		t.Fatal(err)
	}
	z.Start()

	// The local bound reaches ZooKeeper; the waiting generator gets its worker.
	c := adminConn(t, z.Addr())
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _, err := c.Get(fmt.Sprintf("/snowflake/%s/state/%d", name, w.ID))
		var st zkState
		if err == nil && json.Unmarshal(b, &st) == nil && st.ReservedUntil == until2.UnixMilli() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ZooKeeper never got the local bound: %s %v", b, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		_, err := g3.Next()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("generator never got a worker: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if id := g3.Info().WorkerID; id == w.ID || id < 0 {
		t.Errorf("new instance got worker %d (cached instance has %d)", id, w.ID)
	}
}

// An instance that ran with worker reuse and restarts without it while ZooKeeper is down must
// not serve its cached id: the id may have been taken over by a reuse successor meanwhile, and
// only ZooKeeper can tell (the own-node path checks it; the cache fallback cannot).
func TestZKCacheOfReuseRunNotUsedWithoutZooKeeper(t *testing.T) {
	addr := zkServer(t)
	ctx := context.Background()
	name := randomName(t)
	dirA := t.TempDir()

	cfgA := zkCfg(addr, name, "10.0.8.1:6380", dirA)
	cfgA.Reuse = true
	a, err := NewSource(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	wa := acquire(t, a)
	if err := a.Extend(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	a.Close() // A is gone: its live node goes with its session

	cfgB := zkCfg(addr, name, "10.0.8.2:6380", t.TempDir())
	cfgB.Reuse = true
	b := newZK(t, cfgB)
	if wb := acquire(t, b); wb.ID != wa.ID {
		t.Fatalf("B got worker %d, want A's %d taken over", wb.ID, wa.ID)
	}

	// A restarts without reuse, ZooKeeper unreachable from it: its cache names the id B holds.
	cfgA2 := zkCfg("127.0.0.1:1", name, "10.0.8.1:6380", dirA)
	a2 := newZK(t, cfgA2)
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	w, err := a2.Acquire(actx)
	if err == nil {
		t.Fatalf("A without reuse and without ZooKeeper: got worker %+v from the cache, held by B; want an error", w)
	}
	if !errors.Is(err, snowflake.ErrSourceUnavailable) {
		t.Fatalf("got %v, want ErrSourceUnavailable (retry until ZooKeeper answers)", err)
	}
}

// TestZKLayoutNode: the first instance of a domain records its layout in
// /snowflake/<name>/layout; an instance of the same domain with another layout (on a fresh
// data dir) is refused, one with the same layout starts.
func TestZKLayoutNode(t *testing.T) {
	addr := zkServer(t)
	name := randomName(t)
	a := newZK(t, zkCfg(addr, name, "10.7.0.1:6380", t.TempDir()))
	a.UseLayout(snowflake.Layout{})
	acquire(t, a)
	b, _, err := adminConn(t, addr).Get("/snowflake/" + name + "/layout")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`{"epoch_ms":%d,"time_bits":41,"worker_bits":10,"seq_bits":12}`, snowflake.DefaultEpochMs); string(b) != want {
		t.Fatalf("layout node %s, want %s", b, want)
	}
	other := newZK(t, zkCfg(addr, name, "10.7.0.2:6380", t.TempDir()))
	other.UseLayout(snowflake.Layout{Epoch: time.UnixMilli(snowflake.DefaultEpochMs + 1000)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := other.Acquire(ctx); !errors.Is(err, snowflake.ErrLayoutChanged) || !strings.Contains(err.Error(), "--snowflake-epoch") {
		t.Fatalf("another epoch in the same domain: want ErrLayoutChanged naming the option, got %v", err)
	}
	same := newZK(t, zkCfg(addr, name, "10.7.0.3:6380", t.TempDir()))
	same.UseLayout(snowflake.DefaultLayout())
	acquire(t, same)
}
