package main

// Binary tests of snowflake uniqueness across processes, restarts and source switches, and
// of a start that does not wait for the snowflake bound.

import (
	"context"
	"net/http"
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
)

func msOf(id int64) int64 { return snowflake.DefaultLayout().Decode(id).TimestampMs }

// TestSnowflakeSameAdvertiseAddr: two live processes with the same --advertise-addr and
// different data dirs, under load for 10s: the second never serves (NOWORKER, and its log
// names the holder), 0 duplicates. (Before the exclusive claim both got worker 0: 397,957
// duplicates in 6s.)
func TestSnowflakeSameAdvertiseAddr(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZKAddr(t)
	name := e2e.ZKTestName(t)
	adv := e2e.Identity()
	args := []string{"--zk-addrs", zkAddr, "--name", name, "--advertise-addr", adv, "--zk-session-timeout", "2s"}
	a := e2e.Start(t, args...)
	wa := e2e.WorkerOf(t, a)
	b := e2e.Start(t, args...)
	ids := e2e.NewIDSet()
	var la, lb e2e.BatchLoad
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // the load's length
	defer cancel()
	var wg sync.WaitGroup
	la.Run(ctx, &wg, a.Client(2), "a", ids, 4, false, "IDS.SNOWFLAKE", 20)
	lb.Run(ctx, &wg, b.Client(2), "b", ids, 4, false, "IDS.SNOWFLAKE", 20)
	wg.Wait()
	t.Logf("a: %d batches; b: %d batches, %d NOWORKER", la.OK.Load(), lb.OK.Load(), lb.NoWorker.Load())
	if lb.OK.Load() != 0 || lb.NoWorker.Load() == 0 {
		t.Errorf("second process with the same identity: %d batches served, %d NOWORKER; want none served", lb.OK.Load(), lb.NoWorker.Load())
	}
	if oa, ob := la.Other(), lb.Other(); len(oa)+len(ob) > 0 {
		t.Errorf("unexpected errors: %v %v", oa[:min(len(oa), 3)], ob[:min(len(ob), 3)])
	}
	ids.Check(t, 10000)
	if !strings.Contains(b.Log(), "held by "+adv) {
		t.Errorf("the refusing process's log does not name the holder %s:\n%s", adv, b.Log())
	}
	if got := e2e.SFInfoInt(t, a.Client(3), "snowflake_worker_id"); got != wa {
		t.Errorf("holder's worker id changed to %d", got)
	}
}

// TestSnowflakePausedHolderSameAddr: reuse off, two processes of one identity. The holder is
// frozen (SIGSTOP) until its session expires; the standby claims the id, fences the state node
// and starts above the holder's bound. Woken up, the old holder issues at most up to its lease,
// all below the standby's first ID, then answers NOWORKER (its next write fails: the fence).
func TestSnowflakePausedHolderSameAddr(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZKAddr(t)
	name := e2e.ZKTestName(t)
	adv := e2e.Identity()
	args := []string{"--zk-addrs", zkAddr, "--name", name, "--advertise-addr", adv, "--zk-session-timeout", "1s",
		"--lease-window", "4s"}
	a := e2e.Start(t, args...)
	wa := e2e.WorkerOf(t, a)
	ca := a.Client(3)
	ctx := context.Background()
	before, err := ca.Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	adm := e2e.ZKAdmin(t, zkAddr)
	held := e2e.MustState(t, adm, name, wa)
	b := e2e.Start(t, args...)
	cb := b.Client(3)
	if _, err := cb.Do(ctx, "IDS.SNOWFLAKE").Int64(); err == nil || !strings.HasPrefix(err.Error(), "NOWORKER ") {
		t.Fatalf("standby while the holder lives: got %v, want NOWORKER", err)
	}

	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The standby fences the state node once the holder's session has expired.
	if !e2e.Poll(30*time.Second, func() bool {
		st, ok := e2e.StateNode(adm, name, wa)
		return ok && st.Instance != held.Instance
	}) {
		_ = a.Signal(syscall.SIGCONT)
		t.Fatalf("the standby never claimed worker %d\n%s", wa, b.Log())
	}
	if err := a.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	after, noWorker, lastErr := e2e.DrainUntilNoWorker(ca, 10*time.Second)
	first := e2e.WaitServing(t, cb, 20*time.Second)
	more, err := cb.Do(ctx, "IDS.SNOWFLAKE", 100).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if wb := e2e.SFInfoInt(t, cb, "snowflake_worker_id"); wb != wa {
		t.Fatalf("standby serves worker %d, want the holder's %d", wb, wa)
	}
	if !noWorker {
		t.Errorf("old holder after SIGCONT: last error %v, want NOWORKER\n%s", lastErr, a.Log())
	}
	t.Logf("old holder issued %d IDs after SIGCONT before NOWORKER", len(after))
	e2e.CheckFenced(t, a, cb, append(before, after...), more, first)
}

// TestSnowflakeSourceSwitch: a data dir used by the file source as worker 0, kill -9'd with its
// bound ahead of the clock, then started with ZooKeeper (a fresh --name: worker 0 again), then
// with the file source again: every run starts above the previous one's bound, 0 duplicates.
// (Before the shared bound: 200 of 200 IDs reissued.)
func TestSnowflakeSourceSwitch(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZKAddr(t)
	dir := t.TempDir()
	ids := e2e.NewIDSet()
	phase := func(who string, l *e2e.Leafd) (maxID int64) {
		t.Helper()
		c := l.Client(2)
		e2e.WaitServing(t, c, 20*time.Second)
		for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
			v, err := c.Do(context.Background(), "IDS.SNOWFLAKE", 50).Int64Slice()
			if err != nil {
				t.Fatalf("%s: %v", who, err)
			}
			ids.Add(who, v...)
			maxID = max(maxID, slices.Max(v))
		}
		return maxID
	}
	f := e2e.Start(t, "--data-dir", dir, "--lease-window", "5s")
	maxF := phase("file", f)
	f.Kill()

	z := e2e.Start(t, "--data-dir", dir, "--zk-addrs", zkAddr, "--name", e2e.ZKTestName(t), "--advertise-addr", e2e.Identity(),
		"--lease-window", "5s")
	cz := z.Client(3)
	if w := e2e.WorkerOf(t, z); w != 0 {
		t.Fatalf("ZooKeeper run: worker %d, want 0 (the case that reissued)", w)
	}
	if sb := e2e.SFInfoInt(t, cz, "snowflake_start_bound_ms"); sb <= msOf(maxF) {
		t.Errorf("ZooKeeper run's start bound %d not above the file run's last ms %d", sb, msOf(maxF))
	}
	maxZ := phase("zookeeper", z)
	z.Kill()

	f2 := e2e.Start(t, "--data-dir", dir)
	if w := e2e.WorkerOf(t, f2); w != 0 {
		t.Fatalf("file run after ZooKeeper: worker %d, want 0", w)
	}
	if sb := e2e.SFInfoInt(t, f2.Client(3), "snowflake_start_bound_ms"); sb <= msOf(maxZ) {
		t.Errorf("file run's start bound %d not above the ZooKeeper run's last ms %d", sb, msOf(maxZ))
	}
	phase("file again", f2)
	ids.Check(t, 1000)
}

// TestSnowflakeRestartBoundAhead: after kill -9 the persisted bound is ahead of the clock. The
// restarted process listens and serves segment IDs at once, answers NOWORKER for snowflake
// (readiness says so) until its clock has passed the bound, then serves above every earlier ID.
func TestSnowflakeRestartBoundAhead(t *testing.T) {
	t.Parallel()
	l := e2e.Start(t, "--lease-window", "3s")
	c := l.Client(2)
	ctx := context.Background()
	ids := e2e.NewIDSet()
	var maxPre int64
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		v, err := c.Do(ctx, "IDS.SNOWFLAKE", 50).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		ids.Add("before", v...)
		maxPre = max(maxPre, slices.Max(v))
		if _, err := c.Incr(ctx, "k").Result(); err != nil {
			t.Fatal(err)
		}
	}
	l.Kill()
	start := time.Now()
	l.Restart() // returns once the ready line is logged
	listened := time.Since(start)
	c = l.Client(2)
	if _, err := c.Incr(ctx, "k").Result(); err != nil {
		t.Fatalf("segment right after the restart: %v", err)
	}
	segment := time.Since(start)
	_, sfErr := c.Do(ctx, "IDS.SNOWFLAKE").Int64()
	snowAt := time.Now()
	ready, readyTag := l.HTTPStatus("/readyz"), l.HTTPStatus("/readyz?tag=k")
	t.Logf("kill -9 restart: listening after %v, first segment ID after %v (race-enabled binary on a loaded machine)", listened, segment)
	// The bound was up to 3s ahead of the clock at the kill; the start does not wait it out
	// before listening, so snowflake is still refusing when segment IDs are already served.
	if sfErr == nil || !strings.HasPrefix(sfErr.Error(), "NOWORKER ") {
		t.Errorf("snowflake right after the restart: got %v, want NOWORKER while the bound is ahead", sfErr)
	}
	if ready != http.StatusServiceUnavailable || readyTag != http.StatusOK {
		t.Errorf("readiness while waiting for the bound: /readyz %d (want 503), /readyz?tag=k %d (want 200)", ready, readyTag)
	}
	if segment > 2*time.Second {
		t.Errorf("first segment ID %v after the restart", segment)
	}
	first := e2e.WaitServing(t, c, 20*time.Second)
	t.Logf("snowflake served %v after the first NOWORKER", time.Since(snowAt))
	if first <= maxPre || msOf(first) <= msOf(maxPre) {
		t.Errorf("first ID after the restart %d (ms %d), not above the previous run's %d (ms %d)", first, msOf(first), maxPre, msOf(maxPre))
	}
	sb := e2e.SFInfoInt(t, l.Client(3), "snowflake_start_bound_ms")
	if msOf(first) <= sb || sb <= msOf(maxPre) {
		t.Errorf("start bound %d: want between the old run's last ms %d and the first new ms %d", sb, msOf(maxPre), msOf(first))
	}
	ids.Add("after", first)
	v, err := c.Do(ctx, "IDS.SNOWFLAKE", 500).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	ids.Add("after", v...)
	ids.Check(t, 1000)
}

// TestSnowflakeGracefulRestartFast: after SIGTERM the persisted bound is lowered to just past
// the last millisecond used, so a restart of the same instance serves snowflake IDs without
// waiting out the lease window, with reuse off or on (ZooKeeper without reuse too).
func TestSnowflakeGracefulRestartFast(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZKAddr(t)
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"file", nil},
		{"zookeeper", []string{"--zk-addrs", zkAddr}},
		{"zookeeper reuse", []string{"--zk-addrs", zkAddr, "--worker-reuse"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			args := append([]string{"--lease-window", "3s"}, mode.args...)
			if len(mode.args) > 0 {
				args = e2e.ZKArgs(t, zkAddr, e2e.ZKTestName(t), args...)
			}
			l := e2e.Start(t, args...)
			c := l.Client(2)
			e2e.WaitServing(t, c, 20*time.Second)
			v, err := c.Do(context.Background(), "IDS.SNOWFLAKE", 100).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			last := slices.Max(v)
			if err := l.Stop(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now().UnixMilli()
			start := time.Now()
			l.Restart()
			c = l.Client(2)
			first := e2e.WaitServing(t, c, 20*time.Second)
			took := time.Since(start)
			sb := e2e.SFInfoInt(t, l.Client(3), "snowflake_start_bound_ms")
			t.Logf("%s: graceful restart served a snowflake ID %v after exec (race-enabled binary, loaded machine); start bound %d ms past the last ID's ms",
				mode.name, took, sb-msOf(last))
			if first <= last {
				t.Errorf("first ID %d not above the last of the previous run %d", first, last)
			}
			// The bound was lowered on SIGTERM (to last+1; the forever node's timestamp, at
			// most the clock, also counts with ZooKeeper): nothing of the 3s window is waited.
			if sb > stopped {
				t.Errorf("start bound %d is %d ms past the stop at %d (last ID's ms %d): the stop did not lower it", sb, sb-stopped, stopped, msOf(last))
			}
		})
	}
}

// TestSnowflakeZKChroot: --zk-addrs takes ZooKeeper's connection string with a chroot suffix
// (common with Leaf); every node lives below the chroot.
func TestSnowflakeZKChroot(t *testing.T) {
	zkAddr := testenv.ZKAddr(t)
	name := e2e.ZKTestName(t)
	chroot := "/" + name + "-root/leaf"
	l := startInProcess(t, e2e.ZKArgs(t, zkAddr+chroot, name)...)
	w := e2e.WorkerOf(t, l)
	adm := e2e.ZKAdmin(t, zkAddr)
	kids, _, err := adm.Children(chroot + "/snowflake/" + name + "/forever")
	if err != nil || len(kids) != 1 {
		t.Fatalf("forever nodes under the chroot: %v %v", kids, err)
	}
	if ok, _, _ := adm.Exists("/snowflake/" + name); ok {
		t.Errorf("/snowflake/%s exists outside the chroot", name)
	}
	if ok, _, _ := adm.Exists(chroot + "/snowflake/" + name + "/state/" + strconv.FormatInt(w, 10)); !ok {
		t.Errorf("no state node for worker %d under the chroot", w)
	}
}
