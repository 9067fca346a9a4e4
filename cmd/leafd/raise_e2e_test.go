package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// raiseCmd runs `leafd raise-max-id args...` and returns its output and exit status.
func raiseCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return e2e.RunTool(t, 60*time.Second, nil, append([]string{"raise-max-id"}, args...)...)
}

// TestMySQLRaiseMaxID: the operator's command after a failover that lost more than the
// fence's gap covers. max_id drops by ten steps (as after such a failover: same server, so the
// fence sees nothing); the instances refuse with REGRESSION; `leafd raise-max-id` reads every
// instance's high-water mark, raises max_id to the highest of them (reporting the instance
// that does not answer, exit status 1), and both instances serve again, above every ID
// handed out. A third instance restarted before the repair, holding no tag, is covered by
// its durable marks (IDS.MARKS). A second run never lowers max_id.
func TestMySQLRaiseMaxID(t *testing.T) {
	t.Parallel()
	const step = 100
	dsn, db, ls, before := servedTwo(t, step, 2, 5_000)
	e2e.CheckCodes(t, "before", e2e.Sum(before))
	lagMaxID(t, db, "orders", 10*step)
	// Until each instance refused 50 times: the buffered IDs of both are used up (a total
	// count can be reached by one instance while the other still serves its buffer).
	byInst := make([]e2e.Counts, len(ls))
	atMost := e2e.For(time.Minute)
	after := e2e.RunLoad(e2e.Load{Tag: "orders", Conns: 2, ByInst: byInst, Addrs: e2e.Addrs(ls...), Stop: func() bool {
		return atMost() || byInst[0].Refused.Load() >= 50 && byInst[1].Refused.Load() >= 50
	}})
	if tt := e2e.Sum(after); tt.Codes["REGRESSION"] == 0 {
		t.Fatalf("after max_id dropped: got replies %v, want REGRESSION", tt.Codes)
	}
	lowered := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")

	// A third instance served "payments" alone and was restarted (no warm start) before the
	// repair, after payments' max_id dropped too: it holds no tag, so IDS.TAGS lists nothing;
	// only its marks file (IDS.MARKS) knows the range end it was granted.
	r := e2e.StartMySQL(t, dsn, "--max-step", strconv.Itoa(step), "--warm-tags", "0")
	e2e.CreateTag(t, r, db, "payments", step)
	var served int64
	for range 250 {
		v, err := r.Incr("payments")
		if err != nil {
			t.Fatalf("INCR payments: %v", err)
		}
		served = v
	}
	if err := r.Stop(10 * time.Second); err != nil {
		t.Fatalf("stopping the third instance: %v", err)
	}
	lagMaxID(t, db, "payments", 10*step)
	payLowered := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'payments'")
	r.Restart()
	if v, err := r.Do("IDS.TAGS"); err != nil || len(v.([]any)) != 0 {
		t.Fatalf("IDS.TAGS of the restarted instance: got %v, %v; want none held", v, err)
	}
	v, err := r.Do("IDS.MARKS")
	if err != nil {
		t.Fatalf("IDS.MARKS: %v", err)
	}
	rmarks, err := marksField(v)
	payMark := rmarks["payments"]
	if err != nil || payMark <= served || payMark <= payLowered {
		t.Fatalf("IDS.MARKS of the restarted instance: got %v, %v; want payments above %d and %d", v, err, served, payLowered)
	}

	var highest int64
	for _, l := range ls {
		v, err := l.Do("IDS.INFO", "orders")
		if err != nil {
			t.Fatalf("IDS.INFO: %v", err)
		}
		m, ok := infoField(v, "high_water_mark")
		if !ok {
			t.Fatalf("IDS.INFO: no high_water_mark in %v", v)
		}
		highest = max(highest, m)
	}
	out, status := raiseCmd(t, "--mysql-dsn", dsn, "--instances", ls[0].Addr+","+ls[1].Addr+","+r.Addr+",127.0.0.1:1")
	t.Logf("raise-max-id (exit %d):\n%s", status, out)
	if status != 1 || !strings.Contains(out, "127.0.0.1:1") {
		t.Errorf("with an unreachable instance: got exit %d, want 1 and the instance named", status)
	}
	raised := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")
	if raised != highest || raised <= lowered {
		t.Fatalf("max_id after raise-max-id: got %d, want the highest mark %d (was lowered to %d)", raised, highest, lowered)
	}
	if got := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'payments'"); got != payMark {
		t.Errorf("payments' max_id after raise-max-id: got %d, want the restarted instance's mark %d (was lowered to %d)", got, payMark, payLowered)
	}
	if v, took, err := r.WaitIncr("payments", 5*time.Second); err != nil || v < payMark {
		t.Errorf("restarted instance after the raise: got %d, %v after %v, want an ID >= %d (above %d served before its restart)", v, err, took, payMark, served)
	}
	for i, l := range ls {
		if v, took, err := l.WaitIncr("orders", 5*time.Second); err != nil || v < raised {
			t.Errorf("instance %d after the raise: got %d, %v after %v, want an ID >= %d", i, v, err, took, raised)
		}
	}
	var nf e2e.Counts
	final := e2e.RunLoad(e2e.Load{Tag: "orders", Conns: 2, Count: &nf, Addrs: e2e.Addrs(ls...), Stop: e2e.Until(&nf.OK, 1000, time.Now().Add(time.Minute))})
	e2e.CheckCodes(t, "after the raise", e2e.Sum(final))
	e2e.CheckUnique(t, before, after, final)

	// Only upward: max_id set far above by hand stays.
	e2e.SQLExec(t, db, "UPDATE leaf_alloc SET max_id = max_id + 1000000 WHERE biz_tag = 'orders'")
	high := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")
	if out, status := raiseCmd(t, "--mysql-dsn", dsn, "--instances", ls[0].Addr+","+ls[1].Addr, "--margin", "10"); status != 0 {
		t.Errorf("second run: exit %d, want 0\n%s", status, out)
	}
	// Every mark is far below high: any write of raise-max-id would lower max_id. It may
	// grow meanwhile: an instance's preload still running takes its range above high.
	if got := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'"); got < high {
		t.Errorf("second run: max_id %d, want at least %d (raise-max-id never lowers)", got, high)
	}
	if out, status := raiseCmd(t); status != 2 || !strings.Contains(out, "usage") {
		t.Errorf("no arguments: got exit %d, want 2 and the usage\n%s", status, out)
	}
	e2e.StopClean(t, append(ls, r)...)
}
