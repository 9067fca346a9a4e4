package snowflake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/clock"
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

// New acquires a worker id from src. When the clock is already past the bound persisted by the
// previous run, it extends the lease and returns a ready generator; when the bound is ahead (at
// most MaxStartWait, else it refuses), it returns at once and the background goroutine waits
// and then takes the first lease (Next answers ErrNoWorker until then). If src reports
// ErrSourceUnavailable or ErrWorkerHeld, New returns a generator in the no-worker state that
// keeps acquiring in the background. New takes ownership of src: Close closes it, and so does New
// when it fails.
func New(cfg Config, src WorkerSource, log *zap.Logger) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		src.Close()
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	l := cfg.Layout
	if lu, ok := src.(LayoutUser); ok {
		lu.UseLayout(l) // Acquire refuses a data dir or domain used with another layout
	}
	g := &Generator{
		cfg:         cfg,
		log:         log,
		quiet:       quietlog.New(log, quietlog.DefaultEvery, cfg.Clock.Now),
		src:         src,
		epochMs:     l.EpochMs(),
		timeShift:   uint(l.WorkerBits + l.SeqBits),
		workerShift: uint(l.SeqBits),
		maxSeq:      l.MaxSequence(),
		maxT:        1<<l.TimeBits - 1,
		seqSpan:     uint64(min(100, l.MaxSequence()+1)),
		freshSeqs:   l.MaxSequence() + 1,
		extendAhead: max(cfg.LeaseWindow.Milliseconds()*2/3, 1),
		maxBackMs:   cfg.MaxBackward.Milliseconds(),
		workerID:    -1,
		kick:        make(chan struct{}, 1),
	}
	if !cfg.SequenceStartZero {
		g.freshSeqs -= int64(g.seqSpan) - 1 // a random start is below seqSpan
	}
	g.setStatus(errors.New("acquiring worker id"))

	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	fail := func(err error) (*Generator, error) {
		cancel()
		src.Close()
		return nil, err
	}
	// A source that is unavailable for a moment (a ZooKeeper connection dropped while the
	// machine is loaded) is retried within ExtendTimeout before New settles for the no-worker
	// state, so that a healthy start does not answer ErrNoWorker. The number of tries is
	// bounded too, so that a clock that does not move (a frozen clock.Fake) cannot hold New.
	deadline := cfg.Clock.Now().Add(cfg.ExtendTimeout)
	maxTries := int(cfg.ExtendTimeout/cfg.RetryInterval) + 1
	w, err := g.acquire(ctx, deadline)
	for try := 1; errors.Is(err, ErrSourceUnavailable) && try <= maxTries; try++ {
		left := clock.Until(cfg.Clock, deadline)
		if left <= cfg.RetryInterval {
			break
		}
		if try == 1 {
			log.Info("snowflake: worker source unavailable; retrying", zap.Error(err), zap.Duration("for", left))
		}
		cfg.Clock.Sleep(cfg.RetryInterval)
		w, err = g.acquire(ctx, deadline)
	}
	switch {
	case err == nil:
		// The clock must pass the previous run's bound; New does not wait for it (the
		// server listens meanwhile, and segment IDs do not depend on it): the background
		// goroutine does, and Next answers ErrNoWorker until then. A bound further than
		// MaxStartWait refuses the start.
		boundMs := w.boundMs()
		if wait := time.Duration(boundMs-g.nowMs()+1) * time.Millisecond; wait > cfg.MaxStartWait {
			return fail(g.tooFarErr(g.nowMs(), w))
		}
		if g.nowMs() > boundMs {
			if err = g.begin(ctx, w); err != nil && !retryable(err) {
				return fail(err)
			}
			if err != nil {
				log.Warn("snowflake: first lease extension failed; retrying in the background", zap.Error(err))
				g.setStatus(err)
			}
		} else {
			g.pending = &w
			g.setStatus(fmt.Errorf("%w: worker id %d acquired; waiting for the clock to pass the bound %v persisted by an earlier run",
				errWaitBound, w.ID, w.Bound))
			log.Info("snowflake: waiting for the clock to pass the start bound before issuing", zap.Int64("worker_id", w.ID),
				zap.Time("start_bound", w.Bound))
		}
	case retryable(err):
		log.Warn("snowflake: no worker id yet; acquiring in the background", zap.Error(err))
		g.setStatus(err)
	default:
		return fail(err)
	}
	g.wg.Add(1)
	go g.run(ctx)
	return g, nil
}

// start acquires, waits out the start bound and takes the first lease (the background
// acquisition).
func (g *Generator) start(ctx context.Context) error {
	w, err := g.acquire(ctx, time.Time{})
	if err != nil {
		return err
	}
	if err := g.waitPast(ctx, w); err != nil {
		return err
	}
	return g.begin(ctx, w)
}

// acquire calls the source, bounded by ExtendTimeout and by deadline when it is not zero.
func (g *Generator) acquire(ctx context.Context, deadline time.Time) (Worker, error) {
	timeout := g.cfg.ExtendTimeout
	if !deadline.IsZero() {
		timeout = min(timeout, max(clock.Until(g.cfg.Clock, deadline), time.Millisecond))
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	w, err := g.src.Acquire(actx)
	cancel()
	if err != nil {
		return Worker{}, wrap("acquire worker id", err)
	}
	if w.ID < 0 || w.ID > g.cfg.Layout.MaxWorkerID() {
		return Worker{}, fmt.Errorf("snowflake: worker id %d out of range [0, %d] for %d worker bits", w.ID, g.cfg.Layout.MaxWorkerID(), g.cfg.Layout.WorkerBits)
	}
	return w, nil
}

// begin takes the first lease of w, once the clock is past its bound, and starts issuing.
func (g *Generator) begin(ctx context.Context, w Worker) error {
	boundMs := w.boundMs()
	now := g.nowMs()
	if now <= boundMs {
		return fmt.Errorf("%w: clock %v not past the start bound %v", ErrClockBack, time.UnixMilli(now).UTC(), w.Bound)
	}
	until := now + g.cfg.LeaseWindow.Milliseconds()
	ectx, cancel := context.WithTimeout(ctx, g.cfg.ExtendTimeout)
	err := g.src.Extend(ectx, time.UnixMilli(until))
	cancel()
	if err != nil {
		return wrap("first lease extension", err)
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errors.New("snowflake: closed")
	}
	// Issue only in milliseconds > boundMs (the previous run used < boundMs; the extra
	// millisecond costs nothing and tolerates an inclusive reading of the bound).
	// After a lost id (a second begin in this process), also above every millisecond issued
	// before: the IDs of one instance stay strictly increasing whatever id it holds now.
	g.lastMs = max(boundMs, g.lastMs, g.epochMs-1)
	g.seq = g.maxSeq // so a clock still at lastMs waits for the next millisecond
	g.workerPart = w.ID << g.workerShift
	g.workerID = w.ID
	g.source = w.Source
	g.startBound = w.Bound
	g.haveWorker = true
	g.extensions++
	g.publishLocked()
	g.mu.Unlock()
	g.status.Store(nil) // before the lease: a request served under it never sees the old status
	g.lease.Store(until)
	g.log.Info("snowflake: worker acquired", zap.Int64("worker_id", w.ID), zap.String("source", w.Source),
		zap.Time("start_bound", w.Bound), zap.Time("reserved_until", time.UnixMilli(until)))
	return nil
}

// tooFarErr is the refusal of a start bound more than MaxStartWait ahead of the clock. It
// names the bound and what it is made of, not a clock step back: the clock need not have
// moved (the bound may be a crashed run's lease plus its outage tolerance: BoundCause).
func (g *Generator) tooFarErr(now int64, w Worker) error {
	return &BoundAheadError{Clock: time.UnixMilli(now), Bound: time.UnixMilli(w.boundMs()), Cause: w.BoundCause,
		MaxStartWait: g.cfg.MaxStartWait}
}

// waitPast waits until the clock is past w's bound, or refuses when that is more than
// MaxStartWait away.
func (g *Generator) waitPast(ctx context.Context, w Worker) error {
	boundMs := w.boundMs()
	var waited time.Duration
	for {
		now := g.nowMs()
		if now > boundMs {
			return nil
		}
		d := time.Duration(boundMs-now+1) * time.Millisecond
		if waited+d > g.cfg.MaxStartWait {
			return g.tooFarErr(now, w)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		g.cfg.Clock.Sleep(min(d, 100*time.Millisecond))
		waited += min(d, 100*time.Millisecond)
	}
}

func (g *Generator) setStatus(err error) {
	var e error = newStatus(err)
	g.status.Store(&e)
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

// Close stops issuing, stops the background goroutine and waits for it, lowers the persisted
// bound to the last millisecond used (so a restart need not wait out the whole window) and
// closes the source. It is idempotent.
func (g *Generator) Close() error {
	g.closeMu.Lock()
	defer g.closeMu.Unlock()
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()

	g.mu.Lock()
	had := g.haveWorker
	last := g.lastMs
	g.lease.Store(0)
	g.setStatus(errClosed)
	g.mu.Unlock()

	var errs []error
	if had {
		// Nothing is issued any more (lease 0 was stored under g.mu), so the bound may come
		// down to just past the last millisecond used.
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ExtendTimeout)
		if err := g.src.Extend(ctx, time.UnixMilli(last+1)); err != nil {
			g.log.Warn("snowflake: lowering the lease on close", zap.Error(err))
		}
		cancel()
	}
	if err := g.src.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
