package admin

import (
	"sync"
	"time"
)

// rateSampler turns the issued counters that /status.json reports into IDs per second. It
// keeps the counters seen by recent /status.json requests (at most one sample per
// rateMinGap) and compares the current ones with the oldest sample of the last rateWindow, so
// the rates need no goroutine of their own and are those of the last few seconds whenever
// someone watches the page.
type rateSampler struct {
	mu      sync.Mutex
	samples []rateSample // oldest first
}

type rateSample struct {
	at   time.Time
	tags map[string]int64
	snow uint64
}

const (
	rateMinGap = 500 * time.Millisecond
	rateWindow = 10 * time.Second
)

// rates records the counters at now and returns the rate of each tag it has an earlier
// sample of, and of snowflake (ok false without an earlier sample).
func (s *rateSampler) rates(now time.Time, tags map[string]int64, snow uint64) (tagRates map[string]float64, snowRate float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for i < len(s.samples) && now.Sub(s.samples[i].at) > rateWindow {
		i++
	}
	s.samples = s.samples[i:]
	if len(s.samples) > 0 {
		if base := s.samples[0]; now.Sub(base.at) >= rateMinGap {
			dt := now.Sub(base.at).Seconds()
			tagRates = make(map[string]float64, len(tags))
			for tag, n := range tags {
				if m, seen := base.tags[tag]; seen {
					tagRates[tag] = float64(max(n-m, 0)) / dt
				}
			}
			if snow >= base.snow {
				snowRate = float64(snow-base.snow) / dt
			}
			ok = true
		}
	}
	if len(s.samples) == 0 || now.Sub(s.samples[len(s.samples)-1].at) >= rateMinGap {
		s.samples = append(s.samples, rateSample{at: now, tags: tags, snow: snow})
	}
	return tagRates, snowRate, ok
}
