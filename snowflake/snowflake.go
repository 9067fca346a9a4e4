// Package snowflake generates Leaf-compatible snowflake IDs: 63-bit integers made of the time in
// milliseconds since an epoch, a worker id and a per-millisecond sequence.
//
// Default layout (Leaf's, configurable with Layout):
//
//	 63  62                                       22 21          12 11            0
//	+---+-------------------------------------------+--------------+---------------+
//	| 0 |  41 bits: milliseconds since the epoch    | 10 bits:     | 12 bits:      |
//	|   |  (epoch 1288834974657 = 2010-11-04 01:42Z)| worker id    | sequence      |
//	+---+-------------------------------------------+--------------+---------------+
//
//	id = (ms - epoch) << (WorkerBits+SeqBits) | workerID << SeqBits | sequence
//
// The sign bit is always 0: a millisecond that does not fit in TimeBits is ErrOverflow, never a
// wrapped or negative ID.
//
// # Uniqueness
//
// Two IDs are equal only if time, worker id and sequence are equal. So uniqueness needs:
//
//   - one issuer per worker id at any time: the WorkerSource's job (see ZKSource for the fencing
//     argument when ids can move between instances);
//   - within one process, never the same (millisecond, sequence) twice: the generator keeps the
//     last millisecond and sequence under a mutex; a clock that moves back by at most MaxBackward
//     is waited out (up to twice the offset), further back is ErrClockBack;
//   - across restarts of the same worker id (Leaf #216: a restart with a rolled-back clock), a
//     time lease: the generator only issues in milliseconds < reserved_until, and it durably
//     persists a later reserved_until through WorkerSource.Extend before the clock gets there. A
//     new run waits until its clock is strictly past the bound persisted by the previous run, so
//     the millisecond ranges of two runs never overlap, whatever the clock did in between.
//
// Extensions run in a background goroutine when two thirds of LeaseWindow or less are left, so
// Next normally does no I/O and never holds its lock across I/O, and an extension has two thirds
// of the window to complete before a request reaches the bound. A request at the bound waits (at
// most MaxWait) for an extension in flight, also when the previous attempt failed.
//
// New retries an Acquire that fails with ErrSourceUnavailable for up to ExtendTimeout, so a
// transient failure (a dropped ZooKeeper connection during the start) does not leave a freshly
// started instance in the no-worker state.
//
// # No-worker state
//
// When the source cannot give a worker id yet (its Acquire fails with an error matching
// ErrSourceUnavailable, ZooKeeper unreachable and no usable local state, or ErrWorkerHeld, the id
// held by another live process), New still returns a generator. It keeps acquiring in the
// background; meanwhile Next returns an error matching ErrNoWorker. The same holds while the
// clock has not yet passed the start bound: New does not wait for it (a server listens and serves
// segment IDs meanwhile). Any other Acquire error (lock held by another process, worker id out of
// range, ids exhausted, clock further behind the persisted bound than MaxStartWait) fails New.
package snowflake

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/clock"
)

// DefaultEpochMs is Leaf's epoch, 2010-11-04T01:42:54.657Z, in Unix milliseconds.
const DefaultEpochMs int64 = 1288834974657

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

// Worker is what a WorkerSource hands to the generator.
type Worker struct {
	ID int64
	// Bound is the reserved_until persisted by the previous holder of this worker id (zero when
	// none): IDs of that run are all in milliseconds < Bound. The generator issues only in
	// milliseconds > Bound.
	Bound  time.Time
	Source string // "static", "file", "zookeeper": for Info
}

// WorkerSource gives the generator its worker id and persists its time lease.
type WorkerSource interface {
	// Acquire returns the worker id and the time bound persisted by the previous run of this
	// worker id (zero when none); the generator waits until its clock is past it.
	Acquire(ctx context.Context) (Worker, error)
	// Extend durably persists reserved_until; IDs are issued only in milliseconds < until. The
	// generator calls it with a smaller value only on Close, after it has stopped issuing.
	Extend(ctx context.Context, until time.Time) error
	Close() error
}

// Layout is the bit layout and epoch of the IDs. The zero value is Leaf's 41/10/12 layout with
// DefaultEpochMs. All instances of one worker-id domain must use the same layout and epoch.
type Layout struct {
	Epoch      time.Time // zero: DefaultEpochMs
	TimeBits   int       // all three zero: 41/10/12
	WorkerBits int
	SeqBits    int
}

// DefaultLayout returns Leaf's layout.
func DefaultLayout() Layout {
	return Layout{Epoch: time.UnixMilli(DefaultEpochMs).UTC(), TimeBits: 41, WorkerBits: 10, SeqBits: 12}
}

func (l Layout) withDefaults() Layout {
	d := DefaultLayout()
	if l.Epoch.IsZero() {
		l.Epoch = d.Epoch
	}
	if l.TimeBits == 0 && l.WorkerBits == 0 && l.SeqBits == 0 {
		l.TimeBits, l.WorkerBits, l.SeqBits = d.TimeBits, d.WorkerBits, d.SeqBits
	}
	return l
}

// Validate checks the bit counts (each ≥ 1, sum 63) and that the epoch is not before 1970.
func (l Layout) Validate() error {
	l = l.withDefaults()
	if l.TimeBits < 1 || l.WorkerBits < 1 || l.SeqBits < 1 {
		return fmt.Errorf("snowflake: layout %d/%d/%d: each field needs at least 1 bit", l.TimeBits, l.WorkerBits, l.SeqBits)
	}
	if s := l.TimeBits + l.WorkerBits + l.SeqBits; s != 63 {
		return fmt.Errorf("snowflake: layout %d/%d/%d: bits sum to %d, want 63", l.TimeBits, l.WorkerBits, l.SeqBits, s)
	}
	if l.Epoch.UnixMilli() < 0 {
		return fmt.Errorf("snowflake: epoch %v is before 1970", l.Epoch)
	}
	return nil
}

// EpochMs is the epoch in Unix milliseconds.
func (l Layout) EpochMs() int64 { return l.withDefaults().Epoch.UnixMilli() }

// MaxWorkerID is the largest worker id the layout can encode.
func (l Layout) MaxWorkerID() int64 { return 1<<l.withDefaults().WorkerBits - 1 }

// MaxSequence is the largest sequence number per millisecond.
func (l Layout) MaxSequence() int64 { return 1<<l.withDefaults().SeqBits - 1 }

// MaxTime is the last instant (a millisecond) the layout can encode.
func (l Layout) MaxTime() time.Time {
	l = l.withDefaults()
	return time.UnixMilli(l.EpochMs() + 1<<l.TimeBits - 1).UTC()
}

// Parts are the fields of an ID.
type Parts struct {
	TimestampMs int64     // Unix milliseconds
	Time        time.Time // the same instant, UTC
	WorkerID    int64
	Sequence    int64
}

// Decode splits id with this layout. It does not check that id was ever issued.
func (l Layout) Decode(id int64) Parts {
	l = l.withDefaults()
	ms := id>>(l.WorkerBits+l.SeqBits) + l.EpochMs()
	return Parts{
		TimestampMs: ms,
		Time:        time.UnixMilli(ms).UTC(),
		WorkerID:    id >> l.SeqBits & (1<<l.WorkerBits - 1),
		Sequence:    id & (1<<l.SeqBits - 1),
	}
}

// Config configures a Generator. A zero field means its default (see DefaultConfig).
type Config struct {
	// Layout: bit layout and epoch. Default: Leaf's 41/10/12, epoch 1288834974657.
	Layout Layout
	// SequenceStartZero starts every millisecond's sequence at 0. Default false: at a random
	// value in [0, 100) like Leaf, so that IDs of low traffic are not all even.
	SequenceStartZero bool
	// MaxBackward: a clock moved back by at most this is waited out (up to twice the offset, then
	// re-checked); further back is ErrClockBack. Default 5ms.
	MaxBackward time.Duration
	// MaxWait bounds the time one Next/AppendIDs call waits in total: for the next millisecond
	// when the sequence is used up, for a clock to catch up, for a lease extension. Default 200ms.
	MaxWait time.Duration
	// LeaseWindow: how far ahead reserved_until is extended. Longer means fewer writes but a
	// longer wait on restart. Default 3s.
	LeaseWindow time.Duration
	// MaxStartWait: the longest New (or the background acquisition) waits for the clock to pass
	// the bound persisted by the previous run; beyond it, it refuses to start. Default 10s.
	MaxStartWait time.Duration
	// MaxBatch: the largest n of AppendIDs. Default 4096.
	MaxBatch int
	// ExtendTimeout bounds one WorkerSource.Extend or Acquire call. Default 2s.
	ExtendTimeout time.Duration
	// RetryInterval: pause between failed background Acquire/Extend attempts. Default 100ms.
	RetryInterval time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Sleep pauses the calling goroutine for d. Default: a sleep that is precise to a few
	// microseconds (time.Sleep for the coarse part, then yielding), so that waiting for the next
	// millisecond loses little of it.
	Sleep func(d time.Duration)
	// Rand draws the random sequence starts. Default: a PCG seeded at random. Used under the
	// generator's lock, so it need not be safe for concurrent use.
	Rand rand.Source
}

// DefaultConfig returns the defaults with every field filled in.
func DefaultConfig() Config {
	return Config{
		Layout:        DefaultLayout(),
		MaxBackward:   5 * time.Millisecond,
		MaxWait:       200 * time.Millisecond,
		LeaseWindow:   3 * time.Second,
		MaxStartWait:  10 * time.Second,
		MaxBatch:      4096,
		ExtendTimeout: 2 * time.Second,
		RetryInterval: 100 * time.Millisecond,
		Now:           time.Now,
		Sleep:         clock.PreciseSleep,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Layout = c.Layout.withDefaults()
	if c.MaxBackward == 0 {
		c.MaxBackward = d.MaxBackward
	}
	if c.MaxWait == 0 {
		c.MaxWait = d.MaxWait
	}
	if c.LeaseWindow == 0 {
		c.LeaseWindow = d.LeaseWindow
	}
	if c.MaxStartWait == 0 {
		c.MaxStartWait = d.MaxStartWait
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.ExtendTimeout == 0 {
		c.ExtendTimeout = d.ExtendTimeout
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = d.RetryInterval
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	if c.Sleep == nil {
		c.Sleep = d.Sleep
	}
	if c.Rand == nil {
		c.Rand = rand.NewPCG(rand.Uint64(), rand.Uint64())
	}
	return c
}

// Validate checks the configuration, defaults applied, against the clock: the epoch must not be
// in the future and the layout must not already be exhausted.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := c.Layout.Validate(); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"MaxBackward", c.MaxBackward}, {"MaxWait", c.MaxWait}, {"LeaseWindow", c.LeaseWindow},
		{"MaxStartWait", c.MaxStartWait}, {"ExtendTimeout", c.ExtendTimeout}, {"RetryInterval", c.RetryInterval}} {
		if f.d < 0 {
			return fmt.Errorf("snowflake: %s %v is negative", f.name, f.d)
		}
	}
	if c.LeaseWindow < 10*time.Millisecond {
		return fmt.Errorf("snowflake: LeaseWindow %v is below 10ms", c.LeaseWindow)
	}
	if c.MaxBatch < 1 {
		return fmt.Errorf("snowflake: MaxBatch %d is below 1", c.MaxBatch)
	}
	now := c.Now()
	if c.Layout.Epoch.After(now) {
		return fmt.Errorf("snowflake: epoch %v is in the future (clock %v)", c.Layout.Epoch, now.UTC())
	}
	if now.After(c.Layout.MaxTime()) {
		return fmt.Errorf("%w: layout with %d time bits ends at %v", ErrOverflow, c.Layout.TimeBits, c.Layout.MaxTime())
	}
	return nil
}

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

	Layout Layout
}

// errAtBound is internal: the candidate millisecond is not covered by the lease.
var errAtBound = errors.New("snowflake: at lease bound")

// Generator issues snowflake IDs. It is safe for concurrent use.
type Generator struct {
	cfg Config
	log *zap.Logger
	src WorkerSource

	// Layout, precomputed.
	epochMs     int64
	timeShift   uint
	workerShift uint
	maxSeq      int64
	maxT        int64
	seqSpan     uint64 // random sequence starts are in [0, seqSpan)
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
	if ls, ok := src.(layoutSetter); ok {
		ls.setLayout(l) // Acquire refuses a data dir or domain used with another layout
	}
	g := &Generator{
		cfg:         cfg,
		log:         log,
		src:         src,
		epochMs:     l.EpochMs(),
		timeShift:   uint(l.WorkerBits + l.SeqBits),
		workerShift: uint(l.SeqBits),
		maxSeq:      l.MaxSequence(),
		maxT:        1<<l.TimeBits - 1,
		seqSpan:     uint64(min(100, l.MaxSequence()+1)),
		extendAhead: max(cfg.LeaseWindow.Milliseconds()*2/3, 1),
		maxBackMs:   cfg.MaxBackward.Milliseconds(),
		workerID:    -1,
		kick:        make(chan struct{}, 1),
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
	// state, so that a healthy start does not answer ErrNoWorker.
	deadline := time.Now().Add(cfg.ExtendTimeout)
	w, err := g.acquire(ctx, deadline)
	for try := 1; errors.Is(err, ErrSourceUnavailable); try++ {
		left := time.Until(deadline)
		if left <= cfg.RetryInterval {
			break
		}
		if try == 1 {
			log.Info("snowflake: worker source unavailable; retrying", zap.Error(err), zap.Duration("for", left))
		}
		time.Sleep(cfg.RetryInterval)
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
			return fail(g.tooFarErr(g.nowMs(), boundMs))
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
			g.setStatus(fmt.Errorf("worker id %d acquired; waiting for the clock to pass the bound %v persisted by an earlier run",
				w.ID, w.Bound))
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

// retryable reports whether an acquisition error is worth retrying in the background (the
// instance answers ErrNoWorker meanwhile): the source is unreachable, or the worker id is held
// by another live process.
func retryable(err error) bool {
	return errors.Is(err, ErrSourceUnavailable) || errors.Is(err, ErrWorkerHeld)
}

func (w Worker) boundMs() int64 {
	if w.Bound.IsZero() {
		return 0
	}
	return w.Bound.UnixMilli()
}

// start acquires, waits out the start bound and takes the first lease (the background
// acquisition).
func (g *Generator) start(ctx context.Context) error {
	w, err := g.acquire(ctx, time.Time{})
	if err != nil {
		return err
	}
	if err := g.waitPast(ctx, w.boundMs()); err != nil {
		return err
	}
	return g.begin(ctx, w)
}

// acquire calls the source, bounded by ExtendTimeout and by deadline when it is not zero.
func (g *Generator) acquire(ctx context.Context, deadline time.Time) (Worker, error) {
	timeout := g.cfg.ExtendTimeout
	if !deadline.IsZero() {
		timeout = min(timeout, max(time.Until(deadline), time.Millisecond))
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
	g.lastMs = max(boundMs, g.epochMs-1)
	g.seq = g.maxSeq // so a clock still at lastMs waits for the next millisecond
	g.workerPart = w.ID << g.workerShift
	g.workerID = w.ID
	g.source = w.Source
	g.startBound = w.Bound
	g.haveWorker = true
	g.extensions++
	g.mu.Unlock()
	g.lease.Store(until)
	g.status.Store(nil)
	g.log.Info("snowflake: worker acquired", zap.Int64("worker_id", w.ID), zap.String("source", w.Source),
		zap.Time("start_bound", w.Bound), zap.Time("reserved_until", time.UnixMilli(until)))
	return nil
}

func (g *Generator) tooFarErr(now, boundMs int64) error {
	return fmt.Errorf("%w: clock %v is %v behind the bound %v persisted by the previous run, more than MaxStartWait %v",
		ErrClockBack, time.UnixMilli(now).UTC(), time.Duration(boundMs-now+1)*time.Millisecond, time.UnixMilli(boundMs).UTC(), g.cfg.MaxStartWait)
}

// waitPast waits until the clock is past boundMs, or refuses when that is more than MaxStartWait
// away.
func (g *Generator) waitPast(ctx context.Context, boundMs int64) error {
	var waited time.Duration
	for {
		now := g.nowMs()
		if now > boundMs {
			return nil
		}
		d := time.Duration(boundMs-now+1) * time.Millisecond
		if waited+d > g.cfg.MaxStartWait {
			return g.tooFarErr(now, boundMs)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		g.cfg.Sleep(min(d, 100*time.Millisecond))
		waited += min(d, 100*time.Millisecond)
	}
}

func (g *Generator) setStatus(err error) {
	e := fmt.Errorf("%w: %v", ErrNoWorker, err)
	g.status.Store(&e)
}

func (g *Generator) nowNs() int64 { return g.cfg.Now().UnixNano() }
func (g *Generator) nowMs() int64 { return g.cfg.Now().UnixMilli() }

// Next returns a new ID.
func (g *Generator) Next() (int64, error) {
	var waited time.Duration
	g.mu.Lock()
	id, err := g.nextLocked(&waited)
	g.mu.Unlock()
	for err == errAtBound {
		if err = g.awaitLease(&waited); err != nil {
			return 0, err
		}
		g.mu.Lock()
		id, err = g.nextLocked(&waited)
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
			g.mu.Unlock()
			if err = g.awaitLease(&waited); err != nil {
				return dst[:orig], err
			}
			g.mu.Lock()
			continue
		}
		if err != nil {
			g.mu.Unlock()
			return dst[:orig], err
		}
		dst = append(dst, id)
	}
	g.mu.Unlock()
	return dst, nil
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
		seq = g.startSeq()
	} else if seq > g.maxSeq {
		var err error
		if now, err = g.nextMsLocked(waited); err != nil {
			return 0, err
		}
		seq = g.startSeq()
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

func (g *Generator) startSeq() int64 {
	if g.cfg.SequenceStartZero {
		return 0
	}
	return int64(g.cfg.Rand.Uint64() % g.seqSpan)
}

// clockBackLocked handles now < lastMs: wait up to twice a small offset, then re-check.
func (g *Generator) clockBackLocked(now int64, waited *time.Duration) (int64, error) {
	offset := time.Duration(g.lastMs-now) * time.Millisecond
	g.cbEvents++
	g.lastCB = g.cfg.Now()
	g.lastCBOffset = offset
	if offset <= g.cfg.MaxBackward && *waited+2*offset <= g.cfg.MaxWait {
		g.log.Warn("snowflake: clock moved backwards; waiting", zap.Duration("offset", offset))
		g.cfg.Sleep(2 * offset)
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
		g.cfg.Sleep(d)
		*waited += max(d, time.Microsecond)
	}
}

// awaitLease runs without g.mu: the candidate millisecond is not covered by the lease. Wait for
// the background extension, at most MaxWait in total, unless there is no worker or the last
// extension failed and no new attempt is in flight: an attempt in flight is waited for even
// after a failure, since a transient error (a dropped connection) is often gone on the retry.
// It only decides whether to try again: nextLocked alone checks the millisecond against the
// published lease, which is never beyond what the source persisted.
func (g *Generator) awaitLease(waited *time.Duration) error {
	g.mu.Lock()
	ok := g.haveWorker && !g.closed
	g.extendPending = true
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
	if !ok {
		return g.noWorkerErr()
	}
	for {
		// extending is read first: an attempt that ended before this read has published its
		// outcome (lease and status) before clearing it, so the reads below see that outcome.
		inFlight := g.extending.Load()
		if g.nowMs() < g.lease.Load() {
			return nil
		}
		st := g.status.Load()
		if st != nil && !inFlight {
			return *st
		}
		if *waited >= g.cfg.MaxWait {
			if st != nil {
				return *st
			}
			return fmt.Errorf("%w: lease not extended within %v", ErrNoWorker, g.cfg.MaxWait)
		}
		d := time.Millisecond
		g.cfg.Sleep(d)
		*waited += d
	}
}

func (g *Generator) noWorkerErr() error {
	if st := g.status.Load(); st != nil {
		return *st
	}
	return fmt.Errorf("%w: no lease", ErrNoWorker)
}

// run is the background goroutine: acquire when there is no worker yet, then keep the lease
// ahead of the clock.
func (g *Generator) run(ctx context.Context) {
	defer g.wg.Done()
	if w := g.pending; w != nil {
		g.pending = nil
		err := g.waitPast(ctx, w.boundMs())
		if err == nil {
			err = g.begin(ctx, *w)
		}
		if err != nil && ctx.Err() == nil {
			g.log.Warn("snowflake: starting after the bound failed; acquiring again", zap.Error(err))
			g.setStatus(err)
		}
	}
	for !g.hasWorker() {
		if err := g.start(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if st := g.status.Load(); st == nil || !strings.Contains((*st).Error(), err.Error()) {
				g.log.Warn("snowflake: acquiring worker id; retrying", zap.Error(err)) // once per distinct error
			}
			g.setStatus(err)
			if !g.pause(ctx, g.cfg.RetryInterval, false) {
				return
			}
		}
	}
	window := g.cfg.LeaseWindow.Milliseconds()
	for {
		g.evals.Add(1)
		now := g.nowMs()
		lease := g.lease.Load()
		if lease-now <= g.extendAhead {
			g.extend(ctx, now+window)
			if ctx.Err() != nil {
				return
			}
			// After a failure, pace the retries: callers at the bound keep kicking.
			if g.status.Load() != nil && !g.pause(ctx, g.cfg.RetryInterval, false) {
				return
			}
			continue
		}
		// Sleep until two thirds of the window are left; wake early on a kick. Real timers
		// only pace the loop: the decision above always uses the injected clock.
		d := time.Duration(lease-now-g.extendAhead) * time.Millisecond
		if !g.pause(ctx, min(d, g.cfg.LeaseWindow/4), true) {
			return
		}
	}
}

func (g *Generator) hasWorker() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.haveWorker
}

// pause waits d (real time), or until a kick if onKick; false when the generator is closing.
func (g *Generator) pause(ctx context.Context, d time.Duration, onKick bool) bool {
	t := time.NewTimer(max(d, time.Millisecond))
	defer t.Stop()
	kick := g.kick
	if !onKick {
		kick = nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-kick:
	case <-t.C:
	}
	return true
}

// extend persists a later reserved_until, with no lock held, and publishes it on success.
// While it runs, g.extending is set; it is cleared only after the outcome (lease or status) is
// published.
func (g *Generator) extend(ctx context.Context, until int64) {
	g.mu.Lock()
	g.extendPending = false
	g.mu.Unlock()
	if until <= g.lease.Load() {
		return
	}
	g.extending.Store(true)
	defer g.extending.Store(false) // runs after the deferred g.mu.Unlock below
	ectx, cancel := context.WithTimeout(ctx, g.cfg.ExtendTimeout)
	err := g.src.Extend(ectx, time.UnixMilli(until))
	cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.extendFails++
		if ctx.Err() == nil {
			if st := g.status.Load(); st == nil || !strings.Contains((*st).Error(), err.Error()) {
				g.log.Warn("snowflake: lease extension failed; retrying", zap.Error(err), // once per distinct error
					zap.Time("reserved_until", time.UnixMilli(g.lease.Load())))
			}
			g.setStatus(fmt.Errorf("extending lease: %w", err))
		}
		return
	}
	g.extensions++
	if g.closed {
		return
	}
	if until > g.lease.Load() {
		g.lease.Store(until)
	}
	if g.status.Swap(nil) != nil {
		g.log.Info("snowflake: lease extension recovered", zap.Time("reserved_until", time.UnixMilli(until)))
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
	g.setStatus(errors.New("generator closed"))
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
