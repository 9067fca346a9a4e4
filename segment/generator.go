package segment

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/internal/quietlog"
	"github.com/leafd/leafd/internal/storeerr"
)

// Generator serves segment IDs for many tags. It is safe for concurrent use.
//
// It owns a bounded pool of loader goroutines, a tag-refresh goroutine and a warm-start
// goroutine; Close stops and waits for them.
type Generator struct {
	cfg    Config
	store  Store
	lessor Lessor // the store's Lease (lease.go)
	marks  Marks
	log    *zap.Logger
	quiet  *quietlog.Log // repeating store failures: one line, then a summary per 10 s

	// tags maps a tag to its live buffer (tagindex.go). Readers (the hot path) look up
	// without a lock and allocate nothing; adding or removing one tag costs O(1) amortized
	// under mu, never a copy of the whole index.
	tags  *tagIndex
	ntags atomic.Int64
	mu    sync.Mutex // serializes adding and removing tags; gen
	gen   uint64     // refresh generation

	firstLoads atomic.Int64 // held buffers still loading their first segment (tagsFull)

	guardMu sync.Mutex // leaf lock: guards, tagGuard.refs
	guards  map[string]*tagGuard

	negMu sync.Mutex
	neg   map[string]negEntry // tag -> why it is refused for now (unknown, or its load failed)

	// The loader queues (loader.go): refills of held tags, and first loads. Refills never
	// queue behind first loads, and first loads run on at most firstLoaders loaders.
	refills   chan *buffer
	firsts    chan *buffer
	poolMu    sync.RWMutex // submit (R) vs Close (W): nothing is queued after the drain
	closed    atomic.Bool
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	mono *monoClock // retry back-offs and the negative cache (never wall-clock instants)

	storeErr    atomic.Pointer[string] // nil when the latest store call answered
	marksErr    atomic.Pointer[string] // nil when the latest mark read or raise succeeded
	warmDone    chan struct{}          // closed when the warm start has ended
	warmStarted atomic.Bool            // the warm start was started (or skipped): once

	stats struct {
		loadsOK, loadsFailed, loadsRejected, loadsPanicked atomic.Int64
		regressions, unavailable, unknown                  atomic.Int64
		waits, warmLoads                                   atomic.Int64
		stepCapped                                         atomic.Int64 // loads whose demand needed more than MaxStep
		stepCappedLogged                                   atomic.Int64 // mono ns of the latest warning + 1
		droppedIDs                                         atomic.Int64 // IDs issued by buffers since dropped
		remainderResumed, remainderDiscarded               atomic.Int64 // IDs of the remainder file (remainder.go)
	}
	// storeID is the store's identity (RemainderStore.StoreID), read by resume in New, before
	// any goroutine starts; "" when unknown. Read by SaveRemainder after Close.
	storeID  string
	loadHist loadHist
}

// negEntry is a remembered refusal of a tag that is not held.
type negEntry struct {
	until time.Duration // on Generator.mono
	err   error         // the load error (ErrUnknownTag, or what made the first load fail)
}

var (
	errRejected = errors.New("segment: loader queue full")
	errClosed   = errors.New("segment: generator closed")
	// errStale: the buffer was dropped from the tag map; the caller looks the tag up again.
	errStale = errors.New("segment: buffer dropped")
)

// storeProbe is the refresh period while the store does not answer, so that readiness
// returns soon after the store does.
const storeProbe = time.Second

// New starts a Generator: it lists the store's tags once (a failure is logged, not fatal:
// tags are then found on first use and requests fail with ErrUnavailable until the store
// answers), then starts the loaders, the periodic tag refresh and the warm start (the first
// segment of the tags this instance served most recently, one load at a time).
func New(cfg Config, store Store, marks Marks, log *zap.Logger) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || marks == nil {
		return nil, errors.New("segment: New needs a Store and Marks")
	}
	if log == nil {
		log = zap.NewNop()
	}
	cfg = cfg.withDefaults()
	lessor, _ := lessorOf(store)
	g := &Generator{
		cfg:      cfg,
		store:    store,
		lessor:   lessor,
		marks:    marks,
		log:      log,
		quiet:    quietlog.New(log, quietlog.DefaultEvery, cfg.Clock.Now),
		tags:     newTagIndex(),
		guards:   make(map[string]*tagGuard),
		neg:      make(map[string]negEntry),
		refills:  make(chan *buffer, cfg.MaxPending),
		firsts:   make(chan *buffer, cfg.MaxPending),
		warmDone: make(chan struct{}),
		mono:     newMonoClock(cfg.Clock.Now),
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	if n, ok := store.(DatabaseNotifier); ok {
		n.OnDatabaseChange(g.databaseChanged)
	}

	rctx, rcancel := context.WithTimeout(ctx, cfg.LoadTimeout)
	listed, err := g.refresh(rctx)
	rcancel()
	// The remainder of the previous graceful shutdown is published before any load or
	// request, and only once its consumption is durable in the store.
	rctx, rcancel = context.WithTimeout(ctx, cfg.LoadTimeout)
	g.resume(rctx)
	rcancel()
	if err != nil {
		log.Warn("segment: initial tag list failed; tags will be loaded on first use", zap.Error(err),
			zap.String("cause", storeerr.Classify(err).String()))
	}

	extra := extraFirstLoaders(cfg, store)
	g.wg.Add(cfg.MaxLoaders + extra + 1)
	for i := range cfg.MaxLoaders + extra {
		go g.worker(ctx, i < firstLoaders(cfg.MaxLoaders) || i >= cfg.MaxLoaders)
	}
	if err == nil || cfg.NoWarmStart {
		g.startWarm(ctx, listed)
	} // else after the first tag list that succeeds (refresher)
	go g.refresher(ctx)
	return g, nil
}

// Close stops the loaders, the refresh and the warm start, cancelling running loads, and
// waits for them. It is idempotent. Segments already held keep being served; anything needing
// a load fails with ErrUnavailable.
func (g *Generator) Close() error {
	g.closeOnce.Do(func() {
		g.poolMu.Lock()
		g.closed.Store(true)
		g.poolMu.Unlock()
		g.cancel()
		g.wg.Wait()
		if g.warmStarted.CompareAndSwap(false, true) { // the store never answered
			close(g.warmDone)
		}
		for {
			select {
			case b := <-g.refills:
				g.finish(b, nil, errClosed)
				continue
			case b := <-g.firsts:
				g.finish(b, nil, errClosed)
				continue
			default:
			}
			break
		}
	})
	return nil
}
