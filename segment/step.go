package segment

import "time"

// nextStep is Leaf's dynamic step (SegmentIDGenImpl.updateSegmentFromDb): a segment that
// lasted less than the target duration doubles the step (if the double stays within
// maxStep), less than twice the target keeps it, longer halves it. The result is never below
// minStep, the tag's stored step. (Leaf keeps the step when halving would go below the stored
// step; we halve down to the stored step.) since is the time from the previous refill.
func nextStep(step, minStep, maxStep int64, since, target time.Duration) int64 {
	switch {
	case since < target:
		if step <= maxStep/2 {
			step *= 2
		}
	case since < 2*target:
	default:
		step /= 2
	}
	if step < minStep {
		step = minStep
	}
	return step
}

// demandStep is the least step that lets a segment outlast the load that follows it at the
// observed demand: the segment's part left after the preload threshold (1 - ratio) must cover
// twice the latest load's duration at rate IDs per second. 0 when the demand or the load time
// is unknown; at most maxStep. It only ever raises the dynamic step (see fetch). capped is
// true when the demand asked for more than maxStep: a segment then runs out before the load
// that follows it can end (at the current demand and load time, no double buffer hides it).
func demandStep(rate int64, load time.Duration, ratio float64, maxStep int64) (step int64, capped bool) {
	if rate <= 0 || load <= 0 {
		return 0, false
	}
	d := float64(rate) * 2 * load.Seconds() / (1 - ratio)
	if d > float64(maxStep) {
		return maxStep, true
	}
	return int64(d), false
}

// demandLead is how many IDs should be left in a segment when the next load starts: the
// demand during twice the latest load. 0 when unknown.
func demandLead(rate int64, load time.Duration, maxStep int64) int64 {
	if rate <= 0 || load <= 0 {
		return 0
	}
	d := float64(rate) * 2 * load.Seconds()
	if d >= float64(maxStep) {
		return maxStep
	}
	return int64(d)
}

// demandRate is the demand measured on the current segment: the IDs taken from it since it
// became current, per second. 0 when it cannot be told (no segment, no time elapsed).
func demandRate(used int64, elapsed time.Duration) int64 {
	if used <= 0 || elapsed <= 0 {
		return 0
	}
	r := float64(used) / elapsed.Seconds()
	if r >= float64(maxRangeEnd) {
		return maxRangeEnd
	}
	return int64(r)
}
