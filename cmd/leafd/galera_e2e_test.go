package main

// leafd on a MariaDB Galera cluster (docs/MYSQL.md, "Multi-writer clusters"): instances
// write through different members, or through a balancer that deals connections
// round-robin over them. One two-node cluster serves every scenario, in order; the last
// kills and rejoins a member.

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// galeraDSN is a DSN of database db through addr.
func galeraDSN(addr, db string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", addr, db
	return cfg.FormatDSN()
}

// certFailures is the sum over the running nodes of the transactions certification failed
// or replicated ones aborted (wsrep_local_cert_failures + wsrep_local_bf_aborts).
func certFailures(t *testing.T, g *testenv.Galera) int64 {
	t.Helper()
	var n int64
	for _, node := range g.Nodes {
		for _, v := range []string{"wsrep_local_cert_failures", "wsrep_local_bf_aborts"} {
			k, _ := strconv.ParseInt(node.Status(v), 10, 64)
			n += k
		}
	}
	return n
}

func TestGalera(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	g := testenv.StartGalera(t, 2)
	t.Logf("cluster of 2 synced in %v", time.Since(begin).Round(time.Millisecond))
	n0, n1 := g.Nodes[0], g.Nodes[1]

	// ORDERED: one instance on each member, clients on both. A renewal through the other
	// member is no failover: the lease stays with its holder, no order violation.
	t.Run("ordered", func(t *testing.T) {
		n0.Exec("CREATE DATABASE ord")
		db := e2e.OpenSQL(t, galeraDSN(n0.Addr(), "ord"))
		ls := startOrderedCluster(t, []string{galeraDSN(n0.Addr(), "ord"), galeraDSN(n1.Addr(), "ord")}, "seq", 50)
		load := startLinLoad(t, "seq", ls, 2)
		load.served(t, -1, 200, 20*time.Second, "ordered on two members")
		fault := time.Now()
		// Several lease lengths: renewals through both members.
		for end := time.Now().Add(3 * orderedLease); time.Now().Before(end); {
			load.served(t, 0, 200, 20*time.Second, "ordered, clients of member 0")
			load.served(t, 1, 200, 20*time.Second, "ordered, clients of member 1")
		}
		load.check(t, "galera_ordered", fault, orderedLease+orderedMargin, 2000, nil, "TRYAGAIN")
		// Each instance's first renewal is its own term at most: no settle loop.
		if e := e2e.SQLInt(t, db, "SELECT epoch FROM leafd_leader WHERE biz_tag = 'seq'"); e > 3 {
			t.Errorf("lease epoch %d after the load, want at most 3 (a term per renewal through another member is the failover loop)", e)
		}
	})

	// One instance behind a round-robin balancer whose connections are cut every second:
	// its allocations move between the members all the time, and none is a failover.
	t.Run("round-robin", func(t *testing.T) {
		n0.Exec("CREATE DATABASE rr")
		db := e2e.OpenSQL(t, galeraDSN(n0.Addr(), "rr"))
		px := e2e.StartProxy(t, n0.Addr())
		px.SetTargets(g.Addrs()...)
		l := e2e.Start(t, "--mysql-dsn", galeraDSN(px.Addr(), "rr"), "--max-step", "1000", "--log-format", "json")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					px.CloseConns()
				}
			}
		})
		defer func() { close(stop); wg.Wait() }()

		createThroughCuts(t, l, "fresh", "STEP", 20, "START", 1000)
		if id, _, err := l.WaitIncr("fresh", 10*time.Second); err != nil || id != 1000 {
			t.Fatalf("first ID of a fresh tag: %d, %v; want its START 1000", id, err)
		}
		createThroughCuts(t, l, "ord", "FORMAT", "ORD{yyyyMMdd}{seq:6}", "RESET", "day", "TZ", "UTC", "STEP", "20")
		c := e2e.ConnClient(l.Addr)
		defer c.Close()
		ctx := context.Background()
		// A cut connection may fail the allocation it carried (UNAVAILABLE, retried by the
		// client; its range is a gap if its COMMIT had been applied), never a failover.
		var last int64 = 1000
		seen := map[string]bool{}
		unavailable, incrs := 0, 0
		deadline := time.Now().Add(4 * time.Second)
		for time.Now().Before(deadline) || incrs < 400 || len(seen) < 400 {
			if time.Now().After(deadline.Add(40 * time.Second)) {
				t.Fatalf("only %d INCR and %d IDS.NEXT in 44 s (%d UNAVAILABLE)", incrs, len(seen), unavailable)
			}
			v, err := c.Incr(ctx, "fresh").Result()
			if code, _ := e2e.ReplyCode(err); code == "UNAVAILABLE" {
				unavailable++
				time.Sleep(10 * time.Millisecond) // pacing: retry as a client would
				continue
			} else if err != nil {
				t.Fatalf("INCR fresh after %d: %v", last, err)
			}
			if v <= last {
				t.Fatalf("INCR fresh: %d after %d, want increasing", v, last)
			}
			last = v
			incrs++
			ids, err := c.Do(ctx, "IDS.NEXT", "ord", 1).StringSlice()
			if code, _ := e2e.ReplyCode(err); code == "UNAVAILABLE" {
				unavailable++
				time.Sleep(10 * time.Millisecond) // pacing
				continue
			}
			if err != nil || len(ids) != 1 || len(ids[0]) != len("ORD20060102")+6 || seen[ids[0]] {
				t.Fatalf("IDS.NEXT ord: %v, %v (after %d)", ids, err, len(seen))
			}
			seen[ids[0]] = true
		}
		if e := e2e.SQLInt(t, db, "SELECT MAX(epoch) FROM leafd_fence"); e != 1 {
			t.Errorf("fence epoch %d after allocations through both members, want 1 (no takeover)", e)
		}
		if maxID := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'fresh'"); maxID > last+int64(unavailable+2)*1000 {
			t.Errorf("max_id of fresh %d after ID %d: jumped", maxID, last)
		}
		t.Logf("round-robin: %d INCR up to %d, %d IDS.NEXT, %d UNAVAILABLE, connections cut every second", incrs, last, len(seen), unavailable)
	})

	// Two instances, one on each member, on one tag with a small step: their allocations
	// meet in certification; each conflict is retried, none reaches a client.
	t.Run("conflicts", func(t *testing.T) {
		n0.Exec("CREATE DATABASE cf")
		db := e2e.OpenSQL(t, galeraDSN(n0.Addr(), "cf"))
		// A largest step of 1000: a few hundred allocations in the run, so that they meet.
		ls := e2e.StartMany(t, []string{"--mysql-dsn", galeraDSN(n0.Addr(), "cf"), "--max-step", "1000"},
			[]string{"--mysql-dsn", galeraDSN(n1.Addr(), "cf"), "--max-step", "1000"})
		e2e.CreateTag(t, ls[0], db, "hot", 2)
		before := certFailures(t, g)
		var ok atomic.Int64
		start := time.Now()
		loads := e2e.RunLoad(e2e.Load{Tag: "hot", Conns: 4, Addrs: e2e.Addrs(ls...), Count: &e2e.Counts{},
			Seen: func(int, int64) { ok.Add(1) }, Stop: func() bool {
				// At least 5 s and 2000 IDs, so that allocations meet in certification; a
				// loaded machine takes longer to reach them (at most 30 s).
				d := time.Since(start)
				return (d > 5*time.Second && ok.Load() >= 2000) || d > 30*time.Second
			}})
		conflicts := certFailures(t, g) - before
		tt := e2e.Sum(loads)
		t.Logf("conflicts: %d IDs, %d certification failures or aborts on the members, codes %v", ok.Load(), conflicts, tt.Codes)
		e2e.CheckUnique(t, loads)
		e2e.CheckCodes(t, "two members, one tag", tt)
		if t.Failed() {
			for i, l := range ls {
				t.Logf("instance %d log:\n%s", i, tail(l.Log(), 4000))
			}
		}
		if ok.Load() < 2000 {
			t.Errorf("%d IDs, want at least 2000", ok.Load())
		}
		if conflicts == 0 {
			t.Errorf("no certification conflict on the members: the test did not exercise the retry")
		}
	})

	// A member killed -9 under load and rejoined (state transfer): instance 0 on member 0,
	// instance 1 through the balancer over both. No ID twice.
	t.Run("kill-rejoin", func(t *testing.T) {
		n0.Exec("CREATE DATABASE kr")
		db := e2e.OpenSQL(t, galeraDSN(n0.Addr(), "kr"))
		px := e2e.StartProxy(t, n0.Addr())
		px.SetTargets(g.Addrs()...)
		ls := e2e.StartMany(t, []string{"--mysql-dsn", galeraDSN(n0.Addr(), "kr")}, []string{"--mysql-dsn", galeraDSN(px.Addr(), "kr")})
		e2e.CreateTag(t, ls[0], db, "k", 20)
		var total e2e.Counts
		var stop atomic.Bool
		wait := e2e.Background(e2e.Load{Tag: "k", Conns: 3, Addrs: e2e.Addrs(ls...), Count: &total, Stop: stop.Load})
		if !e2e.Poll(20*time.Second, e2e.Grown(&total.OK, 1000)) {
			stop.Store(true)
			wait()
			t.Fatalf("no load before the kill")
		}
		n1.Kill()
		px.SetTargets(n0.Addr())
		if !e2e.Poll(20*time.Second, e2e.Grown(&total.OK, 1000)) {
			stop.Store(true)
			wait()
			t.Fatalf("fewer than 1000 IDs within 20 s with member 1 down")
		}
		n1.Start()
		px.SetTargets(g.Addrs()...)
		if !e2e.Poll(20*time.Second, e2e.Grown(&total.OK, 2000)) {
			stop.Store(true)
			wait()
			t.Fatalf("fewer than 2000 IDs within 20 s after member 1 rejoined")
		}
		stop.Store(true)
		loads := wait()
		tt := e2e.Sum(loads)
		t.Logf("kill-rejoin: %d IDs, codes %v, %d transport errors", total.OK.Load(), tt.Codes, tt.NetErrs)
		e2e.CheckUnique(t, loads)
		e2e.CheckOrder(t, loads)
	})
	// The whole cluster stopped, and member 0 bootstrapped again under a new state UUID (its
	// grastate.dat removed, as the procedure for a node that may lack commits says): another
	// database to the fence, whose first allocation of each tag jumps the safety gap.
	t.Run("new-history", func(t *testing.T) {
		n0.Exec("CREATE DATABASE nh")
		db := e2e.OpenSQL(t, galeraDSN(n0.Addr(), "nh"))
		l := e2e.Start(t, "--mysql-dsn", galeraDSN(n0.Addr(), "nh"), "--max-step", "1000", "--log-format", "json")
		e2e.CreateTag(t, l, db, "h", 10)
		if _, _, err := l.WaitIncr("h", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		uuid := n0.Status("wsrep_cluster_state_uuid")
		before := e2e.SQLInt(t, db, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'h'")
		n1.Stop()
		n0.Stop()
		n0.NewHistory()
		n0.Start()
		if now := n0.Status("wsrep_cluster_state_uuid"); now == uuid {
			t.Fatalf("state UUID %s kept after a bootstrap without grastate.dat", now)
		}
		l.Kill() // a fresh instance: no mark of its own, only the fence can tell
		l2 := e2e.Start(t, "--mysql-dsn", galeraDSN(n0.Addr(), "nh"), "--max-step", "1000", "--log-format", "json")
		id, _, err := l2.WaitIncr("h", 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		db = e2e.OpenSQL(t, galeraDSN(n0.Addr(), "nh"))
		gap := e2e.SQLInt(t, db, "SELECT gap FROM leafd_fence WHERE biz_tag = 'h'")
		if gap <= 0 || id < before+gap {
			t.Fatalf("first ID on the new history %d, max_id before %d, fence gap %d: want a takeover past the gap", id, before, gap)
		}
		t.Logf("new history: first ID %d, max_id before %d, gap %d", id, before, gap)
	})
	t.Logf("Galera scenarios in %v", time.Since(begin).Round(time.Millisecond))
}

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// createThroughCuts runs IDS.CREATE tag opts... through a link the test cuts: a cut
// connection answers UNAVAILABLE and the client retries, as a client would; TAGEXISTS after
// such a retry means the cut attempt had committed.
func createThroughCuts(t *testing.T, l *e2e.Leafd, tag string, opts ...any) {
	t.Helper()
	args := append([]any{"IDS.CREATE", tag}, opts...)
	retried := false
	for end := time.Now().Add(10 * time.Second); ; {
		_, err := l.Do(args...)
		code, _ := e2e.ReplyCode(err)
		switch {
		case err == nil, retried && code == "TAGEXISTS":
			return
		case code == "UNAVAILABLE" && time.Now().Before(end):
			retried = true
			time.Sleep(20 * time.Millisecond) // pacing: retry as a client would
		default:
			t.Fatalf("IDS.CREATE %s: %v", tag, err)
		}
	}
}
