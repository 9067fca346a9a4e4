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
// by another live process.
func retryable(err error) bool {
	return errors.Is(err, ErrSourceUnavailable) || errors.Is(err, ErrWorkerHeld)
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
