package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/mysqlcluster"
	"github.com/leafd/leafd/internal/testenv"
)

// TestGaleraOlderMember: a Galera cluster bootstrapped again from the member that is behind
// (it left first; the other kept committing allocations) keeps its state UUID and continues
// from a lower seqno, losing those allocations. That is a failover (docs/MYSQL.md,
// "Multi-writer clusters"): instance B, killed -9 while the cluster was down and restarted on
// its data dir, finds the seqno below the one it recorded at its first transaction (a tag
// creation), begins a new generation and takes the fences over (the gap); instance A, running throughout, reconnects and follows the
// recorded generation; instance C, started afterwards with an empty data dir (no marks, no
// record), sees the new identity too. Then the same from the other member, where the running
// instance A is the first to look and begins generation 2. No ID is issued twice across
// every phase.
func TestGaleraOlderMember(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	g := testenv.StartGalera(t, 2)
	n0, n1 := g.Nodes[0], g.Nodes[1]
	n0.Exec("CREATE DATABASE og")
	px := e2e.StartProxy(t, n0.Addr())
	px.SetTargets(g.Addrs()...)
	dsn := galeraDSN(px.Addr(), "og")
	db := e2e.OpenSQL(t, galeraDSN(n1.Addr(), "og"))
	// The gap (failover allocs × max step = 5000 IDs) covers what member 0 misses.
	args := []string{"--mysql-dsn", dsn, "--max-step", "100", "--mysql-failover-allocs", "50", "--log-format", "json"}
	// B does not warm its tags at the restart: its first transaction is the creation below.
	ls := e2e.StartMany(t, args, append(slices.Clone(args), "--warm-tags", "0"))
	a, b := ls[0], ls[1]
	e2e.CreateTag(t, a, db, "o", 10)

	phase := func(what string, want int64, ls ...*e2e.Leafd) []*e2e.ConnLoad {
		t.Helper()
		var total e2e.Counts
		var stop atomic.Bool
		wait := e2e.Background(e2e.Load{Tag: "o", Conns: 2, Addrs: e2e.Addrs(ls...), Count: &total, Stop: stop.Load})
		ok := e2e.Poll(20*time.Second, e2e.Grown(&total.OK, want))
		stop.Store(true)
		loads := wait()
		tt := e2e.Sum(loads)
		t.Logf("%s: %d IDs, codes %v, %d transport errors", what, total.OK.Load(), tt.Codes, tt.NetErrs)
		if !ok {
			t.Fatalf("%s: fewer than %d IDs within 20 s", what, want)
		}
		return loads
	}
	both := phase("both members", 1000, a, b)

	// Member 0 leaves first; the allocations from here on are on member 1 only.
	seqLeft := atoi(t, n0.Status("wsrep_last_committed"))
	n0.Stop()
	px.SetTargets(n1.Addr())
	maxBefore := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'o'")
	lag := phase("member 1 alone", 1500, a, b)
	// B writes a higher seqno to its record at most every 100 ms (mysqlcluster's
	// persistEvery: what a process killed at once may not have written). The claim is about
	// an instance whose record shows commits member 0 lacks, so B goes on until it does.
	e2e.Eventually(t, 20*time.Second, "B's record past member 0's last commit", func() bool {
		if galeraSeqno(t, b) > seqLeft {
			return true
		}
		for range 300 { // a few loads (max step 100): statements that record the seqno
			if _, err := b.Incr("o"); err != nil {
				break
			}
		}
		return false
	})
	maxLost := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'o'")
	seqLost := atoi(t, n1.Status("wsrep_last_committed"))
	uuid := n1.Status("wsrep_cluster_state_uuid")
	if maxLost <= maxBefore || maxLost-maxBefore >= 5000 {
		t.Fatalf("max_id %d after the phase on member 1 alone, %d before: want a loss within the gap of 5000", maxLost, maxBefore)
	}

	b.Kill()
	n1.Stop()
	n0.Bootstrap() // the member that is behind
	px.SetTargets(n0.Addr())
	seq := atoi(t, n0.Status("wsrep_last_committed"))
	if now := n0.Status("wsrep_cluster_state_uuid"); now != uuid || seq >= seqLost {
		t.Fatalf("bootstrap from member 0: state UUID %s seqno %d, want %s below %d", now, seq, uuid, seqLost)
	}
	db = e2e.OpenSQL(t, galeraDSN(n0.Addr(), "og"))
	if m := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'o'"); m >= maxLost {
		t.Fatalf("max_id %d on member 0, %d on member 1: member 0 did not lag", m, maxLost)
	}

	b.Restart()
	// B's first transaction is a tag creation: it finds the loss, and takes the database
	// fence row over under the new generation (tags created from now on start a gap higher).
	if _, err := b.Do("IDS.CREATE", "o2", "STEP", "10"); err != nil {
		t.Fatalf("IDS.CREATE o2: %v", err)
	}
	line := b.WaitLog("restarted from a member that lacked commits; a new generation begins", 5*time.Second)
	t.Logf("B: %v (%v)", line["msg"], line["reason"])
	if owner := e2eString(t, db, "SELECT server_uuid FROM leafd_fence WHERE biz_tag = ''"); owner != "galera:"+uuid+"/1" {
		t.Fatalf("database fence row's owner %q after the creation, want generation 1 of %s", owner, uuid)
	}
	if _, _, err := b.WaitIncr("o", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	b.WaitLog("segment: failover fence: database changed", 5*time.Second)
	if owner := e2eString(t, db, "SELECT server_uuid FROM leafd_fence WHERE biz_tag = 'o'"); owner != "galera:"+uuid+"/1" {
		t.Fatalf("fence owner %q, want generation 1 of %s", owner, uuid)
	}
	c := e2e.Start(t, args...)
	after := phase("restarted from member 0", 1000, a, b, c)
	a.WaitLog("the Galera cluster is in a generation recorded by another instance", 5*time.Second)

	// Again, the other way round: member 1 rejoins (a full state transfer: its extra commits
	// are the lost ones), leaves first, the others keep allocating on member 0, and the
	// cluster is bootstrapped from member 1. This time A, running throughout, looks first.
	n1.ForgetState()
	n1.Start()
	n1.Stop()
	lag2 := phase("member 0 alone", 1000, a, b, c)
	seqLost = atoi(t, n0.Status("wsrep_last_committed"))
	b.Kill()
	c.Kill()
	n0.Stop()
	n1.Bootstrap()
	px.SetTargets(n1.Addr())
	if seq := atoi(t, n1.Status("wsrep_last_committed")); seq >= seqLost {
		t.Fatalf("bootstrap from member 1: seqno %d, want below %d", seq, seqLost)
	}
	db = e2e.OpenSQL(t, galeraDSN(n1.Addr(), "og"))
	alone := phase("A alone", 300, a) // more than its two segments: it allocates
	a.WaitLog("restarted from a member that lacked commits; a new generation begins", 5*time.Second)
	if owner := e2eString(t, db, "SELECT server_uuid FROM leafd_fence WHERE biz_tag = 'o'"); owner != "galera:"+uuid+"/2" {
		t.Fatalf("fence owner %q, want generation 2 of %s", owner, uuid)
	}
	b.Restart()
	c.Restart()
	final := phase("restarted from member 1", 1000, a, b, c)
	e2e.CheckUnique(t, both, lag, after, lag2, alone, final)
	t.Logf("max_id %d before member 0 left, %d lost with member 1; older-member scenario in %v",
		maxBefore, maxLost, time.Since(begin).Round(time.Millisecond))
}

// atoi is a status variable's number.
func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("status %q: %v", s, err)
	}
	return n
}

// e2eString is one string of a query.
func e2eString(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	var s string
	if err := db.QueryRow(q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return strings.TrimSpace(s)
}

// galeraSeqno is the highest seqno l's Galera record (the data dir's galera.json) holds, 0
// before it has one.
func galeraSeqno(t *testing.T, l *e2e.Leafd) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(l.DataDir, mysqlcluster.HistoryFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	var seen map[string]struct {
		Seqno int64 `json:"seqno"`
	}
	if err := json.Unmarshal(b, &seen); err != nil { // replaced by a rename: never read half written
		t.Fatalf("%s: %v", mysqlcluster.HistoryFile, err)
	}
	var top int64
	for _, m := range seen {
		top = max(top, m.Seqno)
	}
	return top
}
