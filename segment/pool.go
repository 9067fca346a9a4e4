package segment

import "context"

// Two queues feed the loaders: refills (a held tag's next segment: its clients are served now
// and will run dry if it is late) and first loads (a tag's first segment: new tags,
// auto-creation, the warm start). A refill never waits behind first loads: every loader takes a
// waiting refill before anything else, and first loads run on at most firstLoaders(MaxLoaders)
// loaders, so the others are always free for refills (else a burst of new tags leaves a hot
// tag's refill queued behind them and the hot tag without IDs; TestRefillNotBehindFirstLoads).
// Each queue holds MaxPending loads; a load submitted to a full queue is rejected.

// firstLoaders is how many loaders may run first loads: half, and at least one (with a
// single loader, that loader does both, refills first).
func firstLoaders(loaders int) int { return max(1, loaders/2) }

// extraFirstLoaders is how many loaders run first loads besides firstLoaders(MaxLoaders): up
// to Config.FirstLoaders with a store that commits concurrent writes together, else none.
// They take a waiting refill first too, like every loader.
func extraFirstLoaders(cfg Config, st Store) int {
	if _, own := lessorOf(st); !own { // both stores with their own Lease commit them together
		return 0
	}
	return max(0, cfg.FirstLoaders-firstLoaders(cfg.MaxLoaders))
}

// worker is one loader. Every loader runs refills, a waiting refill before anything else;
// only those with firsts set run first loads too.
func (g *Generator) worker(ctx context.Context, firsts bool) {
	defer g.wg.Done()
	var fq chan *buffer // nil (never ready) for a refill-only loader
	if firsts {
		fq = g.firsts
	}
	for {
		select {
		case b := <-g.refills:
			g.load(ctx, b)
			continue
		default:
		}
		select {
		case <-ctx.Done():
			return
		case b := <-g.refills:
			g.load(ctx, b)
		case b := <-fq:
			g.load(ctx, b)
		}
	}
}

// queued is how many loads wait for a loader (an UNAVAILABLE's words).
func (g *Generator) queued() int { return len(g.refills) + len(g.firsts) }
