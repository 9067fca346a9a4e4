package main

// Shaped tags through MySQL failovers on the built binary (docs/SHAPES.md, "Failovers"): the
// README's ORD{yyyyMMdd}{seq:6} keeps serving today's and tomorrow's rows after a failover to
// a caught-up replica, a server_id change and a failover to a lagging replica, with no string
// issued twice, and a day that begins after the failover starts at 1.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

func TestShapedFailoverBinary(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"caught-up", "server-id", "lagging"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			testShapedFailover(t, how)
		})
	}
}

func testShapedFailover(t *testing.T, how string) {
	r, px, dsn := e2e.Replicated(t)
	// STEP 10 and the default fence (20 allocations): a row moves by 200 at a takeover, and
	// the few hundred IDs below take many allocations, some of them lost when lagging.
	args := []string{"--load-timeout", "2s"}
	today := e2e.StartMySQL(t, dsn, append(args, "--period-clock-offset", "0s")...)
	tomorrow := e2e.StartMySQL(t, dsn, append(args, "--period-clock-offset", "24h")...)
	for tag, format := range map[string]string{"ord": "ORD{yyyyMMdd}{seq:6}", "lost": "LST{yyyyMMdd}{seq:6}"} {
		if _, err := today.Do("IDS.CREATE", tag, "FORMAT", format, "RESET", "day", "STEP", 10); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]string{}
	dups := 0
	var takeTag func(l *e2e.Leafd, tag, who string, n int)
	take := func(l *e2e.Leafd, who string, n int) {
		t.Helper()
		takeTag(l, "ord", who, n)
	}
	takeTag = func(l *e2e.Leafd, tag, who string, n int) {
		t.Helper()
		for range n {
			v, err := l.Do("IDS.NEXT", tag)
			if err != nil {
				t.Fatalf("%s: IDS.NEXT ord: %v", who, err)
			}
			s := fmt.Sprint(v)
			if prev, ok := seen[s]; ok {
				dups++
				if dups <= 5 {
					t.Errorf("%s issued %s, issued before by %s", who, s, prev)
				}
			}
			seen[s] = who
		}
	}
	day := func(k int) string { return time.Now().UTC().AddDate(0, 0, k).Format("20060102") }
	counter := func(l *e2e.Leafd) (string, int) {
		t.Helper()
		v, err := l.Do("IDS.NEXT", "ord")
		if err != nil {
			t.Fatal(err)
		}
		s := fmt.Sprint(v)
		seen[s] = "probe"
		n, _ := strconv.Atoi(s[len(s)-6:])
		return s[3:11], n
	}
	take(today, "today", 55)
	take(tomorrow, "tomorrow", 55)
	r.WaitCaughtUp(30 * time.Second)
	if how == "lagging" {
		r.StopApplier() // what follows is lost at the failover: a few allocations per row
		take(today, "today (lost)", 45)
		take(tomorrow, "tomorrow (lost)", 45)
		takeTag(today, "lost", "today (row created, lost)", 45) // the row's creation is lost too
	}
	if how == "server-id" {
		// A new server_id shows on new connections (MariaDB keeps a session copy).
		r.Primary.Exec("SET GLOBAL server_id = 4242")
		px.SetMode(e2e.ProxyReset, 0)
		px.SetMode(e2e.ProxyPass, 0)
	} else {
		px.SetMode(e2e.ProxyReset, 0)
		lost := r.Promote()
		px.SetTarget(r.Primary.Addr())
		px.SetMode(e2e.ProxyPass, 0)
		t.Logf("%s: %d transactions lost", how, lost)
	}
	// Both rows serve on, past what they held, well inside the width.
	take(today, "today (after)", 300)
	take(tomorrow, "tomorrow (after)", 300)
	for _, c := range []struct {
		l   *e2e.Leafd
		day string
	}{{today, day(0)}, {tomorrow, day(1)}} {
		d, n := counter(c.l)
		if d != c.day || n < 300 || n > 2000 {
			t.Errorf("after the failover: day %s counter %d; want day %s, a counter above 300 and far below the width", d, n, c.day)
		}
	}
	// The first creation after the failover takes the database row over (a new tag's row,
	// today); a day that begins after that takeover starts at its START: an instance whose
	// clock is three days ahead creates that day's row now.
	if _, err := today.Do("IDS.CREATE", "inv", "FORMAT", "INV{yyyyMMdd}{seq:6}", "RESET", "day", "STEP", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := today.Do("IDS.NEXT", "inv"); err != nil {
		t.Fatal(err)
	}
	later := e2e.StartMySQL(t, dsn, append(args, "--period-clock-offset", "72h")...)
	if how == "lagging" {
		// A fresh instance (no marks) creates the lost row again: above what it issued.
		fresh := e2e.StartMySQL(t, dsn, append(args, "--period-clock-offset", "0s")...)
		takeTag(fresh, "lost", "fresh (row created again)", 100)
	}
	if d, n := counter(later); d != day(3) || n != 1 {
		t.Errorf("a day created after the failover: day %s counter %d, want %s and 1", d, n, day(3))
	}
	if dups > 0 {
		t.Fatalf("%s: %d duplicate strings among %d", how, dups, len(seen))
	}
	if !strings.Contains(today.Log()+tomorrow.Log(), "failover fence") {
		t.Errorf("%s: no takeover logged", how)
	}
	t.Logf("%s: %d distinct strings, 0 duplicates", how, len(seen))
}
