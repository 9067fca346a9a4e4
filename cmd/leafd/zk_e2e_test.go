package main

// End-to-end tests of snowflake mode with ZooKeeper worker ids: the built binary, real
// ZooKeeper (the shared one of scripts/test.sh, or a private one when a test must kill it),
// go-redis. Each test uses its own --name, so tests sharing one ZooKeeper never see each
// other's nodes, and a distinct --advertise-addr per instance to model distinct hosts.

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/snowflake"
	"github.com/redis/go-redis/v9"
)

// zkTestName is a cluster name unique to the test and the run (a developer's long-lived
// LEAFD_TEST_ZK keeps the nodes of earlier runs).
func zkTestName(t *testing.T) string {
	t.Helper()
	n := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return n + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// zkArgs are the arguments of an instance listening on a fresh port that is also its
// advertised identity.
func zkArgs(t *testing.T, zkAddr, name string, extra ...string) []string {
	t.Helper()
	addr := freeAddr(t)
	return append([]string{"--zk-addrs", zkAddr, "--name", name, "--addr", addr, "--advertise-addr", addr,
		"--zk-session-timeout", "1s"}, extra...)
}

// sfInfo returns the fields of INFO snowflake.
func sfInfo(t testing.TB, c *redis.Client) map[string]string {
	t.Helper()
	s, err := c.Info(context.Background(), "snowflake").Result()
	if err != nil {
		t.Fatalf("INFO snowflake: %v", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

func sfInfoInt(t testing.TB, c *redis.Client, key string) int64 {
	t.Helper()
	m := sfInfo(t, c)
	v, err := strconv.ParseInt(m[key], 10, 64)
	if err != nil {
		t.Fatalf("INFO snowflake %s: got %q, want an integer (%v)", key, m[key], m)
	}
	return v
}

func sfNext(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	id, err := c.Do(context.Background(), "IDS.SNOWFLAKE").Int64()
	if err != nil {
		t.Fatalf("IDS.SNOWFLAKE: %v", err)
	}
	return id
}

// sfDecode returns IDS.DECODE's fields as integers (time as the string's length check aside).
func sfDecode(t testing.TB, c *redis.Client, id int64) (tsMs, worker, seq int64, tm string) {
	t.Helper()
	v, err := c.Do(context.Background(), "IDS.DECODE", id).Result()
	if err != nil {
		t.Fatalf("IDS.DECODE %d: %v", id, err)
	}
	m := map[string]any{}
	switch r := v.(type) {
	case map[any]any: // RESP3
		for k, x := range r {
			m[fmt.Sprint(k)] = x
		}
	case []any: // RESP2: flat array
		for i := 0; i+1 < len(r); i += 2 {
			m[fmt.Sprint(r[i])] = r[i+1]
		}
	default:
		t.Fatalf("IDS.DECODE %d: got %T %v, want a map", id, v, v)
	}
	num := func(k string) int64 {
		n, ok := m[k].(int64)
		if !ok {
			t.Fatalf("IDS.DECODE %d: field %s = %v (%T), want an integer", id, k, m[k], m[k])
		}
		return n
	}
	tm, _ = m["time"].(string)
	return num("timestamp_ms"), num("worker_id"), num("sequence"), tm
}

// workerOf returns the instance's worker id, checking INFO against IDS.DECODE of a new ID. It
// waits (up to 20s) for snowflake to serve: a start leaves the wait for the time bound to the
// background.
func workerOf(t testing.TB, l *leafd) int64 {
	t.Helper()
	c := l.client(3)
	id := waitServing(t, c, 20*time.Second)
	w := sfInfoInt(t, c, "snowflake_worker_id")
	if _, dw, _, _ := sfDecode(t, c, id); dw != w {
		t.Fatalf("%s: IDS.DECODE says worker %d, INFO says %d", l.addr, dw, w)
	}
	return w
}

// waitServing polls IDS.SNOWFLAKE until it returns an ID, for at most d.
func waitServing(t testing.TB, c *redis.Client, d time.Duration) int64 {
	t.Helper()
	end := time.Now().Add(d)
	for {
		id, err := c.Do(context.Background(), "IDS.SNOWFLAKE").Int64()
		if err == nil {
			return id
		}
		if time.Now().After(end) {
			t.Fatalf("IDS.SNOWFLAKE still failing after %v: %v", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// zkAdmin is a plain ZooKeeper client for inspecting nodes.
func zkAdmin(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// zkForever is a forever node's JSON: Leaf's Endpoint.
type zkForever struct {
	IP        string `json:"ip"`
	Port      string `json:"port"`
	Timestamp int64  `json:"timestamp"`
}

// foreverNode reads the node of worker id under /snowflake/<name>/forever.
func foreverNode(t *testing.T, c *zk.Conn, name string, id int64) (string, zkForever) {
	t.Helper()
	dir := "/snowflake/" + name + "/forever"
	kids, _, err := c.Children(dir)
	if err != nil {
		t.Fatalf("children of %s: %v", dir, err)
	}
	for _, k := range kids {
		if strings.HasSuffix(k, fmt.Sprintf("-%010d", id)) {
			b, _, err := c.Get(dir + "/" + k)
			if err != nil {
				t.Fatal(err)
			}
			var n zkForever
			if err := json.Unmarshal(b, &n); err != nil {
				t.Fatalf("node %s: %v: %s", k, err, b)
			}
			return k, n
		}
	}
	t.Fatalf("no node for worker id %d in %s: %v", id, dir, kids)
	return "", zkForever{}
}

// zkStateNode is leafd's state node of a worker id (/snowflake/<name>/state/<id>).
type zkStateNode struct {
	Holder        string `json:"holder"`
	Instance      string `json:"instance"`
	Token         string `json:"token"`
	ReservedUntil int64  `json:"reserved_until"`
	Reuse         bool   `json:"reuse"`
	ToleranceMs   int64  `json:"tolerance_ms"`
}

// stateNode reads the state node of worker id; ok is false when it cannot be read.
func stateNode(c *zk.Conn, name string, id int64) (zkStateNode, bool) {
	b, _, err := c.Get(fmt.Sprintf("/snowflake/%s/state/%d", name, id))
	var st zkStateNode
	if err != nil || json.Unmarshal(b, &st) != nil {
		return st, false
	}
	return st, true
}

func mustState(t *testing.T, c *zk.Conn, name string, id int64) zkStateNode {
	t.Helper()
	st, ok := stateNode(c, name, id)
	if !ok {
		t.Fatalf("no readable state node for worker id %d of %s", id, name)
	}
	return st
}

// waitNoLive waits until the ephemeral live node of worker id is gone (its holder's session
// expired).
func waitNoLive(t *testing.T, c *zk.Conn, name string, id int64, d time.Duration) {
	t.Helper()
	p := fmt.Sprintf("/snowflake/%s/live/%d", name, id)
	end := time.Now().Add(d)
	for {
		ok, _, err := c.Exists(p)
		if err == nil && !ok {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s still exists after %v (%v)", p, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// goTB lets startLeafd run on a goroutine of the test: a fatal error ends that goroutine
// (not the test's), and the test reports it with check.
type goTB struct {
	testing.TB
	mu  sync.Mutex
	err string
}

func (g *goTB) Helper() {}
func (g *goTB) Fatal(a ...any) {
	g.fail(fmt.Sprint(a...))
}
func (g *goTB) Fatalf(format string, a ...any) { g.fail(fmt.Sprintf(format, a...)) }
func (g *goTB) FailNow()                       { g.fail("FailNow") }
func (g *goTB) fail(s string) {
	g.mu.Lock()
	g.err = s
	g.mu.Unlock()
	runtime.Goexit()
}
func (g *goTB) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != "" {
		t.Fatal(g.err)
	}
}

// idSet records IDs from many goroutines and counts duplicates.
type idSet struct {
	mu   sync.Mutex
	seen map[int64]string
	dups []string
}

func newIDSet() *idSet { return &idSet{seen: map[int64]string{}} }

func (s *idSet) add(who string, ids ...int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if prev, ok := s.seen[id]; ok {
			s.dups = append(s.dups, fmt.Sprintf("%d from %s and %s", id, prev, who))
			continue
		}
		s.seen[id] = who
	}
}

func (s *idSet) check(t *testing.T, atLeast int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dups) > 0 {
		t.Errorf("%d duplicate IDs, e.g. %v", len(s.dups), s.dups[:min(len(s.dups), 5)])
	}
	if len(s.seen) < atLeast {
		t.Errorf("only %d distinct IDs issued, want at least %d: the test did not exercise the server", len(s.seen), atLeast)
	}
}

// TestZKTwoInstancesAndRestart: two hosts get distinct worker ids; a restart of one (same
// advertise address, same data dir) keeps its id and issues above its earlier IDs.
func TestZKTwoInstancesAndRestart(t *testing.T) {
	zkAddr := testenv.ZKAddr(t)
	name := zkTestName(t)
	a := startLeafd(t, zkArgs(t, zkAddr, name)...)
	b := startLeafd(t, zkArgs(t, zkAddr, name)...)
	wa, wb := workerOf(t, a), workerOf(t, b)
	if wa == wb {
		t.Fatalf("two instances share worker id %d", wa)
	}
	last := sfNext(t, a.client(2))
	a.kill()
	a.start()
	if got := workerOf(t, a); got != wa {
		t.Errorf("after restart: worker id %d, want %d", got, wa)
	}
	if got := sfNext(t, a.client(2)); got <= last {
		t.Errorf("after restart: ID %d, want above %d", got, last)
	}
	if got := workerOf(t, b); got != wb {
		t.Errorf("the other instance's worker id changed: %d, want %d", got, wb)
	}
}

// TestZKFiveAtOnce: five instances started together on an empty path get five distinct ids.
func TestZKFiveAtOnce(t *testing.T) {
	zkAddr := testenv.ZKAddr(t)
	name := zkTestName(t)
	const n = 5
	ls := make([]*leafd, n)
	tbs := make([]*goTB, n)
	var wg sync.WaitGroup
	for i := range n {
		tbs[i] = &goTB{TB: t}
		args := zkArgs(t, zkAddr, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls[i] = startLeafd(tbs[i], args...)
		}()
	}
	wg.Wait()
	for _, g := range tbs {
		g.check(t)
	}
	ids := map[int64]string{}
	for _, l := range ls {
		w := workerOf(t, l)
		if prev, ok := ids[w]; ok {
			t.Errorf("worker id %d held by %s and %s", w, prev, l.addr)
		}
		ids[w] = l.addr
	}
	// Leaf's worker-0 race: every id is the sequence number of the instance's own node, also
	// on the first start, so the five ids are 0..4.
	for w := range int64(n) {
		if _, ok := ids[w]; !ok {
			t.Errorf("worker ids %v: want exactly 0..%d", ids, n-1)
			break
		}
	}
}

// TestZKDecodeAndInfo: IDS.DECODE of an issued ID gives this instance's worker id and the
// current time; INFO snowflake shows the id, the source and the time bound.
func TestZKDecodeAndInfo(t *testing.T) {
	zkAddr := testenv.ZKAddr(t)
	name := zkTestName(t)
	l := startLeafd(t, zkArgs(t, zkAddr, name, "--lease-window", "2s")...)
	for _, proto := range []int{2, 3} {
		c := l.client(proto)
		info := sfInfo(t, c)
		before := time.Now().UnixMilli()
		id := sfNext(t, c)
		after := time.Now().UnixMilli()
		ts, w, seq, tm := sfDecode(t, c, id)
		if want, _ := strconv.ParseInt(info["snowflake_worker_id"], 10, 64); w != want {
			t.Errorf("RESP%d: decoded worker %d, INFO says %q", proto, w, info["snowflake_worker_id"])
		}
		if ts < before-5 || ts > after+5 {
			t.Errorf("RESP%d: decoded timestamp %d, want within 5 ms of [%d, %d]", proto, ts, before, after)
		}
		if seq < 0 || seq > 4095 {
			t.Errorf("RESP%d: sequence %d out of range", proto, seq)
		}
		if want := time.UnixMilli(ts).UTC().Format("2006-01-02T15:04:05.000Z"); tm != want {
			t.Errorf("RESP%d: time %q, want %q", proto, tm, want)
		}
		if info["snowflake_worker_source"] != "zookeeper" || info["snowflake_status"] != "ok" {
			t.Errorf("RESP%d: INFO source %q status %q, want zookeeper, ok", proto, info["snowflake_worker_source"], info["snowflake_status"])
		}
		ru, err := strconv.ParseInt(info["snowflake_reserved_until_ms"], 10, 64)
		if now := time.Now().UnixMilli(); err != nil || ru <= now-100 || ru > now+2100 {
			t.Errorf("RESP%d: snowflake_reserved_until_ms %q, want within the 2s lease window of now %d", proto, info["snowflake_reserved_until_ms"], now)
		}
		if info["snowflake_bits"] != "41/10/12" || info["snowflake_epoch_ms"] != strconv.FormatInt(snowflake.DefaultEpochMs, 10) {
			t.Errorf("RESP%d: INFO layout %q epoch %q", proto, info["snowflake_bits"], info["snowflake_epoch_ms"])
		}
	}
	// Leaf's node, with the bound persisted in leafd's state node beside it.
	w := workerOf(t, l)
	adm := zkAdmin(t, zkAddr)
	node, n := foreverNode(t, adm, name, w)
	st := mustState(t, adm, name, w)
	host, port, _ := strings.Cut(l.addr, ":")
	now := time.Now().UnixMilli()
	if node != fmt.Sprintf("%s-%010d", l.addr, w) || n.IP != host || n.Port != port {
		t.Errorf("node %s %+v, want %s-%010d with ip %s, port %s", node, n, l.addr, w, host, port)
	}
	if n.Timestamp < now-10_000 || n.Timestamp > now || st.ReservedUntil < now-3000 || st.Holder != l.addr {
		t.Errorf("node %s: timestamp %d, state %+v; want recent and held by %s (now %d)", node, n.Timestamp, st, l.addr, now)
	}
}

// TestZKExhaustion: with one worker bit there are two worker ids; a third instance refuses to
// start, saying why and what to do.
func TestZKExhaustion(t *testing.T) {
	zkAddr := testenv.ZKAddr(t)
	name := zkTestName(t)
	bits := []string{"--snowflake-bits", "51/1/11"}
	a := startLeafd(t, zkArgs(t, zkAddr, name, bits...)...)
	b := startLeafd(t, zkArgs(t, zkAddr, name, bits...)...)
	if wa, wb := workerOf(t, a), workerOf(t, b); wa == wb || wa > 1 || wb > 1 {
		t.Fatalf("worker ids %d and %d, want 0 and 1", wa, wb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append(zkArgs(t, zkAddr, name, bits...), "--data-dir", t.TempDir(), "--http-addr", "")
	out, err := exec.CommandContext(ctx, leafdBin, args...).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("third instance: got %v (%v), want a start failure\n%s", err, ctx.Err(), out)
	}
	for _, want := range []string{"exhausted", "above the layout's maximum 1", "--worker-reuse"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("third instance's error does not say %q:\n%s", want, out)
		}
	}
	// The refused instance left no node behind: a restart of an existing one still works.
	b.kill()
	b.start()
	if got := workerOf(t, b); got > 1 {
		t.Errorf("restarted instance: worker id %d", got)
	}
}

// TestZKOutage: with a private ZooKeeper killed, instances with an outage tolerance keep serving
// (within it), a restarted one starts from its data dir's state, and a new instance with no
// state answers NOWORKER until ZooKeeper is back, then serves with an id of its own. An instance
// without tolerance (here with worker reuse) serves up to the bound it persisted in ZooKeeper,
// then answers NOWORKER until ZooKeeper is back.
func TestZKOutage(t *testing.T) {
	z := testenv.StartZooKeeper(t)
	name := zkTestName(t)
	lw := []string{"--lease-window", "600ms"}
	tol := append([]string{"--zk-outage-tolerance", "8s"}, lw...)
	a := startLeafd(t, zkArgs(t, z.Addr(), name, tol...)...)
	b := startLeafd(t, zkArgs(t, z.Addr(), name, tol...)...)
	r := startLeafd(t, zkArgs(t, z.Addr(), name, append(lw, "--worker-reuse")...)...)
	wa, wb, wr := workerOf(t, a), workerOf(t, b), workerOf(t, r)
	ids := newIDSet()
	ca, cb, cr := a.client(3), b.client(3), r.client(3)
	ctx := context.Background()

	z.Kill()
	killed := time.Now().UnixMilli()
	// Several lease windows without ZooKeeper: the bound is extended in the local cache.
	var rLast int64
	rRefused := false
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for who, c := range map[string]*redis.Client{"a": ca, "b": cb} {
			v, err := c.Do(ctx, "IDS.SNOWFLAKE", 10).Int64Slice()
			if err != nil {
				t.Fatalf("%s during the outage: %v\n%s", who, err, a.Log())
			}
			ids.add(who, v...)
		}
		v, err := cr.Do(ctx, "IDS.SNOWFLAKE", 10).Int64Slice()
		switch {
		case err == nil && rRefused:
			t.Fatalf("reuse instance served %v after answering NOWORKER in the outage", v)
		case err == nil:
			ids.add("r", v...)
			rLast = slices.Max(v)
		case strings.HasPrefix(err.Error(), "NOWORKER "):
			rRefused = true
		default:
			t.Fatalf("reuse instance during the outage: %v", err)
		}
	}
	if !rRefused {
		t.Errorf("reuse instance kept serving 2s into the outage with a 600ms lease window")
	}
	// Its last ID is within the lease it had persisted before ZooKeeper died.
	if ts := snowflake.DefaultLayout().Decode(rLast).TimestampMs; rLast > 0 && ts > killed+650 {
		t.Errorf("reuse instance issued in ms %d, beyond any bound it persisted before the outage (killed at %d)", ts, killed)
	}
	// Restart from the data dir's state.
	a.kill()
	a.start()
	ca = a.client(3)
	if got := workerOf(t, a); got != wa {
		t.Errorf("restart during the outage: worker id %d, want the cached %d", got, wa)
	}
	if src := sfInfo(t, ca)["snowflake_worker_source"]; !strings.Contains(src, "cache") {
		t.Errorf("restart during the outage: source %q, want the local cache", src)
	}
	v, err := ca.Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	ids.add("a restarted", v...)

	// No state, no ZooKeeper: NOWORKER.
	c := startLeafd(t, zkArgs(t, z.Addr(), name, lw...)...)
	cc := c.client(3)
	for range 3 {
		_, err := cc.Do(ctx, "IDS.SNOWFLAKE").Int64()
		if err == nil || !strings.HasPrefix(err.Error(), "NOWORKER ") {
			t.Fatalf("new instance without ZooKeeper: got %v, want NOWORKER", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if info := sfInfo(t, cc); info["snowflake_worker_id"] != "-1" || info["snowflake_status"] == "ok" {
		t.Errorf("new instance without ZooKeeper: INFO worker %q status %q", info["snowflake_worker_id"], info["snowflake_status"])
	}

	z.Start()
	ids.add("c", waitServing(t, cc, 20*time.Second))
	ids.add("r", waitServing(t, cr, 20*time.Second))
	if got := workerOf(t, r); got != wr {
		t.Errorf("reuse instance after the outage: worker id %d, want %d", got, wr)
	}
	wc := workerOf(t, c)
	if wc == wa || wc == wb || wc == wr {
		t.Errorf("instance started in the outage got worker id %d; others hold %d, %d, %d", wc, wa, wb, wr)
	}
	// a's cached id is confirmed, and ZooKeeper gets a's bound back.
	for _, l := range []*leafd{a, b, c, r} {
		v, err := l.client(3).Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
		if err != nil {
			t.Fatalf("%s after the outage: %v", l.addr, err)
		}
		ids.add(l.addr, v...)
	}
	ids.check(t, 1000)
	adm := zkAdmin(t, z.Addr())
	end := time.Now().Add(10 * time.Second)
	for {
		st, _ := stateNode(adm, name, wa)
		if st.ReservedUntil >= sfInfoInt(t, ca, "snowflake_start_bound_ms") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("ZooKeeper's bound of worker %d (%d) never caught up with the data dir's", wa, st.ReservedUntil)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestZKReuseTakeover: with --worker-reuse, a new instance (another host, another data dir)
// takes over the worker id of a kill -9'd one once its session has expired, and issues only
// above the dead one's IDs.
func TestZKReuseTakeover(t *testing.T) {
	zkAddr := testenv.ZKAddr(t)
	name := zkTestName(t)
	reuse := []string{"--worker-reuse", "--lease-window", "1s"}
	a := startLeafd(t, zkArgs(t, zkAddr, name, reuse...)...)
	wa := workerOf(t, a)
	ca := a.client(3)
	var maxA int64
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		v, err := ca.Do(context.Background(), "IDS.SNOWFLAKE", 50).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		maxA = max(maxA, slices.Max(v))
	}
	a.kill()
	adm := zkAdmin(t, zkAddr)
	waitNoLive(t, adm, name, wa, 15*time.Second)
	dead := mustState(t, adm, name, wa)

	b := startLeafd(t, zkArgs(t, zkAddr, name, reuse...)...)
	cb := b.client(3)
	if wb := workerOf(t, b); wb != wa {
		t.Fatalf("new instance got worker id %d, want the dead one's %d\n%s", wb, wa, b.Log())
	}
	if sb := sfInfoInt(t, cb, "snowflake_start_bound_ms"); sb < dead.ReservedUntil {
		t.Errorf("start bound %d below the dead holder's persisted bound %d", sb, dead.ReservedUntil)
	}
	v, err := cb.Do(context.Background(), "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if m := slices.Min(v); m <= maxA {
		t.Errorf("successor issued %d, not above the dead holder's highest ID %d", m, maxA)
	}
	if ts, _, _, _ := sfDecode(t, cb, v[0]); ts <= dead.ReservedUntil {
		t.Errorf("successor's first ID is in ms %d, not past the dead holder's bound %d", ts, dead.ReservedUntil)
	}
	if st := mustState(t, adm, name, wa); st.Holder != b.addr {
		t.Errorf("state node holder %q, want %s", st.Holder, b.addr)
	}
}

// TestZKReusePausedHolder: a holder frozen with SIGSTOP loses its session; a successor takes
// over its worker id. After SIGCONT the old holder may still issue up to the bound it had
// persisted in ZooKeeper, never at or above the successor's first ID, then answers NOWORKER.
func TestZKReusePausedHolder(t *testing.T) {
	zkAddr := testenv.ZKAddr(t)
	name := zkTestName(t)
	// A long window for the holder, so it wakes up still holding a lease.
	a := startLeafd(t, zkArgs(t, zkAddr, name, "--worker-reuse", "--lease-window", "4s")...)
	wa := workerOf(t, a)
	ca := a.client(3)
	ctx := context.Background()
	before, err := ca.Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	adm := zkAdmin(t, zkAddr)
	waitNoLive(t, adm, name, wa, 15*time.Second)

	// Once the successor has fenced the node, wake the holder and take every ID it still
	// gives, concurrently with the successor's start and first IDs.
	argsB := zkArgs(t, zkAddr, name, "--worker-reuse", "--lease-window", "1s")
	addrB := flagValue(argsB, "--addr")
	var (
		after     []int64
		noWorker  bool
		lastErr   error
		wakeErr   error
		oldDone   = make(chan struct{})
		adminDone = time.Now().Add(30 * time.Second)
	)
	go func() {
		defer close(oldDone)
		for time.Now().Before(adminDone) {
			if st, ok := stateNode(adm, name, wa); ok && st.Holder == addrB {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if wakeErr = a.cmd.Process.Signal(syscall.SIGCONT); wakeErr != nil {
			return
		}
		c := redis.NewClient(&redis.Options{Addr: a.addr, Protocol: 3, MaxRetries: -1, ReadTimeout: 5 * time.Second})
		defer c.Close()
		for end := time.Now().Add(8 * time.Second); time.Now().Before(end); {
			v, err := c.Do(ctx, "IDS.SNOWFLAKE", 20).Int64Slice()
			if err == nil {
				after = append(after, v...)
				continue
			}
			lastErr = err
			if strings.HasPrefix(err.Error(), "NOWORKER ") {
				noWorker = true
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	b := startLeafd(t, argsB...)
	cb := b.client(3)
	first := waitServing(t, cb, 20*time.Second) // the successor waits past the holder's bound
	more, err := cb.Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	<-oldDone
	if wakeErr != nil {
		t.Fatal(wakeErr)
	}
	if wb := workerOf(t, b); wb != wa {
		t.Fatalf("successor got worker id %d, want the paused holder's %d\n%s", wb, wa, b.Log())
	}
	if !noWorker {
		t.Errorf("old holder after SIGCONT: last error %v, want NOWORKER once its bound is reached\n%s", lastErr, a.Log())
	}
	t.Logf("old holder issued %d IDs after SIGCONT before NOWORKER", len(after))
	all := append(before, after...)
	if len(all) > 0 && slices.Max(all) >= first {
		t.Errorf("old holder issued %d, at or above the successor's first ID %d", slices.Max(all), first)
	}
	if sb := sfInfoInt(t, cb, "snowflake_start_bound_ms"); len(all) > 0 && snowflake.DefaultLayout().Decode(slices.Max(all)).TimestampMs >= sb {
		t.Errorf("old holder issued in ms %d, not below the bound %d the successor started above",
			snowflake.DefaultLayout().Decode(slices.Max(all)).TimestampMs, sb)
	}
	if slices.Min(more) <= first {
		t.Errorf("successor not increasing: %d after %d", slices.Min(more), first)
	}
	ids := newIDSet()
	ids.add("old", all...)
	ids.add("successor", append(more, first)...)
	ids.check(t, 200)
	if !strings.Contains(a.Log(), "worker id lost") {
		t.Errorf("old holder's log does not say the worker id was lost:\n%s", a.Log())
	}
}

// TestZKKillRestartsUnderLoad: two instances, each kill -9'd and restarted several times while
// clients draw IDs from both: no ID is ever issued twice. With and without worker reuse.
func TestZKKillRestartsUnderLoad(t *testing.T) {
	zkAddr := testenv.ZKAddr(t)
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"reuse off", []string{"--lease-window", "500ms"}},
		{"reuse on", []string{"--lease-window", "500ms", "--worker-reuse"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			name := zkTestName(t)
			ls := []*leafd{
				startLeafd(t, zkArgs(t, zkAddr, name, mode.args...)...),
				startLeafd(t, zkArgs(t, zkAddr, name, mode.args...)...),
			}
			workers := map[int64]bool{workerOf(t, ls[0]): true, workerOf(t, ls[1]): true}
			ids := newIDSet()
			for round := range 4 {
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				for i, l := range ls {
					c := l.client(2)
					for range 3 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for ctx.Err() == nil {
								v, err := c.Do(ctx, "IDS.SNOWFLAKE", 20).Int64Slice()
								if err != nil {
									return // killed under us
								}
								ids.add(fmt.Sprintf("%d/%d", i, round), v...)
							}
						}()
					}
				}
				time.Sleep(time.Duration(200+round*60) * time.Millisecond)
				victims := []*leafd{ls[round%2]}
				if round == 3 {
					victims = ls
				}
				for _, v := range victims {
					v.kill()
				}
				time.Sleep(50 * time.Millisecond) // the other one, if any, keeps serving alone
				cancel()
				wg.Wait()
				for _, v := range victims {
					v.start()
				}
				for _, l := range ls {
					workers[workerOf(t, l)] = true
				}
			}
			ids.check(t, 5000)
			if len(workers) != 2 {
				t.Errorf("worker ids over the restarts: %v, want the same two", workers)
			}
		})
	}
}

// TestZKBadEpoch: an epoch in the future or before 1970 stops the start with a message naming
// the option.
func TestZKBadEpoch(t *testing.T) {
	zkAddr := testenv.ZKAddr(t)
	for _, epoch := range []string{strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), "-1"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		args := append(zkArgs(t, zkAddr, zkTestName(t), "--snowflake-epoch", epoch), "--data-dir", t.TempDir(), "--http-addr", "")
		out, err := exec.CommandContext(ctx, leafdBin, args...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "--snowflake-epoch "+epoch) {
			t.Errorf("epoch %s: got %v, want a start failure naming --snowflake-epoch\n%s", epoch, err, out)
		}
	}
}
