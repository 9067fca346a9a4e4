package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// PollEvery is how often Poll and Eventually look at their condition.
const PollEvery = 10 * time.Millisecond

// Poll checks cond every PollEvery until it holds (true) or timeout passes (false). It is
// the one place the harness polls: conditions that no log line or reply announces (a
// metric, a ZooKeeper node, a database row).
func Poll(timeout time.Duration, cond func() bool) bool {
	end := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(PollEvery)
	}
}

// Eventually fails the test (fatally) when cond does not hold within timeout; what names
// the condition in the message.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("%s: not within %v", what, timeout)
	}
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
