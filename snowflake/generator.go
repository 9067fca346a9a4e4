package snowflake

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/quietlog"
)

// Info is a snapshot of the generator's state (INFO snowflake, /status).
type Info struct {
	HasWorker     bool
	WorkerID      int64 // -1 without a worker
	Source        string
	StartBound    time.Time // the previous run's reserved_until this run started above
	ReservedUntil time.Time // IDs are issued only before this; zero without a lease
	Status        string    // why IDs cannot be issued now; empty when fine

	LastClockBack       time.Time // when the clock was last seen moving back (zero: never)
	LastClockBackOffset time.Duration
	ClockBackEvents     uint64 // clock-back observations (waited out or refused)
	ClockBackErrors     uint64 // ErrClockBack returned
	Issued              uint64 // IDs issued
	SequenceWaits       uint64 // waits for the next millisecond after the sequence ran out
	Extensions          uint64 // successful lease extensions
	ExtendFailures      uint64
	Lease               *LeaseInfo // the source's lease (a LeaseReporter); nil for other sources

	Layout Layout
}

// Generator issues snowflake IDs. It is safe for concurrent use.
type Generator struct {
	cfg   Config
	log   *zap.Logger
	quiet *quietlog.Log // the background retries' failures: one line, then a summary per 10 s
	src   WorkerSource

	// Layout, precomputed.
	epochMs     int64
	timeShift   uint
	workerShift uint
	maxSeq      int64
	maxT        int64
	seqSpan     uint64 // random sequence starts are in [0, seqSpan)
	freshSeqs   int64  // the sequence values a new millisecond holds at least (MayWait)
	extendAhead int64  // ms: extend when the lease is at most this far ahead (2/3 of the window)
	maxBackMs   int64

	mu            sync.Mutex
	lastMs        int64 // last millisecond issued (or the floor: the start bound)
	seq           int64
	workerPart    int64 // workerID << workerShift
	issued        uint64
	seqWaits      uint64
	cbEvents      uint64
	cbErrors      uint64
	lastCB        time.Time
	lastCBOffset  time.Duration
	workerID      int64 // -1 without a worker
	source        string
	startBound    time.Time
	haveWorker    bool
	closed        bool
	extensions    uint64
	extendFails   uint64
	extendPending bool
	pending       *Worker       // acquired by New, waiting for its bound; owned by run
	evals         atomic.Uint64 // lease checks of the background goroutine (lets tests wait for one)

	lease     atomic.Int64          // reserved_until, Unix ms; 0 without a worker
	pos       atomic.Int64          // lastMs and seq as published for MayWait (publishLocked)
	status    atomic.Pointer[error] // the ErrNoWorker error to return at the bound; nil when fine
	extending atomic.Bool           // a background Extend is in flight (cleared after its outcome is published)
	kick      chan struct{}
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeMu   sync.Mutex
}

func (g *Generator) nowNs() int64 { return g.cfg.Clock.Now().UnixNano() }
func (g *Generator) nowMs() int64 { return g.cfg.Clock.Now().UnixMilli() }

// Next returns a new ID.
func (g *Generator) Next() (int64, error) {
	var waited time.Duration
	g.mu.Lock()
	id, err := g.nextLocked(&waited)
	g.publishLocked()
	g.mu.Unlock()
	for err == errAtBound {
		if err = g.awaitLease(&waited); err != nil {
			return 0, err
		}
		g.mu.Lock()
		id, err = g.nextLocked(&waited)
		g.publishLocked()
		g.mu.Unlock()
	}
	return id, err
}

// AppendIDs appends n new IDs, strictly increasing, to dst. It is all or nothing: on error it
// returns dst unchanged (IDs drawn before the error are discarded, never reissued).
func (g *Generator) AppendIDs(dst []int64, n int) ([]int64, error) {
	if n < 0 || n > g.cfg.MaxBatch {
		return dst, fmt.Errorf("%w: %d not in [0, %d]", ErrLimit, n, g.cfg.MaxBatch)
	}
	orig := len(dst)
	dst = slices.Grow(dst, n)
	var waited time.Duration
	g.mu.Lock()
	for len(dst) < orig+n {
		id, err := g.nextLocked(&waited)
		if err == errAtBound {
			g.publishLocked()
			g.mu.Unlock()
			if err = g.awaitLease(&waited); err != nil {
				return dst[:orig], err
			}
			g.mu.Lock()
			continue
		}
		if err != nil {
			g.publishLocked()
			g.mu.Unlock()
			return dst[:orig], err
		}
		dst = append(dst, id)
	}
	g.publishLocked()
	g.mu.Unlock()
	return dst, nil
}

// publishLocked publishes lastMs and seq for MayWait, packed in one word (the ID's time and
// sequence fields, the time counted from the millisecond before the epoch, where begin may
// put lastMs): once per Next or AppendIDs call, not per ID, and before a wait for the next
// millisecond, so a call under way leaves MayWait at most the IDs of one batch behind.
func (g *Generator) publishLocked() {
	g.pos.Store((g.lastMs-g.epochMs+1)<<g.workerShift | g.seq)
}

// MayWait reports whether AppendIDs(n) (Next: n = 1) may wait if called now: for the next
// millisecond (fewer than n sequence values left in the current one, or in a new one), for a
// clock step back to be waited out, or for a lease extension (the clock at the reserved
// bound). Without a worker it is false: the call is refused at once. It reads two atomics and
// the clock and takes no lock, so the event-loop server asks it before each IDS.SNOWFLAKE
// (the command table's mayWait flag) and runs a call that would wait off its loop. It is a
// forecast: another caller may take the values in between, or be drawing a batch it has not
// published yet, and then the call waits anyway (for at most the next millisecond). n is not
// bounded by MaxBatch: a transaction asks for the sum of the counts it queued.
func (g *Generator) MayWait(n int64) bool {
	if n < 1 {
		return false
	}
	lease := g.lease.Load()
	if lease == 0 {
		return false // no worker, or closed: refused at once
	}
	now := g.nowMs()
	if now >= lease {
		return true // waits for an extension
	}
	pos := g.pos.Load()
	lastMs := pos>>g.workerShift + g.epochMs - 1
	switch {
	case now < lastMs:
		return true // a step back: waited out (or refused)
	case now == lastMs:
		return n > g.maxSeq-pos&g.maxSeq
	default:
		return n > g.freshSeqs
	}
}

// nextLocked draws one ID. It may sleep with g.mu held for the next millisecond or a small clock
// step back: nobody else could issue meanwhile anyway.
func (g *Generator) nextLocked(waited *time.Duration) (int64, error) {
	now := g.nowMs()
	if now < g.lastMs {
		var err error
		if now, err = g.clockBackLocked(now, waited); err != nil {
			return 0, err
		}
	}
	seq := g.seq + 1
	if now > g.lastMs {
		seq = g.startSeq(seq > g.maxSeq)
	} else if seq > g.maxSeq {
		var err error
		if now, err = g.nextMsLocked(waited); err != nil {
			return 0, err
		}
		seq = g.startSeq(true)
	}
	lease := g.lease.Load()
	if now >= lease {
		return 0, errAtBound
	}
	t := now - g.epochMs
	if t > g.maxT {
		return 0, fmt.Errorf("%w: %v is after the layout's last millisecond %v", ErrOverflow,
			time.UnixMilli(now).UTC(), time.UnixMilli(g.epochMs+g.maxT).UTC())
	}
	g.lastMs, g.seq = now, seq
	g.issued++
	if lease-now <= g.extendAhead && !g.extendPending {
		g.extendPending = true
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
	return t<<g.timeShift | g.workerPart | seq, nil
}

// startSeq is the first sequence value of a new millisecond. After a millisecond whose
// sequence was used up (full) it is 0: the random start exists for low traffic, whose IDs
// would otherwise all be even, and a full millisecond already spread the low bits; starting a
// saturated worker at random would waste 49.5 of its 4096 values per millisecond on average.
func (g *Generator) startSeq(full bool) int64 {
	if g.cfg.SequenceStartZero || full {
		return 0
	}
	return int64(g.cfg.Rand.Uint64() % g.seqSpan)
}

// clockBackLocked handles now < lastMs: wait up to twice a small offset, then re-check.
func (g *Generator) clockBackLocked(now int64, waited *time.Duration) (int64, error) {
	offset := time.Duration(g.lastMs-now) * time.Millisecond
	g.cbEvents++
	g.lastCB = g.cfg.Clock.Now()
	g.lastCBOffset = offset
	if offset <= g.cfg.MaxBackward && *waited+2*offset <= g.cfg.MaxWait {
		g.log.Warn("snowflake: clock moved backwards; waiting", zap.Duration("offset", offset))
		g.cfg.Clock.Sleep(2 * offset)
		*waited += 2 * offset
		now = g.nowMs()
		if now >= g.lastMs {
			return now, nil
		}
		offset = time.Duration(g.lastMs-now) * time.Millisecond
	}
	g.cbErrors++
	g.log.Error("snowflake: clock moved backwards; refusing", zap.Duration("offset", offset))
	return 0, &ClockBackError{Offset: offset}
}

// nextMsLocked waits for the millisecond after lastMs, bounded by MaxWait.
func (g *Generator) nextMsLocked(waited *time.Duration) (int64, error) {
	g.seqWaits++
	g.publishLocked() // this millisecond is used up: MayWait says so to the other callers
	target := (g.lastMs + 1) * int64(time.Millisecond)
	for {
		ns := g.nowNs()
		if ns >= target {
			return ns / int64(time.Millisecond), nil
		}
		if *waited >= g.cfg.MaxWait {
			g.cbErrors++
			off := time.Duration(max(g.lastMs*int64(time.Millisecond)-ns, 0))
			return 0, &ClockBackError{Offset: off}
		}
		d := time.Duration(target - ns)
		g.cfg.Clock.Sleep(d)
		*waited += max(d, time.Microsecond)
	}
}

// Decode splits id with the generator's layout.
func (g *Generator) Decode(id int64) Parts { return g.cfg.Layout.Decode(id) }

// Layout returns the layout in use, defaults applied.
func (g *Generator) Layout() Layout { return g.cfg.Layout }

// Info returns a snapshot of the state and counters.
func (g *Generator) Info() Info {
	g.mu.Lock()
	defer g.mu.Unlock()
	in := Info{
		HasWorker:           g.haveWorker && !g.closed,
		WorkerID:            g.workerID,
		Source:              g.source,
		StartBound:          g.startBound,
		LastClockBack:       g.lastCB,
		LastClockBackOffset: g.lastCBOffset,
		ClockBackEvents:     g.cbEvents,
		ClockBackErrors:     g.cbErrors,
		Issued:              g.issued,
		SequenceWaits:       g.seqWaits,
		Extensions:          g.extensions,
		ExtendFailures:      g.extendFails,
		Layout:              g.cfg.Layout,
	}
	if l := g.lease.Load(); l > 0 {
		in.ReservedUntil = time.UnixMilli(l).UTC()
	}
	if st := g.status.Load(); st != nil {
		in.Status = (*st).Error()
	}
	if lr, ok := g.src.(LeaseReporter); ok {
		li := lr.LeaseInfo()
		in.Lease = &li
	}
	return in
}
