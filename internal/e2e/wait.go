package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testkit"
)

// PollEvery is how often Poll and Eventually look at a condition that has not held for a
// while (testkit.PollEvery).
const PollEvery = testkit.PollEvery

// Poll is testkit.Poll: cond every PollEvery until it holds (true) or timeout passes (false),
// for conditions that no log line or reply announces (a metric, a ZooKeeper node, a database
// row).
func Poll(timeout time.Duration, cond func() bool) bool { return testkit.Poll(timeout, cond) }

// Eventually is testkit.Eventually: it fails the test (fatally) when cond does not hold
// within timeout; what names the condition in the message.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, timeout, what, cond)
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// BenchOut appends "name value unit" to the file named by LEAFD_BENCH_OUT, if set.
func BenchOut(t testing.TB, name string, value float64, unit string) {
	t.Helper()
	path := os.Getenv("LEAFD_BENCH_OUT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Errorf("LEAFD_BENCH_OUT: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %.3f %s\n", name, value, unit)
}
