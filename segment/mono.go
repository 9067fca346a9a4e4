package segment

import (
	"sync"
	"time"
)

// monoClock is the generator's clock for waits it times itself (a failed load's retry
// back-off, the negative cache): the time elapsed since New, by Config.Now. Deadlines are
// durations on it, never wall-clock instants: with the real clock each reading is taken
// against the previous one with time.Time.Sub, which uses the monotonic clock, so a step of
// the wall clock (NTP, a resumed VM) changes nothing. With an injected clock without
// monotonic readings (the tests' fake) only forward moves count: a step back is ignored,
// never waited out.
type monoClock struct {
	mu      sync.Mutex
	now     func() time.Time
	prev    time.Time     // the latest reading
	elapsed time.Duration // sum of the forward moves since New
}

func newMonoClock(now func() time.Time) *monoClock {
	return &monoClock{now: now, prev: now()}
}

// since returns the time elapsed since New; it never decreases.
func (m *monoClock) since() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.now() // under mu: readings are taken in order
	if d := t.Sub(m.prev); d > 0 {
		m.elapsed += d
	}
	m.prev = t
	return m.elapsed
}
