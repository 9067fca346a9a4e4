// Package quietlog keeps a repeating failure from flooding the log: the first failure of a
// kind is logged as it happens, repeats are counted, and while they go on at most one
// summary line per interval says how many there were and the latest error; the first success
// after them logs once that the failure ended, with its count and duration.
//
// A kind is the log message of the call site (a constant), not the error text, which often
// carries a time or an address and would make every repeat look new.
package quietlog

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultEvery is the shortest time between two lines of one kind of failure.
const DefaultEvery = 10 * time.Second

// Log is a logger of repeating failures. Safe for concurrent use.
type Log struct {
	log   *zap.Logger
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	kinds map[string]*run
}

// run is one kind's current run of failures.
type run struct {
	first   time.Time // its first failure
	line    time.Time // the last line written
	since   int       // failures since that line
	total   int       // failures of the run
	lastErr error
}

// New returns a Log writing to log at most one line per kind per every (default
// DefaultEvery), on the clock now (default time.Now).
func New(log *zap.Logger, every time.Duration, now func() time.Time) *Log {
	if log == nil {
		log = zap.NewNop()
	}
	if every <= 0 {
		every = DefaultEvery
	}
	if now == nil {
		now = time.Now
	}
	// Lines name the caller of Fail or OK, not this package.
	return &Log{log: log.WithOptions(zap.AddCallerSkip(2)), every: every, now: now, kinds: map[string]*run{}}
}

// Fail records a failure of kind msg: the first of a run is logged at lvl with err and
// fields; a later one only when every has passed since the kind's last line, as msg with
// "repeated" (the failures since that line), "failing_for" and the latest error. It reports
// whether it wrote a line.
func (q *Log) Fail(lvl zapcore.Level, msg string, err error, fields ...zap.Field) bool {
	now := q.now()
	q.mu.Lock()
	r := q.kinds[msg]
	if r == nil {
		r = &run{first: now, line: now}
		q.kinds[msg] = r
		r.total, r.lastErr = 1, err
		q.mu.Unlock()
		q.write(lvl, msg, append(fields, zap.Error(err)))
		return true
	}
	r.total++
	r.since++
	r.lastErr = err
	if now.Sub(r.line) < q.every {
		q.mu.Unlock()
		return false
	}
	n, dur := r.since, now.Sub(r.first)
	r.since, r.line = 0, now
	q.mu.Unlock()
	q.write(lvl, msg, append(fields, zap.Error(err), zap.Int("repeated", n),
		zap.Duration("failing_for", dur.Round(time.Millisecond)), zap.Duration("every", q.every)))
	return true
}

// OK ends the run of failures of kind msg, if there is one: it logs okMsg at Info with the
// run's count and duration and reports true. Without a run it does nothing (no line).
func (q *Log) OK(msg, okMsg string, fields ...zap.Field) bool {
	now := q.now()
	q.mu.Lock()
	r := q.kinds[msg]
	if r == nil {
		q.mu.Unlock()
		return false
	}
	delete(q.kinds, msg)
	q.mu.Unlock()
	q.write(zapcore.InfoLevel, okMsg, append(fields, zap.Int("failures", r.total),
		zap.Duration("failed_for", now.Sub(r.first).Round(time.Millisecond))))
	return true
}

// Failing reports whether kind msg is in a run of failures.
func (q *Log) Failing(msg string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.kinds[msg] != nil
}

func (q *Log) write(lvl zapcore.Level, msg string, fields []zap.Field) {
	if ce := q.log.Check(lvl, msg); ce != nil {
		ce.Write(fields...)
	}
}
