package admin

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/segment"
)

// manyTags is a segment core holding n tags, for the scrape: every 1000th tag cannot serve,
// every 1000th + 1 failed its latest load; tag i has handed out i IDs.
type manyTags struct {
	handlers.Segments // nil: only the methods below are called by /metrics
	names             []string
}

func newManyTags(n int) *manyTags {
	m := &manyTags{names: make([]string, n)}
	for i := range m.names {
		m.names[i] = fmt.Sprintf("tag%07d", i)
	}
	return m
}

func (m *manyTags) Tags() []string { return m.names }
func (m *manyTags) Stats() segment.Stats {
	return segment.Stats{Tags: len(m.names), LoadSeconds: segment.LoadHistogram{Counts: make([]uint64, len(segment.LoadBuckets))}}
}
func (m *manyTags) Health() segment.Health { return segment.Health{StoreOK: true} }
func (m *manyTags) Info(tag string) (segment.Info, error) {
	i, _ := strconv.Atoi(strings.TrimPrefix(tag, "tag"))
	in := segment.Info{Tag: tag, Step: 1000, Issued: int64(i), NextReady: true,
		Current: segment.SegmentInfo{Loaded: true, Start: 1, End: 1001, Next: 501, Remaining: 500}}
	switch i % 1000 {
	case 0:
		in.Current.Remaining, in.NextReady = 0, false
	case 1:
		in.LastError = "store error"
	}
	return in, nil
}

func scrape(t *testing.T, h *handlers.Handler, cfg Config) string {
	t.Helper()
	hs := httptest.NewServer(New(cfg, h, zap.NewNop()).Handler())
	defer hs.Close()
	res, err := http.Get(hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", res.StatusCode, err)
	}
	return string(b)
}

// TestMetricsBounded: /metrics stays under 1 MB at 20,000 and at 1,000,000 tags; per-tag
// series cover --metrics-max-tags tags, those in trouble first, then the busiest; the totals
// count every tag.
func TestMetricsBounded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tags    int
		maxTags int
		want    int // tags exported
	}{
		{"20k tags, default", 20_000, 0, DefaultMetricsMaxTags},
		{"1M tags, default", 1_000_000, 0, DefaultMetricsMaxTags},
		{"20k tags, 50", 20_000, 50, 50},
		{"20k tags, none", 20_000, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.tags > 100_000 && testing.Short() {
				t.Skip("-short")
			}
			h := handlers.New(handlers.Config{}, newManyTags(tc.tags), nil, zap.NewNop())
			body := scrape(t, h, Config{MetricsMaxTags: tc.maxTags})
			if len(body) >= 1<<20 {
				t.Fatalf("/metrics at %d tags is %d bytes, want under 1 MB", tc.tags, len(body))
			}
			exported := map[string]bool{}
			for _, line := range strings.Split(body, "\n") {
				if strings.HasPrefix(line, "leafd_segment_tag_remaining{") {
					exported[strings.Split(line, `"`)[1]] = true
				}
			}
			if len(exported) != tc.want {
				t.Fatalf("%d tags have per-tag series, want %d", len(exported), tc.want)
			}
			troubled := tc.tags / 1000 * 2 // cannot serve, or failing
			for i := 0; i < tc.tags && tc.want > 0; i += 1000 {
				for _, j := range []int{i, i + 1} {
					if tag := fmt.Sprintf("tag%07d", j); !exported[tag] && troubled <= tc.want {
						t.Errorf("tag %s is in trouble and has no series", tag)
					}
				}
			}
			if tc.want > troubled { // the rest: the busiest (highest IDs handed out)
				if busiest := fmt.Sprintf("tag%07d", tc.tags-2); !exported[busiest] {
					t.Errorf("the busiest healthy tag %s has no series", busiest)
				}
			}
			v := func(n int) string { return strconv.FormatFloat(float64(n), 'g', -1, 64) } // as Prometheus writes it
			for _, want := range []string{
				"leafd_segment_tags_cannot_serve " + v(tc.tags/1000) + "\n",
				"leafd_segment_tags_failing " + v(tc.tags/1000) + "\n",
				"leafd_segment_tags_exported " + v(tc.want) + "\n",
				"leafd_segment_tags " + v(tc.tags) + "\n",
			} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
				}
			}
			t.Logf("%d tags: /metrics %d bytes, %d tags exported", tc.tags, len(body), len(exported))
		})
	}
}
