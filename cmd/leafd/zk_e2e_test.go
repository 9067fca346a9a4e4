package main

// End-to-end tests of snowflake mode with ZooKeeper worker ids: the built binary, real
// ZooKeeper (the shared one of scripts/test.sh, or a private one when a test must kill it),
// go-redis. Each test uses its own --name, so tests sharing one ZooKeeper never see each
// other's nodes, and a distinct --advertise-addr per instance to model distinct hosts.

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/snowflake"
	"github.com/redis/go-redis/v9"
)

// TestZKTwoInstancesAndRestart: two hosts get distinct worker ids; a restart of one (same
// advertise address, same data dir) keeps its id and issues above its earlier IDs.
func TestZKTwoInstancesAndRestart(t *testing.T) {
	t.Parallel()
	zkTwoInstancesAndRestart(t, testenv.ZKAddr(t))
}

// zkTwoInstancesAndRestart runs TestZKTwoInstancesAndRestart on the ZooKeeper of zkAddr (one server or an ensemble).
func zkTwoInstancesAndRestart(t *testing.T, zkAddr string) {
	name := e2e.ZKTestName(t)
	a := e2e.Start(t, e2e.ZKArgs(t, zkAddr, name)...)
	b := e2e.Start(t, e2e.ZKArgs(t, zkAddr, name)...)
	wa, wb := e2e.WorkerOf(t, a), e2e.WorkerOf(t, b)
	if wa == wb {
		t.Fatalf("two instances share worker id %d", wa)
	}
	last := e2e.SFNext(t, a.Client(2))
	a.Kill()
	a.Restart()
	if got := e2e.WorkerOf(t, a); got != wa {
		t.Errorf("after restart: worker id %d, want %d", got, wa)
	}
	if got := e2e.SFNext(t, a.Client(2)); got <= last {
		t.Errorf("after restart: ID %d, want above %d", got, last)
	}
	if got := e2e.WorkerOf(t, b); got != wb {
		t.Errorf("the other instance's worker id changed: %d, want %d", got, wb)
	}
}

// TestZKFiveAtOnce: five instances started together on an empty path get five distinct ids.
func TestZKFiveAtOnce(t *testing.T) { zkFiveAtOnce(t, testenv.ZKAddr(t)) }

// zkFiveAtOnce runs TestZKFiveAtOnce on the ZooKeeper of zkAddr (one server or an ensemble).
func zkFiveAtOnce(t *testing.T, zkAddr string) {
	name := e2e.ZKTestName(t)
	const n = 5
	args := make([][]string, n)
	for i := range n {
		args[i] = e2e.ZKArgs(t, zkAddr, name)
	}
	ls := e2e.StartMany(t, args...) // all at once: they race for the worker ids
	ids := map[int64]string{}
	for _, l := range ls {
		w := e2e.WorkerOf(t, l)
		if prev, ok := ids[w]; ok {
			t.Errorf("worker id %d held by %s and %s", w, prev, l.Addr)
		}
		ids[w] = l.Addr
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
	name := e2e.ZKTestName(t)
	l := startInProcess(t, e2e.ZKArgs(t, zkAddr, name, "--lease-window", "2s")...)
	for _, proto := range []int{2, 3} {
		c := l.Client(proto)
		info := e2e.SFInfo(t, c)
		before := time.Now().UnixMilli()
		id := e2e.SFNext(t, c)
		after := time.Now().UnixMilli()
		ts, w, seq, tm := e2e.SFDecode(t, c, id)
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
	w := e2e.WorkerOf(t, l)
	adm := e2e.ZKAdmin(t, zkAddr)
	node, n := e2e.ForeverNode(t, adm, name, w)
	st := e2e.MustState(t, adm, name, w)
	host, port, _ := strings.Cut(l.Addr, ":")
	now := time.Now().UnixMilli()
	if node != fmt.Sprintf("%s-%010d", l.Addr, w) || n.IP != host || n.Port != port {
		t.Errorf("node %s %+v, want %s-%010d with ip %s, port %s", node, n, l.Addr, w, host, port)
	}
	if n.Timestamp < now-10_000 || n.Timestamp > now || st.ReservedUntil < now-3000 || st.Holder != l.Addr {
		t.Errorf("node %s: timestamp %d, state %+v; want recent and held by %s (now %d)", node, n.Timestamp, st, l.Addr, now)
	}
}

// TestZKExhaustion: with one worker bit there are two worker ids; a third instance refuses to
// start, saying why and what to do.
func TestZKExhaustion(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZKAddr(t)
	name := e2e.ZKTestName(t)
	bits := []string{"--snowflake-bits", "51/1/11"}
	a := e2e.Start(t, e2e.ZKArgs(t, zkAddr, name, bits...)...)
	b := e2e.Start(t, e2e.ZKArgs(t, zkAddr, name, bits...)...)
	if wa, wb := e2e.WorkerOf(t, a), e2e.WorkerOf(t, b); wa == wb || wa > 1 || wb > 1 {
		t.Fatalf("worker ids %d and %d, want 0 and 1", wa, wb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append(e2e.ZKArgs(t, zkAddr, name, bits...), "--data-dir", t.TempDir(), "--http-addr", "")
	out, err := exec.CommandContext(ctx, e2e.Binary(), args...).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("third instance: got %v (%v), want a start failure\n%s", err, ctx.Err(), out)
	}
	for _, want := range []string{"exhausted", "above the layout's maximum 1", "--worker-reuse"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("third instance's error does not say %q:\n%s", want, out)
		}
	}
	// The refused instance left no node behind: a restart of an existing one still works.
	b.Kill()
	b.Restart()
	if got := e2e.WorkerOf(t, b); got > 1 {
		t.Errorf("restarted instance: worker id %d", got)
	}
}

// TestZKOutage: with a private ZooKeeper killed, instances with an outage tolerance keep serving
// (within it), a restarted one starts from its data dir's state, and a new instance with no
// state answers NOWORKER until ZooKeeper is back, then serves with an id of its own. An instance
// without tolerance (here with worker reuse) serves up to the bound it persisted in ZooKeeper,
// then answers NOWORKER until ZooKeeper is back.
func TestZKOutage(t *testing.T) {
	t.Parallel()
	z := testenv.StartZooKeeper(t)
	name := e2e.ZKTestName(t)
	lw := []string{"--lease-window", "600ms"}
	tol := append([]string{"--zk-outage-tolerance", "8s"}, lw...)
	a := e2e.Start(t, e2e.ZKArgs(t, z.Addr(), name, tol...)...)
	b := e2e.Start(t, e2e.ZKArgs(t, z.Addr(), name, tol...)...)
	r := e2e.Start(t, e2e.ZKArgs(t, z.Addr(), name, append(lw, "--worker-reuse")...)...)
	wa, wb, wr := e2e.WorkerOf(t, a), e2e.WorkerOf(t, b), e2e.WorkerOf(t, r)
	ids := e2e.NewIDSet()
	ca, cb, cr := a.Client(3), b.Client(3), r.Client(3)
	ctx := context.Background()

	z.Kill()
	killed := time.Now().UnixMilli()
	// Several lease windows without ZooKeeper: the bound is extended in the local cache.
	var rLast int64
	rRefused := false
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) { // pacing: IDs through several lease windows
		for who, c := range map[string]*redis.Client{"a": ca, "b": cb} {
			v, err := c.Do(ctx, "IDS.SNOWFLAKE", 10).Int64Slice()
			if err != nil {
				t.Fatalf("%s during the outage: %v\n%s", who, err, a.Log())
			}
			ids.Add(who, v...)
		}
		v, err := cr.Do(ctx, "IDS.SNOWFLAKE", 10).Int64Slice()
		switch {
		case err == nil && rRefused:
			t.Fatalf("reuse instance served %v after answering NOWORKER in the outage", v)
		case err == nil:
			ids.Add("r", v...)
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
	a.Kill()
	a.Restart()
	ca = a.Client(3)
	if got := e2e.WorkerOf(t, a); got != wa {
		t.Errorf("restart during the outage: worker id %d, want the cached %d", got, wa)
	}
	if src := e2e.SFInfo(t, ca)["snowflake_worker_source"]; !strings.Contains(src, "cache") {
		t.Errorf("restart during the outage: source %q, want the local cache", src)
	}
	v, err := ca.Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	ids.Add("a restarted", v...)

	// No state, no ZooKeeper: NOWORKER.
	c := e2e.Start(t, e2e.ZKArgs(t, z.Addr(), name, lw...)...)
	cc := c.Client(3)
	for range 3 {
		_, err := cc.Do(ctx, "IDS.SNOWFLAKE").Int64()
		if err == nil || !strings.HasPrefix(err.Error(), "NOWORKER ") {
			t.Fatalf("new instance without ZooKeeper: got %v, want NOWORKER", err)
		}
		time.Sleep(100 * time.Millisecond) // pacing: the refusals span some time
	}
	if info := e2e.SFInfo(t, cc); info["snowflake_worker_id"] != "-1" || info["snowflake_status"] == "ok" {
		t.Errorf("new instance without ZooKeeper: INFO worker %q status %q", info["snowflake_worker_id"], info["snowflake_status"])
	}

	z.Start()
	ids.Add("c", e2e.WaitServing(t, cc, 20*time.Second))
	ids.Add("r", e2e.WaitServing(t, cr, 20*time.Second))
	if got := e2e.WorkerOf(t, r); got != wr {
		t.Errorf("reuse instance after the outage: worker id %d, want %d", got, wr)
	}
	wc := e2e.WorkerOf(t, c)
	if wc == wa || wc == wb || wc == wr {
		t.Errorf("instance started in the outage got worker id %d; others hold %d, %d, %d", wc, wa, wb, wr)
	}
	// a's cached id is confirmed, and ZooKeeper gets a's bound back.
	// An outage longer than the tolerance (ZooKeeper's JVM can take seconds to start on a
	// loaded machine) stops a and b until they hold their ids again: wait for each to serve.
	for _, l := range []*e2e.Leafd{a, b, c, r} {
		lc := l.Client(3)
		ids.Add(l.Addr, e2e.WaitServing(t, lc, 20*time.Second))
		v, err := lc.Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
		if err != nil {
			t.Fatalf("%s after the outage: %v", l.Addr, err)
		}
		ids.Add(l.Addr, v...)
	}
	ids.Check(t, 1000)
	adm := e2e.ZKAdmin(t, z.Addr())
	var st e2e.ZKStateNode
	if !e2e.Poll(10*time.Second, func() bool {
		st, _ = e2e.StateNode(adm, name, wa)
		return st.ReservedUntil >= e2e.SFInfoInt(t, ca, "snowflake_start_bound_ms")
	}) {
		t.Fatalf("ZooKeeper's bound of worker %d (%d) never caught up with the data dir's", wa, st.ReservedUntil)
	}
}

// TestZKReuseTakeover: with --worker-reuse, a new instance (another host, another data dir)
// takes over the worker id of a kill -9'd one once its session has expired, and issues only
// above the dead one's IDs.
func TestZKReuseTakeover(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZKAddr(t)
	name := e2e.ZKTestName(t)
	reuse := []string{"--worker-reuse", "--lease-window", "1s"}
	a := e2e.Start(t, e2e.ZKArgs(t, zkAddr, name, reuse...)...)
	wa := e2e.WorkerOf(t, a)
	ca := a.Client(3)
	var maxA int64
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		v, err := ca.Do(context.Background(), "IDS.SNOWFLAKE", 50).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		maxA = max(maxA, slices.Max(v))
	}
	a.Kill()
	adm := e2e.ZKAdmin(t, zkAddr)
	e2e.WaitNoLive(t, adm, name, wa, 15*time.Second)
	dead := e2e.MustState(t, adm, name, wa)

	b := e2e.Start(t, e2e.ZKArgs(t, zkAddr, name, reuse...)...)
	cb := b.Client(3)
	if wb := e2e.WorkerOf(t, b); wb != wa {
		t.Fatalf("new instance got worker id %d, want the dead one's %d\n%s", wb, wa, b.Log())
	}
	if sb := e2e.SFInfoInt(t, cb, "snowflake_start_bound_ms"); sb < dead.ReservedUntil {
		t.Errorf("start bound %d below the dead holder's persisted bound %d", sb, dead.ReservedUntil)
	}
	v, err := cb.Do(context.Background(), "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if m := slices.Min(v); m <= maxA {
		t.Errorf("successor issued %d, not above the dead holder's highest ID %d", m, maxA)
	}
	if ts, _, _, _ := e2e.SFDecode(t, cb, v[0]); ts <= dead.ReservedUntil {
		t.Errorf("successor's first ID is in ms %d, not past the dead holder's bound %d", ts, dead.ReservedUntil)
	}
	if st := e2e.MustState(t, adm, name, wa); st.Holder != b.Addr {
		t.Errorf("state node holder %q, want %s", st.Holder, b.Addr)
	}
}

// TestZKReusePausedHolder: a holder frozen with SIGSTOP loses its session; a successor takes
// over its worker id. After SIGCONT the old holder may still issue up to the bound it had
// persisted in ZooKeeper, never at or above the successor's first ID, then answers NOWORKER.
func TestZKReusePausedHolder(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZKAddr(t)
	name := e2e.ZKTestName(t)
	// A long window for the holder, so it wakes up still holding a lease.
	a := e2e.Start(t, e2e.ZKArgs(t, zkAddr, name, "--worker-reuse", "--lease-window", "4s")...)
	wa := e2e.WorkerOf(t, a)
	ca := a.Client(3)
	ctx := context.Background()
	before, err := ca.Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}

	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	adm := e2e.ZKAdmin(t, zkAddr)
	e2e.WaitNoLive(t, adm, name, wa, 15*time.Second)

	// Once the successor has fenced the node, wake the holder and take every ID it still
	// gives, concurrently with the successor's start and first IDs.
	argsB := e2e.ZKArgs(t, zkAddr, name, "--worker-reuse", "--lease-window", "1s")
	addrB := e2e.FlagValue(argsB, "--addr")
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
		e2e.Poll(time.Until(adminDone), func() bool {
			st, ok := e2e.StateNode(adm, name, wa)
			return ok && st.Holder == addrB
		})
		if wakeErr = a.Signal(syscall.SIGCONT); wakeErr != nil {
			return
		}
		c := redis.NewClient(&redis.Options{Addr: a.Addr, Protocol: 3, MaxRetries: -1, ReadTimeout: 5 * time.Second})
		defer c.Close()
		after, noWorker, lastErr = e2e.DrainUntilNoWorker(c, 8*time.Second)
	}()
	b := e2e.Start(t, argsB...)
	cb := b.Client(3)
	first := e2e.WaitServing(t, cb, 20*time.Second) // the successor waits past the holder's bound
	more, err := cb.Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	<-oldDone
	if wakeErr != nil {
		t.Fatal(wakeErr)
	}
	if wb := e2e.WorkerOf(t, b); wb != wa {
		t.Fatalf("successor got worker id %d, want the paused holder's %d\n%s", wb, wa, b.Log())
	}
	if !noWorker {
		t.Errorf("old holder after SIGCONT: last error %v, want NOWORKER once its bound is reached\n%s", lastErr, a.Log())
	}
	t.Logf("old holder issued %d IDs after SIGCONT before NOWORKER", len(after))
	e2e.CheckFenced(t, a, cb, append(before, after...), more, first)
}

// TestZKKillRestartsUnderLoad: two instances, each kill -9'd and restarted several times while
// clients draw IDs from both: no ID is ever issued twice. With and without worker reuse.
func TestZKKillRestartsUnderLoad(t *testing.T) {
	t.Parallel()
	zkKillRestartsUnderLoad(t, testenv.ZKAddr(t))
}

// zkKillRestartsUnderLoad runs TestZKKillRestartsUnderLoad on the ZooKeeper of zkAddr (one server or an ensemble).
func zkKillRestartsUnderLoad(t *testing.T, zkAddr string) {
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"reuse off", []string{"--lease-window", "500ms"}},
		{"reuse on", []string{"--lease-window", "500ms", "--worker-reuse"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			name := e2e.ZKTestName(t)
			ls := []*e2e.Leafd{
				e2e.Start(t, e2e.ZKArgs(t, zkAddr, name, mode.args...)...),
				e2e.Start(t, e2e.ZKArgs(t, zkAddr, name, mode.args...)...),
			}
			workers := map[int64]bool{e2e.WorkerOf(t, ls[0]): true, e2e.WorkerOf(t, ls[1]): true}
			ids := e2e.NewIDSet()
			for round := range 4 {
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				loads := make([]e2e.BatchLoad, len(ls))
				for i, l := range ls {
					loads[i].Run(ctx, &wg, l.Client(2), fmt.Sprintf("%d/%d", i, round), ids, 3, true, "IDS.SNOWFLAKE", 20)
				}
				// The kill comes after a number of batches that grows with the round.
				want := int64(80 + 20*round)
				e2e.Eventually(t, time.Minute, fmt.Sprintf("round %d: %d batches before the kill", round, want), func() bool {
					return loads[0].OK.Load()+loads[1].OK.Load() >= want
				})
				victims := []*e2e.Leafd{ls[round%2]}
				if round == 3 {
					victims = ls
				}
				for _, v := range victims {
					v.Kill()
				}
				if len(victims) == 1 { // the other one keeps serving alone
					other := &loads[(round+1)%2]
					e2e.Eventually(t, time.Minute, "10 batches from the survivor", e2e.Grown(&other.OK, 10))
				}
				cancel()
				wg.Wait()
				for _, v := range victims {
					v.Restart()
				}
				for _, l := range ls {
					workers[e2e.WorkerOf(t, l)] = true
				}
			}
			ids.Check(t, 5000)
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
		args := append(e2e.ZKArgs(t, zkAddr, e2e.ZKTestName(t), "--snowflake-epoch", epoch), "--data-dir", t.TempDir(), "--http-addr", "")
		out, err := exec.CommandContext(ctx, e2e.Binary(), args...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "--snowflake-epoch "+epoch) {
			t.Errorf("epoch %s: got %v, want a start failure naming --snowflake-epoch\n%s", epoch, err, out)
		}
	}
}
