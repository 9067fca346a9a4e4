package main

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// raiseCmd runs `leafd raise-max-id args...` and returns its output and exit status.
func raiseCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, leafdBin, append([]string{"raise-max-id"}, args...)...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("raise-max-id: %v\n%s", err, out)
	return "", 0
}

// TestMySQLRaiseMaxID: the operator's command after a failover that lost more than the
// fence's gap covers. max_id drops by ten steps (as after such a failover: same server, so the
// fence sees nothing); the instances refuse with REGRESSION; `leafd raise-max-id` reads every
// instance's high-water mark, raises max_id to the highest of them (reporting the instance
// that does not answer, exit status 1), and both instances serve again, above every ID
// handed out. A third instance restarted before the repair, holding no tag, is covered by
// its durable marks (IDS.MARKS). A second run never lowers max_id.
func TestMySQLRaiseMaxID(t *testing.T) {
	dsn, db := sharedDB(t)
	const step = 100
	ls := []*leafd{
		mysqlLeafd(t, dsn, "--max-step", strconv.Itoa(step)),
		mysqlLeafd(t, dsn, "--max-step", strconv.Itoa(step)),
	}
	createTag(t, ls[0], db, "orders", step)
	var ok atomic.Int64
	before := runLoad(loadSpec{tag: "orders", conns: 2, ok: &ok, addrs: addrsOf(ls), stop: until(&ok, 5_000, time.Now().Add(20*time.Second))})
	checkCodes(t, "before", totals(before))
	lagMaxID(t, db, "orders", 10*step)
	after := runLoad(loadSpec{tag: "orders", conns: 2, addrs: addrsOf(ls), stop: deadline(2 * time.Second)})
	if tt := totals(after); tt.codes["REGRESSION"] == 0 {
		t.Fatalf("after max_id dropped: got replies %v, want REGRESSION", tt.codes)
	}
	lowered := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")

	// A third instance served "payments" alone and was restarted (no warm start) before the
	// repair, after payments' max_id dropped too: it holds no tag, so IDS.TAGS lists nothing;
	// only its marks file (IDS.MARKS) knows the range end it was granted.
	r := mysqlLeafd(t, dsn, "--max-step", strconv.Itoa(step), "--warm-tags", "0")
	createTag(t, r, db, "payments", step)
	var served int64
	for range 250 {
		v, err := incrOnce(r, "payments")
		if err != nil {
			t.Fatalf("INCR payments: %v", err)
		}
		served = v
	}
	if err := r.stop(10 * time.Second); err != nil {
		t.Fatalf("stopping the third instance: %v", err)
	}
	lagMaxID(t, db, "payments", 10*step)
	payLowered := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'payments'")
	r.start()
	if v, err := do(r, "IDS.TAGS"); err != nil || len(v.([]any)) != 0 {
		t.Fatalf("IDS.TAGS of the restarted instance: got %v, %v; want none held", v, err)
	}
	v, err := do(r, "IDS.MARKS")
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
		v, err := do(l, "IDS.INFO", "orders")
		if err != nil {
			t.Fatalf("IDS.INFO: %v", err)
		}
		m, ok := infoField(v, "high_water_mark")
		if !ok {
			t.Fatalf("IDS.INFO: no high_water_mark in %v", v)
		}
		highest = max(highest, m)
	}
	out, status := raiseCmd(t, "--mysql-dsn", dsn, "--instances", ls[0].addr+","+ls[1].addr+","+r.addr+",127.0.0.1:1")
	t.Logf("raise-max-id (exit %d):\n%s", status, out)
	if status != 1 || !strings.Contains(out, "127.0.0.1:1") {
		t.Errorf("with an unreachable instance: got exit %d, want 1 and the instance named", status)
	}
	raised := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")
	if raised != highest || raised <= lowered {
		t.Fatalf("max_id after raise-max-id: got %d, want the highest mark %d (was lowered to %d)", raised, highest, lowered)
	}
	if got := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'payments'"); got != payMark {
		t.Errorf("payments' max_id after raise-max-id: got %d, want the restarted instance's mark %d (was lowered to %d)", got, payMark, payLowered)
	}
	if v, took, err := waitIncr(r, "payments", 5*time.Second); err != nil || v < payMark {
		t.Errorf("restarted instance after the raise: got %d, %v after %v, want an ID >= %d (above %d served before its restart)", v, err, took, payMark, served)
	}
	for i, l := range ls {
		if v, took, err := waitIncr(l, "orders", 5*time.Second); err != nil || v < raised {
			t.Errorf("instance %d after the raise: got %d, %v after %v, want an ID >= %d", i, v, err, took, raised)
		}
	}
	final := runLoad(loadSpec{tag: "orders", conns: 2, addrs: addrsOf(ls), stop: deadline(time.Second)})
	checkCodes(t, "after the raise", totals(final))
	checkUnique(t, before, after, final)

	// Only upward: max_id set far above by hand stays.
	sqlExec(t, db, "UPDATE leaf_alloc SET max_id = max_id + 1000000 WHERE biz_tag = 'orders'")
	high := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'")
	if out, status := raiseCmd(t, "--mysql-dsn", dsn, "--instances", ls[0].addr+","+ls[1].addr, "--margin", "10"); status != 0 {
		t.Errorf("second run: exit %d, want 0\n%s", status, out)
	}
	if got := sqlInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'orders'"); got != high {
		t.Errorf("second run: max_id %d, want %d unchanged (raise-max-id never lowers)", got, high)
	}
	if out, status := raiseCmd(t); status != 2 || !strings.Contains(out, "usage") {
		t.Errorf("no arguments: got exit %d, want 2 and the usage\n%s", status, out)
	}
	stopClean(t, append(ls, r)...)
}
