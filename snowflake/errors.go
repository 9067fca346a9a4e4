package snowflake

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors returned by the generator. Check them with errors.Is.
var (
	// ErrClockBack: the clock moved back further than MaxBackward, or did not catch up in time.
	// The concrete error is a *ClockBackError carrying the offset.
	ErrClockBack = errors.New("snowflake: clock moved backwards")
	// ErrNoWorker: no worker id, or no time lease covering the current millisecond (the source is
	// unavailable, an extension failed, the id was taken over, or the generator is closed).
	ErrNoWorker = errors.New("snowflake: no worker id lease")
	// ErrOverflow: the current time does not fit in the layout's time bits.
	ErrOverflow = errors.New("snowflake: timestamp overflows the layout")
	// ErrLimit: a batch larger than Config.MaxBatch (or a negative count).
	ErrLimit = errors.New("snowflake: batch size out of range")
	// ErrSourceUnavailable is returned (wrapped) by a WorkerSource whose backend is temporarily
	// unreachable. From Acquire it makes New start in the no-worker state instead of failing.
	ErrSourceUnavailable = errors.New("snowflake: worker source unavailable")
)

// ErrWorkerLost (wrapped), from WorkerSource.Extend, means the worker id is no longer this
// process's: another process claimed it (a standby or a reuse instance took it over after
// this one lost its coordinator session). The generator stops issuing at once and acquires
// again, as a new start would: Acquire is called again and must return an id with a bound
// above every ID any holder of that id issued. It is an ErrNoWorker too.
var ErrWorkerLost error = lostError{}

type lostError struct{}

func (lostError) Error() string        { return "snowflake: worker id lost to another process" }
func (lostError) Is(target error) bool { return target == ErrNoWorker }

// ErrLeaseLapsed (wrapped), from WorkerSource.Extend: this process's lease on its worker id
// may have run out (an outage of the worker-id store, a pause) and this process took the id
// again, nobody else having taken it. It is an ErrWorkerLost, so the generator acquires again
// (the same id, its Bound above whatever a holder could have issued meanwhile), but NOWORKER
// says what happened: no other process is involved.
var ErrLeaseLapsed error = lapsedError{}

type lapsedError struct{}

func (lapsedError) Error() string {
	return "snowflake: worker id lease lapsed; re-acquired after its lease may have run out by this process (nobody took it over)"
}
func (lapsedError) Is(target error) bool { return target == ErrWorkerLost || target == ErrNoWorker }

// ErrRetakeWait (wrapped), from WorkerSource.Extend: this process re-acquired its worker id
// after its lease may have run out and waits out the lease (and a margin) before it issues
// again. It is an ErrWorkerHeld (retry later); no other process holds the id.
var ErrRetakeWait error = retakeWaitError{}

type retakeWaitError struct{}

func (retakeWaitError) Error() string {
	return "snowflake: worker id re-acquired after its lease may have run out; waiting out the lease"
}
func (retakeWaitError) Is(target error) bool { return target == ErrWorkerHeld }

// errWaitBound (wrapped in the status): the id is acquired, the clock not yet past its bound.
var errWaitBound = errors.New("snowflake: waiting for the clock to pass the start bound")

// statusErr is the ErrNoWorker error the generator answers while it cannot issue: the cause's
// text, and what it waits for (Waiting). It does not unwrap to the cause, so that a cause
// such as ErrClockBack does not turn NOWORKER into another code.
type statusErr struct {
	msg     string
	waiting string
}

func (e *statusErr) Error() string        { return e.msg }
func (e *statusErr) Is(target error) bool { return target == ErrNoWorker }

func newStatus(cause error) *statusErr {
	e := &statusErr{msg: ErrNoWorker.Error() + ": " + strings.TrimPrefix(cause.Error(), "snowflake: ")}
	switch {
	case errors.Is(cause, errClosed):
		e.waiting = "the generator is closed"
	case errors.Is(cause, ErrLeaseLapsed):
		e.waiting = "the worker id's lease lapsed while its store could not be reached (nobody took it over); " +
			"re-acquired by this process, waiting out the lease before issuing again"
	case errors.Is(cause, ErrWorkerLost):
		e.waiting = "the worker id was taken over by another process; acquiring a worker id again"
	case errors.Is(cause, ErrRetakeWait):
		e.waiting = "the worker id was re-acquired by this process after its lease lapsed (nobody else holds it); waiting out the lease before issuing again"
	case errors.Is(cause, ErrWorkerHeld):
		e.waiting = "the worker id is held by another live process; waiting until it stops"
	case errors.Is(cause, ErrBoundAhead):
		e.waiting = "the start bound is further ahead of the clock than the start wait allows; retrying"
	case errors.Is(cause, errWaitBound):
		e.waiting = "waiting for the clock to pass the start bound persisted by an earlier run"
	case errors.Is(cause, ErrSourceUnavailable):
		e.waiting = "the worker-id source is unreachable; waiting for it"
	default:
		e.waiting = "acquiring a worker id or extending its time lease"
	}
	return e
}

var errClosed = errors.New("snowflake: generator closed")

// Waiting says, for an ErrNoWorker error of a Generator, what the generator waits for before
// it can issue again (for a client's error reply; the full cause is in the log and INFO).
func Waiting(err error) string {
	var st *statusErr
	if errors.As(err, &st) {
		return st.waiting
	}
	return "the time lease was not extended in time"
}

// ErrBoundAhead (wrapped): the start bound persisted by an earlier run is further ahead of
// the clock than MaxStartWait. The concrete error is a *BoundAheadError. It is not
// ErrClockBack: the clock need not have moved back (a bound persisted ahead, e.g. a lease plus
// an outage tolerance, is enough).
var ErrBoundAhead = errors.New("snowflake: start bound ahead of the clock")

// BoundAheadError is the ErrBoundAhead error.
type BoundAheadError struct {
	Clock, Bound time.Time
	Cause        string // what the bound is, as the source said (Worker.BoundCause); may be empty
	MaxStartWait time.Duration
}

func (e *BoundAheadError) Error() string {
	cause := ""
	if e.Cause != "" {
		cause = " (" + e.Cause + ")"
	}
	return fmt.Sprintf("snowflake: start bound %v%s is %v ahead of the clock %v, more than MaxStartWait %v: "+
		"IDs may only be issued past a bound an earlier run persisted (if it should not be that far ahead, check this host's clock)",
		e.Bound.UTC(), cause, e.Bound.Sub(e.Clock)+time.Millisecond, e.Clock.UTC(), e.MaxStartWait)
}

// Is makes errors.Is(err, ErrBoundAhead) true.
func (e *BoundAheadError) Is(target error) bool { return target == ErrBoundAhead }

// ErrWorkerHeld (wrapped) means the worker id is claimed by another live process. The generator
// answers NOWORKER and keeps trying, so the instance takes over once the holder is gone.
var ErrWorkerHeld = errors.New("snowflake: worker id held by another live process")

// ClockBackError is the ErrClockBack error with the offset that was observed.
type ClockBackError struct {
	Offset time.Duration // how far the clock is behind the last issued millisecond
}

func (e *ClockBackError) Error() string {
	if e.Offset <= 0 {
		return "snowflake: clock did not reach the next millisecond within MaxWait"
	}
	return fmt.Sprintf("snowflake: clock moved backwards by %v", e.Offset)
}

// Is makes errors.Is(err, ErrClockBack) true.
func (e *ClockBackError) Is(target error) bool { return target == ErrClockBack }

// errAtBound is internal: the candidate millisecond is not covered by the lease.
var errAtBound = errors.New("snowflake: at lease bound")

// retryable reports whether an acquisition error is worth retrying in the background (the
// instance answers ErrNoWorker meanwhile): the source is unreachable, or the worker id is held
// by another live process, or it was lost to another process (acquire again).
func retryable(err error) bool {
	return errors.Is(err, ErrSourceUnavailable) || errors.Is(err, ErrWorkerHeld) || errors.Is(err, ErrWorkerLost)
}

// wrap returns err with "snowflake: what: " in front, without repeating the "snowflake: " the
// package's errors begin with.
func wrap(what string, err error) error {
	return &wrapped{msg: "snowflake: " + what + ": " + strings.TrimPrefix(err.Error(), "snowflake: "), err: err}
}

type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.err }
