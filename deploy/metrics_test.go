package deploy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/admin"
	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
	"github.com/leafd/leafd/snowflake"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"gopkg.in/yaml.v3"
)

// scrapeNames runs a real leafd in process (embedded store, file worker id, RESP server),
// sends some traffic and errors, scrapes /metrics and returns the sample names it exports
// (histograms with their _bucket, _sum and _count).
func scrapeNames(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	log := zap.NewNop()
	store, err := boltstore.OpenBolt(filepath.Join(dir, "leafd.db"), boltstore.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	scfg := segment.DefaultConfig()
	scfg.AutoCreate = true
	seg, err := segment.New(scfg, store, store, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = seg.Close() })
	src, err := snowflake.NewFileSource(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Reported as leased, so that the worker-lease metrics of the MySQL source are scraped too.
	snow, err := snowflake.New(snowflake.DefaultConfig(), leasedFile{src}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snow.Close() })
	h := handlers.New(handlers.Config{Version: "test", StoreName: "embedded"}, seg, snow, log)
	srv, err := resp.NewServer(resp.DefaultConfig(), h, log)
	if err != nil {
		t.Fatal(err)
	}
	h.SetServer(srv)
	addr, _ := testkit.ServeLocal(t, srv)
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Incr(ctx, "orders").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "IDS.SNOWFLAKE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "INCRBY", "orders", "100000000").Err(); err == nil {
		t.Fatal("INCRBY above the step: got no error, want LIMIT")
	}

	hs := httptest.NewServer(admin.New(admin.Config{}, h, log).Handler())
	t.Cleanup(hs.Close)
	r, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{"up": true} // Prometheus's own series about the target
	for name, f := range fams {
		if len(f.GetMetric()) == 0 {
			continue
		}
		names[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		}
	}
	return names
}

// metricRE matches the metric names of leafd, the Go runtime and the process in PromQL.
var metricRE = regexp.MustCompile(`\b(?:leafd|go|process)_[a-zA-Z0-9_:]*|\bup\b`)

// checkExprs fails for an expression that names no metric or a metric leafd does not export.
func checkExprs(t *testing.T, where string, exprs []string, names map[string]bool) {
	t.Helper()
	if len(exprs) == 0 {
		t.Errorf("%s: no expressions found", where)
	}
	for _, e := range exprs {
		found := metricRE.FindAllString(e, -1)
		if len(found) == 0 {
			t.Errorf("%s: expression names no leafd metric: %s", where, e)
		}
		for _, m := range found {
			if !names[m] {
				t.Errorf("%s: %s is not exported by leafd (expression %s)", where, m, e)
			}
		}
	}
}

// collectExprs returns every "expr" string in a decoded JSON document.
func collectExprs(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "expr" {
				*out = append(*out, s)
			} else {
				collectExprs(x, out)
			}
		}
	case []any:
		for _, x := range v {
			collectExprs(x, out)
		}
	}
}

// TestDashboardAndRulesMetrics: every expression of the Grafana dashboard and of the alert
// rules names metrics that a real leafd exports, and the dashboard covers what operators look
// at: IDs/s per mode and tag, refusals by code, load latency, IDs left, worker id and lease.
func TestDashboardAndRulesMetrics(t *testing.T) {
	names := scrapeNames(t)

	b, err := os.ReadFile("grafana/leafd-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	collectExprs(dash["panels"], &exprs)
	checkExprs(t, "dashboard", exprs, names)
	all := strings.Join(exprs, "\n")
	for _, want := range []string{"leafd_segment_tag_ids_total", "leafd_snowflake_ids_total", "leafd_command_errors_total",
		"leafd_segment_load_duration_seconds_bucket", "leafd_segment_tag_remaining", "leafd_snowflake_worker_id",
		"leafd_snowflake_reserved_until_seconds", "leafd_command_duration_seconds_bucket"} {
		if !strings.Contains(all, want) {
			t.Errorf("dashboard: no panel uses %s", want)
		}
	}
	var tmplExprs []string
	collectExprs(dash["templating"], &tmplExprs)
	for _, v := range dash["templating"].(map[string]any)["list"].([]any) {
		if d, ok := v.(map[string]any)["definition"].(string); ok {
			tmplExprs = append(tmplExprs, d)
		}
	}
	checkExprs(t, "dashboard variables", tmplExprs, names)

	rb, err := os.ReadFile("prometheus/leafd-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(rb, &rules); err != nil {
		t.Fatal(err)
	}
	var alerts, ruleExprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			ruleExprs = append(ruleExprs, r.Expr)
		}
	}
	checkExprs(t, "alert rules", ruleExprs, names)
	for _, want := range []string{"LeafdSegmentRunningOut", "LeafdSegmentLoadsFailing", "LeafdSegmentRegression",
		"LeafdSnowflakeClockBack", "LeafdSnowflakeNoWorker", "LeafdSnowflakeLeaseExpired", "LeafdNotReady"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert rules: no %s", want)
		}
	}
}

// leasedFile is the file source reporting a lease (as the MySQL source does).
type leasedFile struct{ *snowflake.FileSource }

func (leasedFile) LeaseInfo() snowflake.LeaseInfo {
	return snowflake.LeaseInfo{Lease: 6 * time.Second, Deadline: time.Now().Add(5 * time.Second), LastRenewal: time.Now(), Renewals: 1}
}
