package handlers

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/resp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
)

// TestLatencyBuckets: a duration is counted in the first bucket whose bound it does not
// pass (Prometheus's "le"), n times, and its sum n times.
func TestLatencyBuckets(t *testing.T) {
	var l latency
	l.observe(100*time.Microsecond, 3) // le 0.0001
	l.observe(101*time.Microsecond, 1) // le 0.0005
	l.observe(2*time.Second, 2)        // +Inf
	for i, want := range []uint64{3, 1, 0, 0, 0, 0, 0, 0, 0, 2} {
		if got := l.buckets[i].Load(); got != want {
			t.Errorf("bucket %d: got %d, want %d", i, got, want)
		}
	}
	if got, want := l.sumNs.Load(), uint64(3*100_000+101_000+2*2_000_000_000); got != want {
		t.Errorf("sum: got %d ns, want %d", got, want)
	}
}

// TestCommandLatencyMetric: /metrics has leafd_command_duration_seconds per command, one
// count per command run (a pipeline of 500 INCRs counts 500, in the batches they were read
// in), cumulative buckets, and nothing for commands never run.
func TestCommandLatencyMetric(t *testing.T) {
	for _, m := range []string{resp.ModelEventLoop, resp.ModelGoroutine} {
		t.Run(m, func(t *testing.T) { testCommandLatencyMetric(t, m) })
	}
}

func testCommandLatencyMetric(t *testing.T, serverModel string) {
	s := startServer(t, serverOpts{autoCreate: true, model: serverModel})
	hs := httpServer(t, s.h)
	c := s.client(t, 2, "")
	ctx := context.Background()
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for range 500 {
			p.Incr(ctx, "orders")
		}
		return nil
	})
	if err != nil || len(cmds) != 500 {
		t.Fatal(err)
	}
	for range 7 {
		if err := c.Do(ctx, "IDS.DECODE", 2127163742994038805).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A batch is counted just after its replies are written: poll until the scrape has them.
	var counts map[string]uint64
	var help string
	for deadline := time.Now().Add(10 * time.Second); ; {
		help, counts = scrapeLatency(t, hs.URL)
		if counts["incr"] >= 500 && counts["ids.decode"] >= 7 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if counts["incr"] != 500 || counts["ids.decode"] != 7 {
		t.Errorf("counts %v: want incr 500, ids.decode 7", counts)
	}
	if _, ok := counts["ids.create"]; ok {
		t.Errorf("counts %v: ids.create never ran", counts)
	}
	if !strings.Contains(help, "batch") {
		t.Errorf("help %q", help)
	}
}

// scrapeLatency reads leafd_command_duration_seconds from /metrics: its help and the count
// per command, checking each histogram's shape.
func scrapeLatency(t *testing.T, url string) (string, map[string]uint64) {
	t.Helper()
	r, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	f := fams["leafd_command_duration_seconds"]
	if f == nil {
		t.Fatal("/metrics: no leafd_command_duration_seconds")
	}
	counts := map[string]uint64{}
	for _, m := range f.GetMetric() {
		cmd := m.GetLabel()[0].GetValue()
		hg := m.GetHistogram()
		counts[cmd] = hg.GetSampleCount()
		var prev uint64
		for _, b := range hg.GetBucket() {
			if b.GetCumulativeCount() < prev {
				t.Errorf("%s: buckets not cumulative: %v", cmd, hg.GetBucket())
			}
			prev = b.GetCumulativeCount()
		}
		if len(hg.GetBucket()) < len(latencyBuckets) || prev > hg.GetSampleCount() || hg.GetSampleSum() <= 0 {
			t.Errorf("%s: %d buckets, last %d, count %d, sum %v", cmd, len(hg.GetBucket()), prev, hg.GetSampleCount(), hg.GetSampleSum())
		}
	}
	return f.GetHelp(), counts
}
