package handlers

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/resp"
	dto "github.com/prometheus/client_model/go"
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
	testkit.Poll(10*time.Second, func() bool { // the counts are checked below either way
		help, counts = scrapeLatency(t, hs.URL)
		return counts["incr"] >= 500 && counts["ids.decode"] >= 7
	})
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

// holdWrap serves through h, but a command named in gates (lower case) first waits for its
// gate to close, telling started: the test decides how long it takes. MayBlock and BatchDone
// are h's, so the command goes off the loop, or not, as h's table says.
type holdWrap struct {
	*Handler
	gates   map[string]chan struct{}
	started chan string
}

func (w *holdWrap) ServeRESP(c *resp.Conn, args [][]byte) {
	name := strings.ToLower(string(args[0]))
	if g, ok := w.gates[name]; ok {
		w.started <- name
		<-g
	}
	w.Handler.ServeRESP(c, args)
}

// TestOffLoopLatencyAndLoopCounters: an IDS.CREATE (its table flag sends it off the loop) that
// waits 300 ms on resp's fake clock is counted in leafd_command_duration_seconds's 0.5 s
// bucket, not below 0.1 s: the histogram covers a command's time off the loop, counted from
// the batch's read, not from the hand-back. An ECHO held on the loop is taken over by the
// watchdog. /metrics then shows leafd_loop_offloads_total 1 and leafd_loop_takeovers_total 1.
func TestOffLoopLatencyAndLoopCounters(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	w := &holdWrap{gates: map[string]chan struct{}{"ids.create": make(chan struct{}), "echo": make(chan struct{})},
		started: make(chan string, 4)}
	s := startServer(t, serverOpts{model: resp.ModelEventLoop, loops: 1, respNow: clk.Now,
		wrap: func(h *Handler) resp.Handler { w.Handler = h; return w }})
	hs := httpServer(t, s.h)
	released := map[string]bool{}
	defer func() {
		for name, g := range w.gates {
			if !released[name] {
				close(g)
			}
		}
	}()
	release := func(name string) { released[name] = true; close(w.gates[name]) }

	a := s.raw(t)
	fmt.Fprint(a, "IDS.CREATE lat\r\n")
	if got := <-w.started; got != "ids.create" {
		t.Fatalf("started %q", got)
	}
	clk.Add(300 * time.Millisecond)
	release("ids.create")
	if line, err := bufio.NewReader(a).ReadString('\n'); err != nil || line[0] == '-' {
		t.Fatalf("IDS.CREATE: %q, %v", line, err)
	}

	b := s.raw(t)
	fmt.Fprint(b, "ECHO hi\r\n")
	<-w.started
	testkit.Eventually(t, 5*time.Second, "the watchdog taking over the loop ECHO held", func() bool {
		return s.srv.Stats().LoopTakeovers > 0
	})
	release("echo")
	br := bufio.NewReader(b)
	if line, err := br.ReadString('\n'); line != "$2\r\n" {
		t.Fatalf("ECHO: %q, %v", line, err)
	}

	// A batch is counted just after its replies are written: poll until the scrape has it.
	var fams map[string]*dto.MetricFamily
	var create *dto.Metric
	if !testkit.Poll(5*time.Second, func() bool {
		r, err := http.Get(hs.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		parser := expfmt.NewTextParser(model.LegacyValidation)
		fams, err = parser.TextToMetricFamilies(r.Body)
		_ = r.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fams["leafd_command_duration_seconds"].GetMetric() {
			if m.GetLabel()[0].GetValue() == "ids.create" {
				create = m
			}
		}
		return create != nil
	}) {
		t.Fatal("no leafd_command_duration_seconds for ids.create")
	}
	hg := create.GetHistogram()
	for _, bk := range hg.GetBucket() {
		ub, n := bk.GetUpperBound(), bk.GetCumulativeCount()
		if ub <= 0.1 && n != 0 || ub >= 0.5 && n != 1 {
			t.Errorf("ids.create, 300 ms off the loop: bucket le=%v holds %d (buckets %v)", ub, n, hg.GetBucket())
			break
		}
	}
	for name, want := range map[string]float64{"leafd_loop_offloads_total": 1, "leafd_loop_takeovers_total": 1} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) != 1 {
			t.Errorf("/metrics: no %s", name)
			continue
		}
		if got := f.GetMetric()[0].GetCounter().GetValue(); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	info, err := s.client(t, 2, "").Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"loop_offloads:1\r\n", "loop_takeovers:1\r\n"} {
		if !strings.Contains(info, line) {
			t.Errorf("INFO stats lacks %q:\n%s", line, info)
		}
	}
}
