package handlers

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/leafd/leafd/resp"
)

// Server-side latency per command (leafd_command_duration_seconds{command}), at the cost of
// one clock read per batch: resp reads the clock when a batch of pipelined commands begins
// and once more when its replies are written (resp.BatchObserver); each command of the batch
// is counted with that time, the latency its client sees. ServeRESP only counts the commands
// of the batch in the connection's state (no clock, no atomic, no allocation per command).

// latencyBuckets are the histogram's upper bounds in seconds: few, from the fast path to a
// store that stalls.
var latencyBuckets = [...]float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1}

// latency is one command's histogram; safe for concurrent use.
type latency struct {
	buckets [len(latencyBuckets) + 1]atomic.Uint64 // the last one is +Inf
	sumNs   atomic.Uint64
}

// observe counts n commands that took d.
func (l *latency) observe(d time.Duration, n uint64) {
	s := d.Seconds()
	i := 0
	for i < len(latencyBuckets) && s > latencyBuckets[i] {
		i++
	}
	l.buckets[i].Add(n)
	l.sumNs.Add(uint64(max(d, 0)) * n)
}

// batchCounts are the commands of the current batch of a connection, by command index.
type batchCounts struct {
	n       []uint32 // by command index, zero after BatchDone
	touched []int    // the indexes with a count
}

func (b *batchCounts) add(idx, ncmds int) {
	if b.n == nil {
		b.n = make([]uint32, ncmds)
	}
	if b.n[idx] == 0 {
		b.touched = append(b.touched, idx)
	}
	if b.n[idx] < math.MaxUint32 {
		b.n[idx]++
	}
}

// BatchDone records the batch's time for each of its commands (resp.BatchObserver).
func (h *Handler) BatchDone(c *resp.Conn, took time.Duration) {
	st, _ := c.State().(*connState)
	if st == nil {
		return // RESET dropped the state: the batch's counts went with it
	}
	b := &st.batch
	for _, i := range b.touched {
		h.lat[i].observe(took, uint64(b.n[i]))
		b.n[i] = 0
	}
	b.touched = b.touched[:0]
}

var _ resp.BatchObserver = (*Handler)(nil)
