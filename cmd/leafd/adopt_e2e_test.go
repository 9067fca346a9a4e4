package main

// Adoption on the built binary: rows leafd did not create are refused until
// `leafd adopt`, then served from max_id as Leaf would; a failover that loses the adoption
// and the first allocations gives no duplicate; adopting the lagging database is caught.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leafd/leafd/internal/e2e"
)

// adoptCmd runs `leafd adopt args...` and returns its output and exit status.
func adoptCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return e2e.RunTool(t, 60*time.Second, nil, append([]string{"adopt"}, args...)...)
}

// TestMySQLAdoptLeafTable: a Leaf table (order at max_id 5000001, step 2000) and a row
// inserted by hand are refused with NOTADOPTED (no 20-million jump); `leafd adopt --dry-run`
// writes nothing; `leafd adopt` makes the next ID of each its max_id, as Leaf would.
func TestMySQLAdoptLeafTable(t *testing.T) {
	t.Parallel()
	dsn, db := e2e.SharedDB(t)
	e2e.SQLExec(t, db, e2e.LeafTableDDL)
	e2e.SQLExec(t, db, "INSERT INTO leaf_alloc(biz_tag, max_id, step, description) VALUES ('order', 5000001, 2000, 'Leaf')")
	l := e2e.StartMySQL(t, dsn, "--auto-create", "off")
	for range 2 {
		_, err := l.Incr("order")
		if code, _ := e2e.ReplyCode(err); code != "NOTADOPTED" || !strings.Contains(err.Error(), "leafd adopt") {
			t.Fatalf("INCR of a Leaf row before adoption: got %v, want NOTADOPTED naming leafd adopt", err)
		}
	}
	if got := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'order'"); got != 5000001 {
		t.Fatalf("max_id after refusals: got %d, want 5000001 (untouched)", got)
	}
	// The readiness probe of the tag (not held: its loads failed) says why it could not serve.
	if st, body, err := l.HTTPGet("/readyz?tag=order", ""); err != nil || st != 503 || !strings.Contains(body, "NOTADOPTED") {
		t.Fatalf("/readyz?tag=order before adoption: got %d %s %v, want 503 naming NOTADOPTED", st, body, err)
	}
	out, status := adoptCmd(t, "--mysql-dsn", dsn, "--dry-run")
	t.Logf("adopt --dry-run (exit %d):\n%s", status, out)
	if status != 0 || !strings.Contains(out, "would adopt") || !strings.Contains(out, "[5000001, 5002001)") {
		t.Fatalf("dry run: exit %d, want 0 and order listed as would adopt [5000001, 5002001)", status)
	}
	if _, err := l.Incr("order"); err == nil {
		t.Fatal("INCR after a dry run: served, want still refused")
	}
	out, status = adoptCmd(t, "--mysql-dsn", dsn)
	t.Logf("adopt (exit %d):\n%s", status, out)
	if status != 0 || !strings.Contains(out, "adopted") {
		t.Fatalf("adopt: exit %d, want 0", status)
	}
	if st, body, err := l.HTTPGet("/readyz?tag=order", ""); err != nil || st != 200 || !strings.Contains(body, `"not_held":true`) {
		t.Fatalf("/readyz?tag=order after adoption: got %d %s %v, want 200 (could serve it)", st, body, err)
	}
	if v, took, err := l.WaitIncr("order", 5*time.Second); err != nil || v != 5000001 {
		t.Fatalf("INCR order after adopt: got %d, %v after %v; want 5000001 (Leaf's next ID, no jump)", v, err, took)
	}
	// A row inserted by hand later, as the NOTAG reply says: adopted the same way.
	_, err := l.Incr("invoice")
	if code, _ := e2e.ReplyCode(err); code != "NOTAG" || !strings.Contains(err.Error(), "leafd adopt") {
		t.Fatalf("INCR of an unknown tag: got %v, want NOTAG naming leafd adopt", err)
	}
	e2e.SQLExec(t, db, "INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES('invoice', 1, 1000)")
	if _, _, err := l.WaitIncr("invoice", 3*time.Second); err == nil {
		t.Fatal("hand-inserted row before adopt: served, want NOTADOPTED")
	} else if code, _ := e2e.ReplyCode(err); code != "NOTADOPTED" {
		t.Fatalf("hand-inserted row before adopt: got %v, want NOTADOPTED", err)
	}
	if out, status := adoptCmd(t, "--mysql-dsn", dsn); status != 0 || !strings.Contains(out, "already adopted") {
		t.Fatalf("second adopt: exit %d, want 0 with order already adopted:\n%s", status, out)
	}
	if v, took, err := l.WaitIncr("invoice", 5*time.Second); err != nil || v != 1 {
		t.Fatalf("INCR invoice after adopt: got %d, %v after %v; want 1", v, err, took)
	}
	for want := int64(5000002); want < 5000010; want++ {
		if v, err := l.Incr("order"); err != nil || v != want {
			t.Fatalf("INCR order: got %d, %v; want %d", v, err, want)
		}
	}
}

// TestMySQLAdoptFailover: on real asynchronous replication, a Leaf row is adopted and served
// by instance x while the replica has stopped applying; the failover loses the adoption and
// x's allocations. A fresh instance y on the new primary refuses the tag (NOTADOPTED: no
// jump computed from the stale row, so no duplicate of x's range), `leafd adopt` of the
// promoted replica by mistake is caught by x's marks (--instances), and adopting the
// replica before the failover is refused. After raise-max-id and adopt both serve, and no
// ID is served twice.
func TestMySQLAdoptFailover(t *testing.T) {
	t.Parallel()
	r, px, dsn := e2e.Replicated(t)
	r.Primary.Exec("CREATE TABLE leafd."+e2e.LeafTableDDL[len("CREATE TABLE "):],
		"INSERT INTO leafd.leaf_alloc(biz_tag, max_id, step) VALUES ('order', 1, 1000)",
		"INSERT INTO leafd.leaf_alloc(biz_tag, max_id, step) VALUES ('hand', 1, 1000)")
	r.WaitCaughtUp(30 * time.Second)
	args := []string{"--max-step", "1000", "--mysql-failover-allocs", "16", "--load-timeout", "2s", "--auto-create", "off"}
	x := e2e.StartMySQL(t, dsn, args...)
	r.WaitCaughtUp(30 * time.Second) // x's leafd_fence table and database row are replicated
	r.StopApplier()                  // everything from here on is lost at the failover

	// Adopting the lagging replica by mistake: refused, nothing written.
	out, status := adoptCmd(t, "--mysql-dsn", r.Replica.DSN("leafd"))
	if status != 1 || !strings.Contains(out, "replicates from") {
		t.Fatalf("adopt of the replica: exit %d, want 1 (it replicates from the primary):\n%s", status, out)
	}
	if out, status := adoptCmd(t, "--mysql-dsn", dsn, "--tags", "order"); status != 0 || !strings.Contains(out, "not selected") {
		t.Fatalf("adopt of order on the primary: exit %d, want 0 with hand not selected:\n%s", status, out)
	}
	served := map[int64]string{}
	dups := 0
	add := func(who string, id int64) {
		if prev, ok := served[id]; ok {
			dups++
			if dups <= 3 {
				t.Errorf("ID %d served by %s was served before by %s", id, who, prev)
			}
		}
		served[id] = who
	}
	for range 50 {
		id, _, err := x.WaitIncr("order", 5*time.Second)
		if err != nil {
			t.Fatalf("INCR on x: %v", err)
		}
		add("x", id)
	}
	// A tag never adopted, first used on the old primary: a first allocation taken over from
	// the row (1 + gap) would be lost at the failover and computed again, to the same range,
	// by y. It is refused on both.
	for range 5 {
		id, err := x.Incr("hand")
		if err == nil {
			add("x", id)
		} else if code, _ := e2e.ReplyCode(err); code != "NOTADOPTED" {
			t.Fatalf("INCR of a row never adopted on x: got %v, want NOTADOPTED", err)
		}
	}
	if got := r.Replica.QueryString("SELECT COUNT(*) FROM leafd.leafd_fence WHERE biz_tag = 'order'"); got != "0" {
		t.Fatalf("the replica applied the adoption: the test needs it lost")
	}
	px.SetMode(e2e.ProxyReset, 0)
	lost := r.Promote()
	px.SetTarget(r.Primary.Addr())
	px.SetMode(e2e.ProxyPass, 0)
	t.Logf("failover: %d transactions lost (the adoption and x's allocations)", lost)

	y := e2e.StartMySQL(t, dsn, args...) // fresh: no marks
	for range 20 {
		id, err := y.Incr("order")
		if err == nil {
			add("y", id)
			continue
		}
		if code, _ := e2e.ReplyCode(err); code != "NOTADOPTED" && code != "UNAVAILABLE" {
			t.Fatalf("INCR on y after the failover: got %v, want NOTADOPTED", err)
		}
	}
	for range 5 {
		id, err := y.Incr("hand")
		if err == nil {
			add("y", id)
		} else if code, _ := e2e.ReplyCode(err); code != "NOTADOPTED" && code != "UNAVAILABLE" {
			t.Fatalf("INCR of a row never adopted on y: got %v, want NOTADOPTED", err)
		}
	}
	if _, err := y.Incr("order"); err == nil {
		t.Fatal("y served the tag whose adoption was lost, want NOTADOPTED")
	} else if code, _ := e2e.ReplyCode(err); code != "NOTADOPTED" {
		t.Fatalf("y after the failover: got %v, want NOTADOPTED", err)
	}
	// Adopting the promoted replica again by mistake: x's marks are above its max_id.
	insts := x.Addr + "," + y.Addr
	out, status = adoptCmd(t, "--mysql-dsn", dsn, "--instances", insts)
	t.Logf("adopt of the promoted replica (exit %d):\n%s", status, out)
	if status != 1 || !strings.Contains(out, "raise-max-id") {
		t.Fatalf("adopt below x's marks: exit %d, want 1 naming raise-max-id", status)
	}
	if _, err := y.Incr("order"); err == nil {
		t.Fatal("y served after a refused adoption")
	}
	// The runbook: raise max_id above every instance's ranges, then adopt.
	if out, status := raiseCmd(t, "--mysql-dsn", dsn, "--instances", insts); status != 0 {
		t.Fatalf("raise-max-id: exit %d:\n%s", status, out)
	}
	if out, status := adoptCmd(t, "--mysql-dsn", dsn, "--instances", insts); status != 0 {
		t.Fatalf("adopt after raise-max-id: exit %d:\n%s", status, out)
	}
	for range 50 {
		id, _, err := y.WaitIncr("order", 5*time.Second)
		if err != nil {
			t.Fatalf("INCR on y after the repair: %v", err)
		}
		add("y", id)
	}
	for range 50 { // x serves what it holds, then above the raised max_id
		id, _, err := x.WaitIncr("order", 5*time.Second)
		if err != nil {
			t.Fatalf("INCR on x after the repair: %v", err)
		}
		add("x", id)
	}
	if dups > 0 {
		t.Fatalf("%d duplicate IDs", dups)
	}
	t.Logf("%d IDs, 0 duplicates", len(served))
}

// TestMySQLFirstUseFourInstances: 30 new tags, 8 simultaneous first INCRs each, on 4
// instances with --auto-create on: all 240 get IDs (no deadlock turns into UNAVAILABLE).
func TestMySQLFirstUseFourInstances(t *testing.T) {
	t.Parallel()
	dsn, _ := e2e.SharedDB(t)
	var ls []*e2e.Leafd
	for range 4 {
		ls = append(ls, e2e.StartMySQL(t, dsn, "--auto-create", "on"))
	}
	const tags, per = 30, 8
	type reply struct {
		tag string
		id  int64
		err error
	}
	replies := make(chan reply, tags*per)
	start := make(chan struct{})
	var cs []*redis.Client
	for _, l := range ls {
		cs = append(cs, l.Client(2))
	}
	for i := range tags {
		tag := fmt.Sprintf("first%02d", i)
		for j := range per {
			c := cs[(i+j)%4]
			go func() {
				<-start
				id, err := c.Incr(context.Background(), tag).Result()
				replies <- reply{tag, id, err}
			}()
		}
	}
	close(start)
	seen := map[string]map[int64]bool{}
	var failed []string
	for range tags * per {
		r := <-replies
		if r.err != nil {
			failed = append(failed, r.tag+": "+r.err.Error())
			continue
		}
		if seen[r.tag] == nil {
			seen[r.tag] = map[int64]bool{}
		}
		if seen[r.tag][r.id] {
			failed = append(failed, fmt.Sprintf("%s: ID %d twice", r.tag, r.id))
		}
		seen[r.tag][r.id] = true
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d first INCRs failed, e.g. %s", len(failed), tags*per, failed[0])
	}
}
