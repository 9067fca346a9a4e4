// Package e2e is leafd's end-to-end test harness: it starts leafd (the built binary, or the
// server in-process through a run function the caller supplies), waits for its structured
// "leafd ready" log line, stops, kills, pauses and restarts it, and offers the load
// generators and ID checkers every end-to-end scenario uses (uniqueness across processes and
// runs, strictly increasing IDs per connection, the refusal codes allowed).
//
// Phases of a scenario end on events — a log line, a metric, a count of replies — through
// Eventually and the counters of a load; a fixed sleep only paces load and says so.
//
// The package is for tests only (cmd/leafd's *_test.go files, and bench's proxy in front of
// a far database); it is internal and never linked into the leafd binary.
package e2e
