package zk

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/snowflake"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig is a generator configuration on the fake clock c.
func testConfig(c *clock.Fake) snowflake.Config {
	return snowflake.Config{SequenceStartZero: true, Clock: c, RetryInterval: time.Millisecond}
}

// waitReady waits until g issues: New leaves the wait for the start bound to the background.
func waitReady(t *testing.T, g *snowflake.Generator) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !g.Info().HasWorker {
		if time.Now().After(deadline) {
			t.Fatalf("generator not ready after 10s: %s", g.Info().Status)
		}
		time.Sleep(time.Millisecond)
	}
}

func mustNext(t *testing.T, g *snowflake.Generator) int64 {
	t.Helper()
	id, err := g.Next()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return id
}
