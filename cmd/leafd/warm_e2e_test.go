package main

import (
	"github.com/leafd/leafd/internal/e2e"

	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/testenv"
)

// TestMySQLWarmAfterOutageStart: an instance restarted while MySQL is unreachable warms the
// tags it served before once MySQL returns (the first tag list that succeeds starts the warm
// start), not only when the tag list at start succeeds.
func TestMySQLWarmAfterOutageStart(t *testing.T) {
	t.Parallel()
	base := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	px := e2e.StartProxy(t, cfg.Addr)
	cfg.Addr = px.Addr()
	x := e2e.StartMySQL(t, cfg.FormatDSN(), "--default-step", "10", "--load-timeout", "1s")
	const n = 5
	for i := range n {
		tag := fmt.Sprintf("w%d", i)
		if _, err := x.Do("IDS.CREATE", tag, "STEP", 10); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Incr(tag); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	px.SetMode(e2e.ProxyReset, 0)
	x.Restart()
	px.SetMode(e2e.ProxyPass, 0)
	var v any
	if !e2e.Poll(20*time.Second, func() bool {
		v, err = x.Do("IDS.TAGS")
		tags, _ := v.([]any)
		return err == nil && len(tags) == n // warmed
	}) {
		t.Fatalf("20 s after MySQL returned, IDS.TAGS = %v (%v): the %d tags served before the restart were not warmed", v, err, n)
	}
}
