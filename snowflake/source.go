package snowflake

import (
	"context"
	"time"
)

// Worker is what a WorkerSource hands to the generator.
type Worker struct {
	ID int64
	// Bound is the reserved_until persisted by the previous holder of this worker id (zero when
	// none): IDs of that run are all in milliseconds < Bound. The generator issues only in
	// milliseconds > Bound.
	Bound  time.Time
	Source string // "static", "file", "zookeeper", "mysql", "statefulset": for Info
	// BoundCause says what Bound is made of, for the refusal of a bound too far ahead
	// (optional; e.g. "state node reserved_until ... plus the holder's outage tolerance 5s").
	BoundCause string
}

// WorkerSource gives the generator its worker id and persists its time lease.
type WorkerSource interface {
	// Acquire returns the worker id and the time bound persisted by the previous run of this
	// worker id (zero when none); the generator waits until its clock is past it.
	Acquire(ctx context.Context) (Worker, error)
	// Extend durably persists reserved_until; IDs are issued only in milliseconds < until. The
	// generator calls it with a smaller value only on Close, after it has stopped issuing.
	// An error wrapping ErrWorkerLost means the id is no longer ours: the generator stops
	// issuing and calls Acquire again (as a new start). Any other error is retried.
	Extend(ctx context.Context, until time.Time) error
	Close() error
}

// LeaseReporter is implemented by a WorkerSource whose worker id is leased with a deadline
// of its own (the MySQL source, snowflake/mysqlworker): Info reports it.
type LeaseReporter interface{ LeaseInfo() LeaseInfo }

// LeaseInfo is a leased source's state (INFO snowflake, /status, metrics).
type LeaseInfo struct {
	Lease           time.Duration // the lease length
	Deadline        time.Time     // the source issues nothing from here on without a renewal
	LastRenewal     time.Time     // send time of the last confirmed renewal
	Acquisitions    uint64
	Renewals        uint64
	RenewalFailures uint64
	SelfFences      uint64 // times the lease ran out before it was renewed
}

func (w Worker) boundMs() int64 {
	if w.Bound.IsZero() {
		return 0
	}
	return w.Bound.UnixMilli()
}
