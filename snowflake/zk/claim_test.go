package zk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// Tests of the exclusive claim, the fence, the data dir's bound and Leaf compatibility. Each
// names the safety mechanism it pins down; docs/SNOWFLAKE.md lists the mutants they kill.

// leafEndpoint is Leaf's Endpoint class as Jackson reads it: a node with any other field, or a
// field of another type, is rejected (Leaf's ObjectMapper fails on unknown properties).
type leafEndpoint struct {
	IP        string `json:"ip"`
	Port      string `json:"port"`
	Timestamp int64  `json:"timestamp"`
}

func parseLeafStrict(b []byte) (leafEndpoint, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var e leafEndpoint
	if err := d.Decode(&e); err != nil {
		return e, err
	}
	if d.More() {
		return e, errors.New("trailing data")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return e, err
	}
	if len(raw) != 3 {
		return e, fmt.Errorf("%d fields, want Leaf's 3", len(raw))
	}
	return e, nil
}

// checkLeafTree parses every forever node under root strictly in Leaf's shape.
func checkLeafTree(t *testing.T, c *gozk.Conn, root string) int {
	t.Helper()
	kids, _, err := c.Children(root + "/forever")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		b, _, err := c.Get(root + "/forever/" + k)
		if err != nil {
			t.Fatal(err)
		}
		e, err := parseLeafStrict(b)
		if err != nil {
			t.Errorf("node %s is not Leaf's Endpoint: %v: %s", k, err, b)
			continue
		}
		if addr, _, _ := parseNodeName(k); addr != e.IP+":"+e.Port || e.Timestamp <= 0 {
			t.Errorf("node %s: data %+v does not match its name", k, e)
		}
	}
	return len(kids)
}

func TestLeafStrictParser(t *testing.T) {
	for _, bad := range []string{
		`{"ip":"10.0.0.1","port":"6380","timestamp":1,"reserved_until":2}`, // leafd's old nodes
		`{"ip":"10.0.0.1","port":6380,"timestamp":1}`,                      // port is a String in Leaf
		`{"ip":"10.0.0.1","port":"6380"}`,
	} {
		if _, err := parseLeafStrict([]byte(bad)); err == nil {
			t.Errorf("strict parser accepted %s", bad)
		}
	}
	if _, err := parseLeafStrict([]byte(`{"ip":"10.0.0.1","port":"6380","timestamp":1}`)); err != nil {
		t.Error(err)
	}
}

func TestZKClaim(t *testing.T) {
	addr := zkServer(t)
	ctx := context.Background()

	// The exclusive claim: two processes with one identity and two data dirs never hold the id
	// at once; the second one is told who holds it, and takes over once it is gone, above
	// the holder's bound.
	t.Run("same identity, two data dirs", func(t *testing.T) {
		name := randomName(t)
		a := newZK(t, zkCfg(addr, name, "10.1.0.1:6380", t.TempDir()))
		wa := acquire(t, a)
		until := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
		if err := a.Extend(ctx, until); err != nil {
			t.Fatal(err)
		}
		b := newZK(t, zkCfg(addr, name, "10.1.0.1:6380", t.TempDir()))
		_, err := b.Acquire(ctx)
		for end := time.Now().Add(20 * time.Second); errors.Is(err, snowflake.ErrSourceUnavailable) && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond) // a connection dropped on a loaded machine
			_, err = b.Acquire(ctx)
		}
		if !errors.Is(err, snowflake.ErrWorkerHeld) || !strings.Contains(err.Error(), "held by 10.1.0.1:6380") || !strings.Contains(err.Error(), a.instance) {
			t.Fatalf("second process: got %v, want ErrWorkerHeld naming the holder and its data dir", err)
		}
		// The generator keeps such an instance alive in the no-worker state.
		gb, err := snowflake.New(snowflake.Config{ExtendTimeout: 300 * time.Millisecond}, b, nil)
		if err != nil {
			t.Fatalf("New with the id held: %v", err)
		}
		defer gb.Close()
		if _, err := gb.Next(); !errors.Is(err, snowflake.ErrNoWorker) {
			t.Fatalf("Next with the id held: got %v, want ErrNoWorker", err)
		}
		a.Close() // the session ends: the claim goes
		waitReady(t, gb)
		if in := gb.Info(); in.WorkerID != wa.ID || in.StartBound.Before(until) {
			t.Fatalf("after the holder left: %+v, want worker %d above %v", in, wa.ID, until)
		}
	})

	// A restart on the same data dir replaces the live node its dead predecessor left (its
	// session not yet expired); that is safe because the data dir is locked.
	t.Run("same data dir replaces its predecessor's claim", func(t *testing.T) {
		name := randomName(t)
		dir := t.TempDir()
		a := newZK(t, zkCfg(addr, name, "10.1.1.1:6380", dir))
		w := acquire(t, a)
		inst := a.instance
		a.Close()
		c := adminConn(t, addr)
		dead, _ := json.Marshal(zkLive{Holder: "10.1.1.1:6380", Instance: inst, Token: "dead"})
		if _, err := c.Create(fmt.Sprintf("/snowflake/%s/live/%d", name, w.ID), dead, gozk.FlagEphemeral, gozk.WorldACL(gozk.PermAll)); err != nil {
			t.Fatal(err)
		}
		a2 := newZK(t, zkCfg(addr, name, "10.1.1.1:6380", dir))
		if w2 := acquire(t, a2); w2.ID != w.ID {
			t.Fatalf("restart: worker %d, want %d", w2.ID, w.ID)
		}
	})

	// The outage tolerance is part of the fence: another data dir starts above the holder's
	// bound plus its tolerance; the same data dir does not pay it.
	t.Run("successor adds the holder's tolerance", func(t *testing.T) {
		name := randomName(t)
		dir := t.TempDir()
		cfg := zkCfg(addr, name, "10.1.2.1:6380", dir)
		cfg.OutageTolerance = 2 * time.Second
		a := newZK(t, cfg)
		acquire(t, a)
		until := time.Now().Add(time.Second).Truncate(time.Millisecond)
		if err := a.Extend(ctx, until); err != nil {
			t.Fatal(err)
		}
		a.Close()
		other := newZK(t, zkCfg(addr, name, "10.1.2.1:6380", t.TempDir()))
		if w := acquire(t, other); !w.Bound.Equal(until.Add(2 * time.Second)) {
			t.Fatalf("other data dir: bound %v, want %v", w.Bound, until.Add(2*time.Second))
		}
		// other wrote its own state (tolerance 0) with that bound.
		other.Close()
		same := newZK(t, cfg)
		if w := acquire(t, same); !w.Bound.Equal(until.Add(2 * time.Second)) {
			t.Fatalf("back on the first data dir: bound %v, want %v", w.Bound, until.Add(2*time.Second))
		}
	})

	// The takeover's version check: a holder's write between the successor's read and write
	// makes the successor read again and start above it.
	t.Run("fence write is version-checked", func(t *testing.T) {
		name := randomName(t)
		cfgA := zkCfg(addr, name, "10.1.3.1:6380", t.TempDir())
		cfgA.Reuse = true
		a := newZK(t, cfgA)
		wa := acquire(t, a)
		if err := a.Extend(ctx, time.Now().Add(500*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		c := adminConn(t, addr)
		if err := c.Delete(fmt.Sprintf("/snowflake/%s/live/%d", name, wa.ID), -1); err != nil {
			t.Fatal(err) // as if A's session had expired while A runs on
		}
		later := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
		fired := false
		testHookFence = func(id int64) {
			if fired {
				return
			}
			fired = true
			if err := a.Extend(ctx, later); err != nil {
				t.Errorf("holder's write between the successor's read and write: %v", err)
			}
		}
		defer func() { testHookFence = nil }()
		cfgB := zkCfg(addr, name, "10.1.3.2:6380", t.TempDir())
		cfgB.Reuse = true
		b := newZK(t, cfgB)
		wb := acquire(t, b)
		if wb.ID != wa.ID || wb.Bound.Before(later) {
			t.Fatalf("successor: %+v, want worker %d with a bound not below the holder's last write %v", wb, wa.ID, later)
		}
		// And the holder's next write fails: the id is lost.
		if err := a.Extend(ctx, later.Add(time.Second)); !errors.Is(err, snowflake.ErrNoWorker) {
			t.Fatalf("holder after the takeover: got %v, want ErrNoWorker", err)
		}
	})

	// The reuse flag: an id whose holder ran without reuse is never taken over by another
	// identity, even with no live node.
	t.Run("no takeover without the holder's reuse flag", func(t *testing.T) {
		name := randomName(t)
		a := newZK(t, zkCfg(addr, name, "10.1.4.1:6380", t.TempDir()))
		wa := acquire(t, a)
		a.Close()
		cfgB := zkCfg(addr, name, "10.1.4.2:6380", t.TempDir())
		cfgB.Reuse = true
		if wb := acquire(t, newZK(t, cfgB)); wb.ID == wa.ID {
			t.Fatalf("reuse instance took over id %d of a holder without reuse", wb.ID)
		}
	})

	// Leaf compatibility: every forever node leafd writes parses as Leaf's Endpoint, strictly;
	// a tree Leaf wrote under a chroot is adopted (its node's id, above timestamp + 3s).
	t.Run("Leaf's tree under a chroot", func(t *testing.T) {
		name := randomName(t)
		chroot := "/" + randomName(t) + "/leaf"
		root := chroot + "/snowflake/" + name
		c := adminConn(t, addr)
		for _, p := range []string{chroot[:strings.LastIndexByte(chroot, '/')], chroot, chroot + "/snowflake", root, root + "/forever"} {
			if _, err := c.Create(p, nil, 0, gozk.WorldACL(gozk.PermAll)); err != nil {
				t.Fatal(err)
			}
		}
		ts := time.Now().UnixMilli()
		for _, ip := range []string{"10.1.5.1", "10.1.5.2"} {
			b, _ := json.Marshal(map[string]any{"ip": ip, "port": "8080", "timestamp": ts})
			if _, err := c.Create(root+"/forever/"+ip+":8080-", b, gozk.FlagSequence, gozk.WorldACL(gozk.PermAll)); err != nil {
				t.Fatal(err)
			}
		}
		servers, cr, err := ParseConnect(addr + chroot)
		if err != nil || cr != chroot {
			t.Fatalf("ParseConnect: %v %q", err, cr)
		}
		cfg := zkCfg(addr, name, "10.1.5.2:8080", t.TempDir())
		cfg.Servers, cfg.Chroot = servers, cr
		s := newZK(t, cfg)
		w := acquire(t, s)
		if w.ID != 1 || w.Bound.UnixMilli() != ts+leafReportMs {
			t.Fatalf("adopting Leaf's node: %+v, want worker 1 above %d", w, ts+leafReportMs)
		}
		cfg2 := zkCfg(addr, name, "10.1.5.3:8080", t.TempDir())
		cfg2.Servers, cfg2.Chroot = servers, cr
		if w := acquire(t, newZK(t, cfg2)); w.ID != 2 {
			t.Fatalf("new identity in Leaf's tree: worker %d, want 2", w.ID)
		}
		s.zkMu.Lock()
		err = s.reportLocked(ctx)
		s.zkMu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if n := checkLeafTree(t, c, root); n != 3 {
			t.Fatalf("%d forever nodes, want 3", n)
		}
		// Nothing outside the chroot.
		if ok, _, _ := c.Exists("/snowflake/" + name); ok {
			t.Errorf("/snowflake/%s exists outside the chroot", name)
		}
		// leafd's own state is beside forever, in nodes Leaf does not read.
		b, _, err := c.Get(root + "/state/1")
		var st zkState
		if err != nil || json.Unmarshal(b, &st) != nil || st.Holder != "10.1.5.2:8080" {
			t.Fatalf("state node: %s %v", b, err)
		}
	})

	t.Run("every node leafd writes is Leaf's", func(t *testing.T) {
		name := randomName(t)
		for i := range 3 {
			cfg := zkCfg(addr, name, fmt.Sprintf("10.1.6.%d:6380", i+1), t.TempDir())
			cfg.Reuse = i == 1
			s := newZK(t, cfg)
			acquire(t, s)
			if err := s.Extend(ctx, time.Now().Add(time.Second)); err != nil {
				t.Fatal(err)
			}
			s.zkMu.Lock()
			err := s.reportLocked(ctx)
			s.zkMu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := checkLeafTree(t, adminConn(t, addr), "/snowflake/"+name); n != 3 {
			t.Fatalf("%d nodes, want 3", n)
		}
	})
}

// One time bound per data dir: switching sources keeps it.
func TestDataDirBoundAcrossSources(t *testing.T) {
	addr := zkServer(t)
	ctx := context.Background()
	dir := t.TempDir()
	until := time.Now().Add(4 * time.Second).Truncate(time.Millisecond)

	f, err := snowflake.NewFileSource(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Extend(ctx, until); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// file → ZooKeeper (a fresh name: worker 0 again, the id the file held too).
	z := newZK(t, zkCfg(addr, randomName(t), "10.2.0.1:6380", dir))
	w := acquire(t, z)
	if w.ID != 0 || w.Bound.Before(until) {
		t.Fatalf("ZooKeeper after file: %+v, want worker 0 with a bound not below %v", w, until)
	}
	later := until.Add(time.Second)
	if err := z.Extend(ctx, later); err != nil {
		t.Fatal(err)
	}
	z.Close()

	// ZooKeeper → static, → file.
	st, err := snowflake.NewStaticSource(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := st.Acquire(ctx); err != nil || w.Bound.Before(later) {
		t.Fatalf("static after ZooKeeper: %+v %v, want a bound not below %v", w, err, later)
	}
	st.Close()
	f2, err := snowflake.NewFileSource(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if w, err := f2.Acquire(ctx); err != nil || w.Bound.Before(later) || w.ID != 0 {
		t.Fatalf("file after ZooKeeper: %+v %v, want worker 0 and a bound not below %v", w, err, later)
	}
}

// The legacy ZooKeeper cache of earlier versions is merged into the data dir's state.
func TestLegacyCacheMerged(t *testing.T) {
	dir := t.TempDir()
	until := time.Now().Add(time.Hour).UnixMilli()
	b, _ := json.Marshal(statefile.State{WorkerID: 3, ReservedUntilMs: until, Addr: "10.0.0.1:6380", Name: "x"})
	if err := writeFile(dir+"/"+CacheFile, b); err != nil {
		t.Fatal(err)
	}
	f, err := snowflake.NewFileSource(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := f.Acquire(context.Background())
	if err != nil || w.Bound.UnixMilli() != until || w.ID != 0 {
		t.Fatalf("got %+v %v, want worker 0 (not ZooKeeper's 3) above the legacy bound %d", w, err, until)
	}
}

func writeFile(path string, b []byte) error { return os.WriteFile(path, b, 0o644) }

// An id taken from the data dir during an outage is confirmed when ZooKeeper returns only if no
// other data dir claimed it meanwhile (a standby during a partition, since gone): that one may
// have issued above what this data dir knows.
func TestZKResolveAfterOutageRefusesForeignState(t *testing.T) {
	addr := zkServer(t)
	ctx := context.Background()
	name := randomName(t)
	dir := t.TempDir()
	cfg := zkCfg(addr, name, "10.3.0.1:6380", dir)
	cfg.OutageTolerance = 5 * time.Second
	cfg.ReportInterval = time.Hour
	a := newZK(t, cfg)
	w := acquire(t, a)
	until := time.Now().Add(time.Second).Truncate(time.Millisecond)
	if err := a.Extend(ctx, until); err != nil {
		t.Fatal(err)
	}
	a.Close()

	// Meanwhile (a partition) a standby of the same identity claimed the id, and is gone again.
	b := newZK(t, zkCfg(addr, name, "10.3.0.1:6380", t.TempDir()))
	if wb := acquire(t, b); wb.ID != w.ID {
		t.Fatalf("standby got %d, want %d", wb.ID, w.ID)
	}
	b.Close()

	// a2 restarted from the data dir while it could not reach ZooKeeper (as Acquire's
	// fallback leaves it); now ZooKeeper answers.
	a2 := newZK(t, cfg)
	a2.zkMu.Lock()
	a2.mu.Lock()
	a2.id, a2.node, a2.acquired, a2.zkUntil, a2.tolerance, a2.cacheHigh = w.ID, "", true, until.UnixMilli(), 5000, until.UnixMilli()
	a2.mu.Unlock()
	a2.zkMu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); a2.conn.State() != gozk.StateHasSession; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no ZooKeeper session")
		}
	}
	a2.refresh()
	if err := a2.Extend(ctx, until.Add(time.Second)); !errors.Is(err, snowflake.ErrNoWorker) {
		t.Fatalf("Extend after another data dir claimed the id: got %v, want ErrNoWorker", err)
	}
}
