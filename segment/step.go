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
