package mysqlstore

import (
	"database/sql"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap/zaptest"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/segment"
)

// callCount counts the calls a store makes to the server, by kind (testenv.Faults.Observe).
type callCount struct {
	mu    sync.Mutex
	kinds map[string]int
	stmts []string
}

func (c *callCount) observe(kind, q string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kinds[kind]++
	if q != "" {
		c.stmts = append(c.stmts, kind+": "+strings.Join(strings.Fields(q), " "))
	}
}

func (c *callCount) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kinds, c.stmts = map[string]int{}, nil
}

// roundTrips is the calls that reach the server once each: statements, BEGIN, COMMIT,
// ROLLBACK (a new connection's handshake is counted apart).
func (c *callCount) roundTrips() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, v := range c.kinds {
		if k != "connect" {
			n += v
		}
	}
	return n
}

// observeCalls points s at dsn through a connector that counts its calls into c.
func observeCalls(t *testing.T, s *MySQLStore, dsn string, c *callCount) {
	t.Helper()
	c.reset()
	dcfg, err := driverConfig(MySQLConfig{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := mysql.NewConnector(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(testenv.FaultConnector(mc, testenv.Faults{Observe: c.observe}))
	old := s.db
	s.db = db
	t.Cleanup(func() { _ = old.Close() })
}

// TestFirstUseRoundTrips counts the database round trips and transactions of the first INCR
// of a new tag (auto-create, the failover fence on as by default), connection set-up excluded:
// the figures of docs/BENCHMARKS.md, "First use of a tag on MySQL".
func TestFirstUseRoundTrips(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	s := openTestMySQL(t, dsn, nil)
	var c callCount
	observeCalls(t, s, dsn, &c)
	if err := s.db.Ping(); err != nil { // the connection's handshake, before counting
		t.Fatal(err)
	}
	g, err := segment.New(segment.Config{AutoCreate: true, WaitTimeout: 5 * time.Second}, s, newFakeMarks(), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	waitFor(t, "the first tag refresh", func() bool { return g.Health().StoreOK })
	for i, tag := range []string{"fresh", "fresh2"} {
		c.reset()
		if v := mustNext(t, g, tag); v != 1 {
			t.Fatalf("first ID of %s: got %d, want 1", tag, v)
		}
		c.mu.Lock()
		txs, stmts := c.kinds["begin"], slices.Clone(c.stmts)
		c.mu.Unlock()
		what := "the process's first new tag"
		if i > 0 {
			what = "a later new tag"
		}
		t.Logf("first INCR of %s: %d round trips, %d transactions", what, c.roundTrips(), txs)
		for _, q := range stmts {
			t.Log("  " + q)
		}
		// The creation, its fence row and the first range share one transaction.
		if txs != 1 {
			t.Errorf("first INCR of %s: %d transactions, want 1", tag, txs)
		}
	}
}
