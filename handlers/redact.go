package handlers

import (
	"strings"

	"github.com/leafd/leafd/internal/storeerr"
)

// The raw errors the cores keep for display (a tag's last load error, the snowflake status)
// can carry a database or ZooKeeper address, a DSN's user or a file path. The server logs
// them in full where they happen; replies and pages show only what failed, in words.

const seeLog = " (details in the server log)"

// publicLoadError says in words what a segment load error was.
func publicLoadError(s string) string {
	if s == "" {
		return ""
	}
	l := strings.ToLower(s)
	switch {
	case strings.Contains(l, "regression"):
		return "range refused by the regression guard" + seeLog
	case strings.Contains(l, "unknown tag"):
		return "unknown tag"
	case strings.Contains(l, "rejected"):
		return "too many loads at once" + seeLog
	case strings.Contains(l, "closed"):
		return "shutting down"
	}
	if d := storeerr.DescribeText(s); d != "" { // the cause, in words (no address, no user)
		return d + seeLog
	}
	switch {
	case containsAny(l, "timeout", "deadline exceeded", "timed out"):
		return "store timed out" + seeLog
	case containsAny(l, "refused", "no such host", "unreachable", "reset by peer", "broken pipe",
		"bad connection", "invalid connection", "eof", "no route", "dial"):
		return "store unreachable" + seeLog
	}
	return "store error" + seeLog
}

// publicStoreError says in words why the store (or the marks file) failed its latest call,
// for /readyz: never the driver's text (README: "Readiness").
func publicStoreError(s string) string {
	if s == "" {
		return ""
	}
	if strings.HasPrefix(s, "regression marks: ") { // segment's marksAnswered
		if d := storeerr.DescribeText(s); d != "" {
			return "the marks file failed: " + d + seeLog
		}
		return "the marks file failed" + seeLog
	}
	return publicLoadError(s)
}

// publicStatus says in words why snowflake IDs cannot be issued.
func publicStatus(s string) string {
	if s == "" {
		return ""
	}
	l := strings.ToLower(s)
	switch {
	case strings.Contains(l, "every worker id is leased"):
		return "no worker id: every worker id of the layout is leased by live instances"
	case strings.Contains(l, "re-acquired after its lease"):
		return "no worker id: re-acquired after its lease lapsed; waiting out the lease"
	case strings.Contains(l, "waiting for the clock to pass the bound"):
		return "no worker id yet: waiting for the clock to pass the start bound"
	case strings.Contains(l, "generator closed"):
		return "no worker id: shutting down"
	case strings.Contains(l, "held by another live process"):
		return "no worker id: the worker id is held by another live process; waiting until it stops"
	case strings.Contains(l, "worker id lost"):
		return "no worker id: the worker id was taken over by another process; acquiring a worker id again"
	case strings.Contains(l, "waiting for the clock to pass the start bound"):
		return "no worker id yet: waiting for the clock to pass the start bound persisted by an earlier run"
	case strings.Contains(l, "start bound") && strings.Contains(l, "ahead of the clock"):
		return "no worker id: the start bound is further ahead of the clock than --start-wait-max" + seeLog
	}
	if d := storeerr.DescribeText(s); d != "" { // the worker-id store's cause, when it has one
		if strings.Contains(l, "extending lease") {
			return "no worker id: the time bound could not be extended: " + d + seeLog
		}
		return "no worker id: the worker-id store fails: " + d + seeLog
	}
	switch {
	case strings.Contains(l, "extending lease"):
		return "no worker id: the time bound could not be extended" + seeLog
	case strings.Contains(l, "acquiring worker id"):
		return "no worker id yet: acquiring one"
	}
	return "no worker id: worker-id source unavailable" + seeLog
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
