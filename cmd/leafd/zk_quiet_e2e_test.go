package main

import (
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
	"github.com/leafd/leafd/internal/testenv"
)

// TestZKOutageLogsQuietly: ZooKeeper unreachable for 12 s under the built binary (every
// connection reset, as a down server). The lease extension is retried every 100 ms (about
// 120 tries); each kind of failure logs once, then a summary per 10 s, then its recovery, so
// the outage writes at most 2 kinds x (1 + 12 s / 10 s) + 2 recoveries + the session's own
// line = 9 warnings, where one line per try was 120 (the same rate bound gives at most 8
// lines for a 60 s outage of one kind: the first, 6 summaries, the recovery;
// TestOutageLogsQuietly checks 60 s on an injected clock).
func TestZKOutageLogsQuietly(t *testing.T) {
	t.Parallel()
	zkAddr := testenv.ZKAddr(t)
	px := e2e.StartProxy(t, zkAddr)
	l := e2e.Start(t, e2e.ZKArgs(t, px.Addr(), e2e.ZKTestName(t))...)
	e2e.SFNext(t, l.Client(2))
	before := len(strings.Split(l.Log(), "\n"))
	px.SetMode(e2e.ProxyReset, 0)
	time.Sleep(12 * time.Second) // the outage itself: its length is what is measured
	px.SetMode(e2e.ProxyPass, 0)
	if !e2e.Poll(20*time.Second, func() bool { _, err := l.Do("IDS.SNOWFLAKE"); return err == nil }) {
		t.Fatalf("no snowflake ID 20 s after ZooKeeper is back\n%s", e2e.Tail(l.Log(), 20))
	}
	lines := strings.Split(l.Log(), "\n")[before-1:]
	var loud []string
	for _, line := range lines {
		if strings.Contains(line, "WARN") || strings.Contains(line, "ERROR") || strings.Contains(line, `"warn"`) || strings.Contains(line, `"error"`) {
			loud = append(loud, line)
		}
	}
	if len(loud) > 9 {
		t.Fatalf("a 12 s ZooKeeper outage logged %d warnings, want at most 9:\n%s", len(loud), strings.Join(loud, "\n"))
	}
	t.Logf("12 s outage: %d log lines, %d warnings", len(lines), len(loud))
}
