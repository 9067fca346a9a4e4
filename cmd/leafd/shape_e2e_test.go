package main

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// A shaped tag's midnight on the built binary: three instances on one MariaDB serve a daily
// tag (Asia/Shanghai) under load across a simulated midnight (--period-clock-offset puts their
// clocks 300 ms apart around it), one of them killed with SIGKILL near midnight and
// restarted: every string unique, every counter per period strictly increasing per
// connection, IDs of both days issued.
func TestShapedDailyAcrossMidnightBinary(t *testing.T) {
	t.Parallel()
	dsn, db := e2e.SharedDB(t)
	loc, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	n := now.In(loc)
	midnight := time.Date(n.Year(), n.Month(), n.Day()+1, 0, 0, 0, 0, loc)
	const lead = 12 * time.Second // the instances' midnight comes this long after now
	base := midnight.Sub(now) - lead
	var ls []*e2e.Leafd
	for i := range 3 {
		off := base + time.Duration(i-1)*300*time.Millisecond
		ls = append(ls, e2e.StartMySQL(t, dsn, "--period-clock-offset", off.String(), "--wait-timeout", "10s"))
	}
	if _, err := ls[0].Do("IDS.CREATE", "order", "FORMAT", "ORD{yyyyMMdd}{seq:8}", "RESET", "day", "TZ", "Asia/Shanghai", "STEP", "100"); err != nil {
		t.Fatal(err)
	}
	wallMidnight := now.Add(lead)
	end := wallMidnight.Add(5 * time.Second)

	var mu sync.Mutex
	seen := map[string]string{}
	days := map[string]int{}
	var netErrs, unavailable int
	var wg sync.WaitGroup
	for i := range 9 {
		inst := i % 3
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := map[string]int{}
			who := "instance " + strconv.Itoa(inst) + " conn " + strconv.Itoa(i)
			for time.Now().Before(end) {
				c := e2e.ConnClient(ls[inst].Addr)
				for time.Now().Before(end) {
					ids, err := c.Do(context.Background(), "IDS.NEXT", "order", 5).StringSlice()
					if err != nil {
						if code, coded := e2e.ReplyCode(err); coded {
							// UNAVAILABLE: the first load of a period's new row lost a MySQL
							// deadlock against another instance's creation of it (retryable).
							if code != "UNAVAILABLE" {
								t.Errorf("%s: %v", who, err)
							}
							mu.Lock()
							unavailable++
							mu.Unlock()
							time.Sleep(50 * time.Millisecond)
							continue
						}
						mu.Lock()
						netErrs++
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
						break // a killed instance: reconnect
					}
					mu.Lock()
					for _, id := range ids {
						day := id[3:11]
						ctr, _ := strconv.Atoi(id[11:])
						if ctr <= last[day] {
							t.Errorf("%s: %s after counter %d of %s", who, id, last[day], day)
						}
						last[day] = ctr
						if prev, dup := seen[id]; dup {
							t.Errorf("%s issued twice: %s and %s", id, prev, who)
						}
						seen[id] = who
						days[day]++
					}
					mu.Unlock()
				}
				_ = c.Close()
				// A new connection is a new client: its order starts afresh.
				last = map[string]int{}
			}
		}()
	}
	// SIGKILL instance 1 just before its midnight, restart it (same offset) after.
	time.Sleep(time.Until(wallMidnight.Add(-time.Second)))
	ls[1].Kill()
	ls[1].Restart()
	wg.Wait()
	t.Logf("%d IDs by day %v, %d transport errors (the killed instance), %d UNAVAILABLE", len(seen), days, netErrs, unavailable)
	if unavailable > 30 {
		t.Errorf("%d UNAVAILABLE replies: more than a brief retry at each period's start", unavailable)
	}
	if len(days) != 2 || len(seen) < 1000 {
		t.Fatalf("IDs by day %v: want both days and at least 1000 IDs", days)
	}
	for day := range days {
		if got := e2e.SQLInt(t, db, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = ?", "order@"+day); got != 1 {
			t.Errorf("row order@%s: %d rows", day, got)
		}
	}
	if got := e2e.SQLInt(t, db, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = 'order'"); got != 0 {
		t.Errorf("a plain row 'order' exists")
	}
	if t.Failed() {
		for i, l := range ls {
			t.Logf("instance %d log:\n%s", i, l.Log())
		}
	}
	e2e.StopClean(t, ls...)
}
