package segment

import (
	"time"

	"go.uber.org/zap"
)

// stepCapWarnEvery bounds the warning of stepCapped to one per interval for the whole
// generator (the counter counts every capped load).
const stepCapWarnEvery = time.Minute

// stepCapped records a load whose demand needed a segment larger than MaxStep to outlast the
// load that follows it: at this demand and load time a segment runs out before its successor
// arrives, and requests wait for the store (the tail grows by up to one load). The operator's
// remedy is a larger --max-step (at least demand x load time x 2 / (1 - preload ratio)) or a
// store with a shorter round trip.
func (g *Generator) stepCapped(tag string, rate int64, took time.Duration) {
	g.stats.stepCapped.Add(1)
	now := int64(g.mono.since()) + 1
	last := g.stats.stepCappedLogged.Load()
	if last != 0 && time.Duration(now-last) < stepCapWarnEvery {
		return
	}
	if !g.stats.stepCappedLogged.CompareAndSwap(last, now) {
		return
	}
	need, _ := demandStep(rate, took, g.cfg.PreloadRatio, maxRangeEnd)
	g.log.Warn("segment: --max-step is too small to hide loads at this demand; requests will wait for the store at each switch",
		zap.String("tag", tag), zap.Int64("ids_per_second", rate), zap.Duration("load_took", took),
		zap.Int64("max_step", g.cfg.MaxStep), zap.Int64("step_needed", need))
}
