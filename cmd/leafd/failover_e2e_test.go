package main

// The database failover test: real MariaDB replication, a proxy that moves like a
// virtual IP, three leafd processes under load, and failovers to a replica that lost the
// last allocations.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// failoverRound is one failover of TestMySQLFailover.
type failoverRound struct {
	lag      int64   // allocations of each tag the replica misses when the proxy moves (at least)
	kill     int     // instance killed -9 at the switch and restarted after it (-1: none)
	wipe     bool    // the killed instance restarts with an empty data dir (no marks)
	lost     int64   // measured: transactions of the old primary the new one lacks
	lostIDs  []int64 // measured, per tag: old primary's max_id - new primary's
	lostN    []int64 // measured, per tag: allocations lost (lostIDs / step)
	switched time.Time
	oldMax   []int64 // per tag: the old primary's max_id: IDs at or above come from the new one
}

// TestMySQLFailover runs three leafd instances through a proxy on a primary replicating
// asynchronously to a replica, under paced INCR load on two tags with fixed steps (10 and
// 100: --max-step 10 keeps every step at the tag's stored one), and fails the database over
// six times to the replica after stopping its applier until it misses 0 to 10 allocations
// of each tag: the proxy drops every connection, the replica is promoted (what it had not
// applied is lost), the proxy moves to it, and the old primary is rebuilt as the new
// replica. At two switches an instance is killed -9 and restarted, once with a wiped data
// dir (no marks). Every ID handed out is unique, each connection's IDs increase, refusals
// are UNAVAILABLE only, and the time until every instance serves from ranges of the new
// primary is reported.
//
// LEAFD_TEST_FAILOVER_ALLOCS sets --mysql-failover-allocs (default 16: 10 lost allocations
// and a margin for the loads already under way when a tag's clients are held); 0 turns the fence off, and the test then finds
// duplicates (the check that the fence is what makes it pass).
func TestMySQLFailover(t *testing.T) {
	t.Parallel()
	allocs := "16"
	if v := os.Getenv("LEAFD_TEST_FAILOVER_ALLOCS"); v != "" {
		allocs = v
	}
	r, px, dsn := e2e.Replicated(t)

	tags := []string{"ten", "hundred"}
	steps := []int64{10, 100}
	args := []string{"--max-step", "10", "--mysql-failover-allocs", allocs, "--load-timeout", "2s"}
	wipeDir := filepath.Join(t.TempDir(), "wiped")
	ls := []*e2e.Leafd{
		e2e.StartMySQL(t, dsn, args...),
		e2e.StartMySQL(t, dsn, args...),
		e2e.StartMySQL(t, dsn, append(slices.Clone(args), "--data-dir", wipeDir)...),
	}
	db := e2e.OpenSQL(t, r.Primary.DSN("leafd"))
	e2e.CreateTag(t, ls[0], db, tags[0], 10)
	// A stored step above these instances' --max-step (IDS.CREATE refuses one there): the tag
	// comes from an instance that loads larger segments, as in a fleet with mixed flags.
	creator := e2e.StartMySQL(t, dsn, "--max-step", "100", "--mysql-failover-allocs", allocs)
	e2e.CreateTag(t, creator, db, tags[1], 100)
	if err := creator.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()

	var stop atomic.Bool
	// Paced so that both tags allocate at similar rates (a few dozen per second): tag ten
	// needs ten times fewer IDs per allocation.
	pauses := make([]atomic.Int64, len(tags))
	holds := make([]atomic.Bool, len(tags)) // a tag that lost enough waits for the others
	pauses[0].Store(int64(25 * time.Millisecond))
	pauses[1].Store(int64(2 * time.Millisecond))
	loads := make([][]*e2e.ConnLoad, len(tags))
	highest := make([][]atomic.Int64, len(tags)) // per tag and instance: the highest ID served
	var served atomic.Int64                      // IDs served on all tags
	var wg sync.WaitGroup
	for i, tag := range tags {
		highest[i] = make([]atomic.Int64, len(ls))
		seen := func(inst int, id int64) {
			served.Add(1)
			h := &highest[i][inst]
			for cur := h.Load(); id > cur && !h.CompareAndSwap(cur, id); cur = h.Load() {
			}
		}
		wg.Go(func() {
			loads[i] = e2e.RunLoad(e2e.Load{Tag: tag, Conns: 2, Keep: true, Pause: &pauses[i], Hold: &holds[i], Addrs: e2e.Addrs(ls...), Stop: stop.Load, Seen: seen})
		})
	}
	// recovered waits until every instance has served, on every tag, an ID at or above floor
	// (from a range of the current primary).
	recovered := func(what string, floor []int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for j := range tags {
			for inst := range ls {
				if !e2e.Poll(time.Until(deadline), func() bool { return highest[j][inst].Load() >= floor[j] }) {
					// Not fatal: the uniqueness check at the end says more (fence off).
					t.Errorf("%s: instance %d served nothing of %s at or above %d within 30s (highest %d)\n%s",
						what, inst, tags[j], floor[j], highest[j][inst].Load(), e2e.Tail(ls[inst].Log(), 10))
					return
				}
			}
		}
	}
	defer func() { stop.Store(true); wg.Wait() }()

	rounds := []failoverRound{
		{lag: 3, kill: -1}, {lag: 10, kill: 1}, {lag: 0, kill: -1},
		{lag: 7, kill: 2, wipe: true}, {lag: 1, kill: -1}, {lag: 10, kill: -1},
	}
	maxIDs := func(m *testenv.MariaDB) []int64 {
		out := make([]int64, len(tags))
		for i, tag := range tags {
			out[i], _ = strconv.ParseInt(m.QueryString("SELECT max_id FROM leafd.leaf_alloc WHERE biz_tag = ?", tag), 10, 64)
		}
		return out
	}
	for i := range rounds {
		rd := &rounds[i]
		if i > 0 {
			recovered(fmt.Sprintf("after round %d", i-1), rounds[i-1].oldMax)
		}
		// Load on the current primary: 1000 IDs.
		e2e.Eventually(t, time.Minute, fmt.Sprintf("round %d: 1000 IDs on the current primary", i), e2e.Grown(&served, 1000))
		r.StopApplier()
		base := maxIDs(r.Replica) // frozen: the replica applies nothing more
		behind := func() (least int64, per []int64) {
			least = -1
			for j, m := range maxIDs(r.Primary) {
				n := (m - base[j]) / steps[j]
				per = append(per, n)
				if least < 0 || n < least {
					least = n
				}
			}
			return least, per
		}
		for deadline := time.Now().Add(20 * time.Second); ; {
			n, per := behind()
			for j := range tags {
				if per[j] >= rd.lag {
					holds[j].Store(true)
				}
			}
			if n >= rd.lag {
				break
			}
			if time.Now().After(deadline) {
				// Instances that refuse (REGRESSION) allocate nothing; the checks below say why.
				t.Logf("round %d: the replica is %v allocations behind after 20s, want %d of each tag; failing over anyway", i, per, rd.lag)
				break
			}
			time.Sleep(time.Millisecond) // polling the primary's max_id: the hold must come quickly
		}
		// The primary is gone: every connection to it drops, new ones are refused.
		px.SetMode(e2e.ProxyReset, 0)
		if rd.kill >= 0 {
			ls[rd.kill].Kill()
			if rd.wipe {
				if err := os.RemoveAll(wipeDir); err != nil {
					t.Fatal(err)
				}
			}
		}
		rd.lost = r.Promote()
		rd.oldMax = maxIDs(r.Replica)
		newMax := maxIDs(r.Primary)
		for j := range tags {
			rd.lostIDs = append(rd.lostIDs, rd.oldMax[j]-newMax[j])
			rd.lostN = append(rd.lostN, (rd.oldMax[j]-newMax[j])/steps[j])
		}
		px.SetTarget(r.Primary.Addr())
		px.SetMode(e2e.ProxyPass, 0)
		for j := range holds {
			holds[j].Store(false)
		}
		rd.switched = time.Now()
		if rd.kill >= 0 {
			ls[rd.kill].Restart()
		}
		t.Logf("round %d: failover losing %v allocations of %v (%d transactions); killed %d wiped %v",
			i, rd.lostN, tags, rd.lost, rd.kill, rd.wipe)
		r.Rejoin("leafd")
		r.WaitCaughtUp(60 * time.Second)
	}
	recovered("after the last round", rounds[len(rounds)-1].oldMax)
	stop.Store(true)
	wg.Wait()

	// Uniqueness (per tag) and order first.
	for _, l := range loads {
		e2e.CheckUnique(t, l)
		e2e.CheckOrder(t, l)
	}
	var all []*e2e.ConnLoad
	for _, l := range loads {
		all = append(all, l...)
	}
	tt := e2e.Sum(all)
	t.Logf("%d IDs, refusals %v, transport errors %d (killed instances)", tt.IDs, tt.Codes, tt.NetErrs)
	for code, n := range tt.Codes {
		if code != "UNAVAILABLE" {
			t.Errorf("got %d %s replies, want only UNAVAILABLE around the switches", n, code)
		}
	}
	for j, tag := range tags {
		most := int64(0)
		for _, rd := range rounds {
			most = max(most, rd.lostN[j])
		}
		if most < 10 {
			t.Errorf("tag %s: the largest failover lost %d allocations, want rounds with 10", tag, most)
		}
	}

	// Recovery: per round and instance, the time from the switch until the instance served
	// an ID from a range of the new primary (at or above the old primary's max_id), on every
	// tag.
	var report strings.Builder
	for i, rd := range rounds {
		end := time.Now()
		if i+1 < len(rounds) {
			end = rounds[i+1].switched
		}
		fmt.Fprintf(&report, "round %d (lost allocations %v, kill %d wipe %v):", i, rd.lostN, rd.kill, rd.wipe)
		for inst := range ls {
			worst := time.Duration(0)
			for j := range tags {
				d, ok := e2e.FirstOK(loads[j], inst, rd.oldMax[j], rd.switched, end)
				if !ok {
					t.Errorf("round %d: instance %d served no ID of %s from the new primary before the next round", i, inst, tags[j])
					continue
				}
				worst = max(worst, d)
			}
			fmt.Fprintf(&report, " inst%d %v", inst, worst.Round(time.Millisecond))
			e2e.BenchOut(t, fmt.Sprintf("failover_recovery_round%d_inst%d", i, inst), float64(worst.Microseconds())/1000, "ms")
		}
		report.WriteString("\n")
	}
	t.Logf("recovery (switch → first ID from a range of the new primary, slowest tag):\n%s", report.String())
}
