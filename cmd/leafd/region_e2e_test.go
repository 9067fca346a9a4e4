package main

// Binary tests of --region k/n: regions on their own databases never issue one ID twice
// (segment IDs ≡ k mod n, snowflake worker ids in disjoint ranges), a start whose layout
// differs from the database's record is refused, and the procedures of `leafd region` (a
// single-region table joined to two regions, two regions grown to three) issue above every ID
// the old layout issued.

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// regionArgs are an instance of region r on dsn, tags created on first use.
func regionArgs(dsn, r string, extra ...string) []string {
	return append([]string{"--mysql-dsn", dsn, "--region", r, "--auto-create", "on"}, extra...)
}

// refusedRegionStart runs the binary with args and wants it to exit non-zero with want in its output.
func refusedRegionStart(t *testing.T, want string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(args, "--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--http-addr", "")
	out, err := exec.CommandContext(ctx, e2e.Binary(), args...).CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), want) {
		t.Errorf("leafd %v: got %v, want a refused start naming %q\n%s", args, err, want, out)
	}
}

// regionTool runs `leafd region args...` and wants it to succeed.
func regionTool(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, e2e.Binary(), append([]string{"region"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("leafd region %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// regionIncr takes n IDs of tag from l with INCR.
func regionIncr(t *testing.T, l *e2e.Leafd, tag string, n int) []int64 {
	t.Helper()
	ids := make([]int64, 0, n)
	for range n {
		v, err := l.Incr(tag)
		if err != nil {
			t.Fatalf("INCR %s: %v", tag, err)
		}
		ids = append(ids, v)
	}
	return ids
}

// checkShare fails the test for an ID of region k/n that is not ≡ k mod n or not above floor.
func checkShare(t *testing.T, who string, ids []int64, k, n, floor int64) {
	t.Helper()
	for _, v := range ids {
		if v%n != k || v <= floor {
			t.Fatalf("%s: ID %d, want IDs ≡ %d mod %d above %d", who, v, k, n, floor)
		}
	}
}

// TestRegionsTwoDatabases: two regions, two databases, two instances each, INCR, IDS.SEGMENT
// and IDS.SNOWFLAKE load on all four: no ID twice, each region's share only; the mismatched
// starts are refused.
func TestRegionsTwoDatabases(t *testing.T) {
	t.Parallel()
	dsn0, _ := e2e.SharedDB(t)
	dsn1, _ := e2e.SharedDB(t)
	ls := e2e.StartMany(t, regionArgs(dsn0, "0/2", fastLease...), regionArgs(dsn0, "0/2", fastLease...),
		regionArgs(dsn1, "1/2", fastLease...), regionArgs(dsn1, "1/2", fastLease...))
	region := func(inst int) int64 { return int64(inst / 2) }
	for _, l := range ls { // a MySQL worker id issues after its lease and a margin
		e2e.WaitServing(t, l.Client(2), 15*time.Second)
	}

	snow := newMWLoad()
	segs := e2e.NewIDSet()
	var segLoads []*e2e.BatchLoad
	ctx, cancel := context.WithCancel(context.Background())
	for i, l := range ls {
		who := fmt.Sprintf("region %d instance %d", region(i), i)
		snow.run(who, l)
		bl := &e2e.BatchLoad{}
		segLoads = append(segLoads, bl)
		bl.Run(ctx, &snow.wg, l.Client(2), who, segs, 1, false, "IDS.SEGMENT", "orders", 20)
	}
	loads := e2e.RunLoad(e2e.Load{Tag: "orders", Conns: 2, Stop: e2e.For(3 * time.Second), Addrs: e2e.Addrs(ls...)})
	cancel()
	snow.stop()

	e2e.CheckOrder(t, loads) // each region's IDs increase per instance as in one region
	all := e2e.CheckUnique(t, loads)
	if len(all) < 1000 {
		t.Errorf("INCR: %d IDs, want at least 1000: the test did not exercise the servers", len(all))
	}
	for _, cl := range loads {
		checkShare(t, fmt.Sprintf("INCR on instance %d", cl.Inst), cl.IDs, region(cl.Inst), 2, 0)
		segs.Add(fmt.Sprintf("INCR on instance %d", cl.Inst), cl.IDs...)
	}
	e2e.CheckCodes(t, "INCR", e2e.Sum(loads))
	segs.Check(t, 1000)
	for i, bl := range segLoads {
		if o := bl.Other(); len(o) > 0 {
			t.Errorf("IDS.SEGMENT on instance %d: errors %v", i, o[:min(len(o), 3)])
		}
	}
	for who, bl := range snow.loads {
		if o := bl.Other(); len(o) > 0 {
			t.Errorf("IDS.SNOWFLAKE on %s: errors %v", who, o[:min(len(o), 3)])
		}
	}
	if snow.ids.Len() < 1000 {
		for who, bl := range snow.loads {
			t.Logf("%s: %d batches, %d NOWORKER", who, bl.OK.Load(), bl.NoWorker.Load())
		}
		t.Logf("INFO snowflake of instance 0: %v\n%s", e2e.SFInfo(t, ls[0].Client(2)), ls[0].Log())
	}
	snow.ids.Check(t, 1000)
	for i, l := range ls {
		w := e2e.WorkerOf(t, l)
		if lo := region(i) * 512; w < lo || w >= lo+512 {
			t.Errorf("instance %d of region %d: worker id %d, want %d..%d", i, region(i), w, lo, lo+511)
		}
	}
	// The Leaf HTTP API issues the region's share too; INCRBY cannot be contiguous here.
	code, body, err := ls[3].HTTPGet("/api/segment/get/orders", "")
	if v, perr := strconv.ParseInt(strings.TrimSpace(body), 10, 64); err != nil || code != 200 || perr != nil || v%2 != 1 {
		t.Errorf("/api/segment/get on region 1: got %d %q, %v; want an odd ID", code, body, err)
	}
	if _, err := ls[0].Do("INCRBY", "orders", 5); err == nil || !strings.HasPrefix(err.Error(), "LIMIT ") {
		t.Errorf("INCRBY orders 5 in a region: got %v, want LIMIT", err)
	}

	// An ORDERED tag: the leader maps, the follower relays; one increasing sequence of odd IDs.
	if _, err := ls[2].Do("IDS.CREATE", "ord", "ORDERED"); err != nil {
		t.Fatal(err)
	}
	var prev int64
	for i := range 40 {
		var v int64
		e2e.Eventually(t, 15*time.Second, "INCR ord served", func() bool {
			var err error
			v, err = ls[2+i%2].Incr("ord")
			return err == nil
		})
		if v%2 != 1 || v <= prev {
			t.Fatalf("ORDERED tag in region 1/2: got %d after %d, want increasing odd IDs", v, prev)
		}
		prev = v
	}

	refusedRegionStart(t, "region layout mismatch", "--mysql-dsn", dsn0, "--region", "1/2")
	refusedRegionStart(t, "region layout mismatch", "--mysql-dsn", dsn0, "--region", "0/3")
	refusedRegionStart(t, "region layout mismatch", "--mysql-dsn", dsn1) // the single region on region 1's database
	// Snowflake only, worker ids from the database: the same record.
	refusedRegionStart(t, "region layout mismatch", "--mysql-dsn", dsn0, "--region", "1/2", "--modes", "snowflake")
}

// TestRegionAdoptSingle: a single-region table joins two regions: the old database becomes
// region 0, a new one region 1; both issue above every ID issued before, each its share. Two
// old instances: the first leaves a remainder below the second's IDs, which region 0, on the
// first's data dir, must not serve (its counters stand for other IDs now).
func TestRegionAdoptSingle(t *testing.T) {
	t.Parallel()
	dsnA, _ := e2e.SharedDB(t)
	dsnB, _ := e2e.SharedDB(t)
	old1 := e2e.StartMySQL(t, dsnA, "--auto-create", "on")
	if _, err := old1.Do("IDS.CREATE", "a", "STEP", 100); err != nil {
		t.Fatal(err)
	}
	before := regionIncr(t, old1, "a", 5) // leases [1, 101): the remainder [6, 101) at SIGTERM
	old2 := e2e.StartMySQL(t, dsnA, "--auto-create", "on")
	before = append(before, regionIncr(t, old2, "a", 150)...)
	e2e.StopClean(t, old1, old2)
	floor := slices.Max(before)

	refusedRegionStart(t, "no region record", regionArgs(dsnA, "0/2")...)
	out := regionTool(t, "--from", dsnA, "--to", dsnA, "--to", dsnB)
	if !strings.Contains(out, "region 1/2:") {
		t.Errorf("leafd region: got %q, want the plan of region 1/2", out)
	}
	r0 := e2e.Start(t, regionArgs(dsnA, "0/2", "--data-dir", old1.DataDir)...)
	r1 := e2e.Start(t, regionArgs(dsnB, "1/2")...)
	ids := e2e.NewIDSet()
	ids.Add("single region", before...)
	for k, l := range []*e2e.Leafd{r0, r1} {
		got := regionIncr(t, l, "a", 300)
		checkShare(t, fmt.Sprintf("region %d", k), got, int64(k), 2, floor)
		ids.Add(fmt.Sprintf("region %d", k), got...)
	}
	ids.Check(t, 755)
	refusedRegionStart(t, "region layout mismatch", "--mysql-dsn", dsnA) // no --region on a database now in regions
}

// TestRegionGrow: two regions grow to three (the two databases keep their regions, a third
// joins): every new ID lies above every ID of the old layout, each region its share, and an
// instance still started with the old layout is refused.
func TestRegionGrow(t *testing.T) {
	t.Parallel()
	dsnA, _ := e2e.SharedDB(t)
	dsnB, _ := e2e.SharedDB(t)
	dsnC, _ := e2e.SharedDB(t)
	tags := []string{"g", "only0", "only1"} // on both old regions; only on old region 0; 1
	ids := map[string]*e2e.IDSet{}
	floor := map[string]int64{}
	for _, tag := range tags {
		ids[tag] = e2e.NewIDSet()
	}
	var dirs []string
	for k, dsn := range []string{dsnA, dsnB} {
		l := e2e.Start(t, regionArgs(dsn, fmt.Sprintf("%d/2", k))...)
		for _, tag := range []string{"g", fmt.Sprintf("only%d", k)} {
			got := regionIncr(t, l, tag, 200)
			checkShare(t, fmt.Sprintf("old region %d, tag %s", k, tag), got, int64(k), 2, 0)
			ids[tag].Add(fmt.Sprintf("old region %d", k), got...)
			floor[tag] = max(floor[tag], slices.Max(got))
		}
		dirs = append(dirs, l.DataDir)
		e2e.StopClean(t, l)
	}
	// The old regions must be given completely and in their order.
	for _, from := range [][]string{{"--from", dsnB, "--from", dsnA}, {"--from", dsnA}} {
		args := append(from, "--to", dsnA, "--to", dsnB, "--to", dsnC)
		if out, err := exec.Command(e2e.Binary(), append([]string{"region"}, args...)...).CombinedOutput(); err == nil ||
			!strings.Contains(string(out), "region layout mismatch") {
			t.Errorf("leafd region %v: got %v, want refused\n%s", args, err, out)
		}
	}
	regionTool(t, "--from", dsnA, "--from", dsnB, "--to", dsnA, "--to", dsnB, "--to", dsnC)
	refusedRegionStart(t, "region layout mismatch", regionArgs(dsnB, "1/2")...)
	for k, dsn := range []string{dsnA, dsnB, dsnC} {
		args := regionArgs(dsn, fmt.Sprintf("%d/3", k))
		if k < len(dirs) {
			args = append(args, "--data-dir", dirs[k]) // an instance keeps its database and data dir
		}
		l := e2e.Start(t, args...)
		for _, tag := range tags {
			got := regionIncr(t, l, tag, 100)
			checkShare(t, fmt.Sprintf("new region %d, tag %s", k, tag), got, int64(k), 3, floor[tag])
			ids[tag].Add(fmt.Sprintf("new region %d", k), got...)
		}
	}
	ids["g"].Check(t, 400+300)
	ids["only0"].Check(t, 200+300)
	ids["only1"].Check(t, 200+300)
}

// TestRegionEmbedded: on the embedded store a region's INCR issues its share and the local
// worker id lies in its range; the data dir's store refuses another layout, and a static
// worker id outside the region's range is refused.
func TestRegionEmbedded(t *testing.T) {
	t.Parallel()
	l := e2e.Start(t, "--region", "1/2")
	checkShare(t, "region 1/2", regionIncr(t, l, "e", 50), 1, 2, 0)
	if w := e2e.WorkerOf(t, l); w != 512 {
		t.Errorf("file worker id in region 1/2: got %d, want 512 (the region's first)", w)
	}
	// A shaped tag prints the region's counter; START is the first ID at or above it.
	if _, err := l.Do("IDS.CREATE", "inv", "FORMAT", "INV{seq:6}", "START", 10); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"INV000011", "INV000013"} {
		if v, err := l.Do("IDS.NEXT", "inv"); err != nil || v != want {
			t.Errorf("IDS.NEXT inv in region 1/2: got %v, %v; want %s", v, err, want)
		}
	}
	// After a graceful restart the remainder is served, still the region's share, above.
	last := regionIncr(t, l, "e", 1)[0]
	if err := l.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	l.Restart()
	if v := regionIncr(t, l, "e", 1)[0]; v != last+2 {
		t.Errorf("INCR after a graceful restart in region 1/2: got %d, want %d (the remainder, in the region's share)", v, last+2)
	}
	if err := l.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	refused := func(want string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, e2e.Binary(), append(args, "--data-dir", l.DataDir, "--addr", "127.0.0.1:0", "--http-addr", "")...).CombinedOutput()
		if err == nil || ctx.Err() != nil || !strings.Contains(string(out), want) {
			t.Errorf("leafd %v: got %v, want a refused start naming %q\n%s", args, err, want, out)
		}
	}
	refused("region layout mismatch", "--region", "0/2")
	refused("region layout mismatch")
	refusedRegionStart(t, "outside --region 1/2's worker ids 512..1023", "--region", "1/2", "--worker-id", "3")
}

// TestRegionWorkerSources: ZooKeeper and StatefulSet worker ids land in the region's range
// (two regions on one ZooKeeper tree included: each node's sequence number once, plus the
// region's base).
func TestRegionWorkerSources(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZKAddr(t)
	name := e2e.ZKTestName(t)
	ids := e2e.NewIDSet()
	for k := range int64(2) {
		for range 2 {
			l := e2e.Start(t, e2e.ZKArgs(t, zkAddr, name, "--region", fmt.Sprintf("%d/2", k))...)
			if w := e2e.WorkerOf(t, l); w < 512*k || w >= 512*(k+1) {
				t.Errorf("ZooKeeper worker id in region %d/2: got %d, want %d..%d", k, w, 512*k, 512*k+511)
			}
			v, err := l.Do("IDS.SNOWFLAKE", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range v.([]any) {
				ids.Add(l.Addr, x.(int64))
			}
		}
	}
	ids.Check(t, 400)
	l := e2e.Start(t, "--region", "1/2", "--worker-source", "statefulset", "--pod-ordinal", "3")
	if w := e2e.WorkerOf(t, l); w != 515 {
		t.Errorf("StatefulSet ordinal 3 in region 1/2: worker id %d, want 515", w)
	}
}
