package handlers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/segment/mysqlstore"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// TestOrderedMySQLFollowerReturnsLeadersIDs: two instances on one MariaDB database, leases
// in leafd_leader on the database clock and renewed by each instance's lease goroutine. An
// ordered tag created on one is served by it; INCR on the other returns the leader's next
// IDs (one sequence across both); after the leader's graceful stop (its lease given back) the
// other takes over and continues above every ID returned before.
func TestOrderedMySQLFollowerReturnsLeadersIDs(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	ctx := context.Background()
	open := func() (*mysqlstore.MySQLStore, *ordered.MySQLLeases) {
		mcfg := mysqlstore.DefaultMySQLConfig()
		mcfg.DSN = dsn
		st, err := mysqlstore.OpenMySQL(ctx, mcfg, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		l := ordered.NewMySQLLeases(st.DB(), 5*time.Second)
		if err := l.EnsureTable(ctx); err != nil {
			t.Fatal(err)
		}
		return st, l
	}
	cl := &ordCluster{}
	sa, la := open()
	sb, lb := open()
	a := cl.start(t, ordOpts{store: sa, leases: la, catalog: la, clk: clock.Real{}, length: time.Second})
	b := cl.start(t, ordOpts{store: sb, leases: lb, catalog: lb, clk: clock.Real{}, length: time.Second})
	ca, cb := a.client(t), b.client(t)
	if err := ca.Do(ctx, "IDS.CREATE", "seq", "ORDERED").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	// until is the first INCR on c that answers an ID: TRYAGAIN while the instance learns
	// of the tag and of its leader, never another error.
	until := func(c *redis.Client, what string) int64 {
		t.Helper()
		var id int64
		var err error
		if !testkit.Poll(time.Until(deadline), func() bool {
			id, err = c.Incr(ctx, "seq").Result()
			if err != nil && !strings.HasPrefix(err.Error(), "TRYAGAIN ") && !strings.HasPrefix(err.Error(), "UNAVAILABLE ") {
				t.Fatalf("%s: %v", what, err)
			}
			return err == nil
		}) {
			t.Fatalf("%s: %v", what, err)
		}
		return id
	}
	last := until(ca, "the leader's first INCR")
	if got := until(cb, "the follower's first INCR"); got != last+1 {
		t.Fatalf("the follower's first ID %d, want the leader's next, %d", got, last+1)
	}
	last++
	for i := range 20 {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		id, err := c.Incr(ctx, "seq").Result()
		if err != nil || id != last+1 {
			t.Fatalf("INCR %d: %d %v, want %d", i, id, err, last+1)
		}
		last = id
	}
	a.stop() // gives its lease back
	if got := until(cb, "the follower after the leader stopped"); got <= last {
		t.Fatalf("the new leader's first ID %d is not above %d", got, last)
	}
	info, err := cb.Do(ctx, "IDS.INFO", "seq").Slice()
	if err != nil || !strings.Contains(strings.Join(strs(info), " "), "leader_here 1") {
		t.Fatalf("IDS.INFO after the take-over: %v %v", info, err)
	}
}

func strs(v []any) []string {
	out := make([]string, 0, len(v))
	for _, x := range v {
		out = append(out, fmt.Sprint(x))
	}
	return out
}
