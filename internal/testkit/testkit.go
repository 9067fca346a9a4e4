// Package testkit is what tests of every package share for waiting and serving: the one
// poll loop, for conditions that no event announces (a metric, a ZooKeeper node, a database
// row, a state a background goroutine reaches), and the one way to run a server in the
// background of a test and stop it. Prefer an event (a log line, a reply, a channel) where
// there is one.
package testkit

import (
	"testing"
	"time"
)

// PollEvery is how often Poll and Eventually look at their condition once it has not held
// for a while; the first looks come sooner (1 ms, doubling up to PollEvery), so that a test
// waiting many times for a condition that holds within a millisecond does not pay 10 ms for
// each.
const PollEvery = 10 * time.Millisecond

// Poll checks cond until it holds (true) or timeout passes (false); cond is checked once
// more at the deadline, so a condition that holds by then is not missed.
func Poll(timeout time.Duration, cond func() bool) bool {
	end := time.Now().Add(timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, PollEvery) {
		if cond() {
			return true
		}
		left := time.Until(end)
		if left < 0 {
			return false
		}
		time.Sleep(min(wait, left+time.Millisecond))
	}
}

// Eventually fails the test (fatally) when cond does not hold within timeout; what names
// the condition in the message. Call it from the test goroutine.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("%s: not within %v", what, timeout)
	}
}
