package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/internal/errcode"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/segtest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
)

// httpServer serves the admin port of h over httptest.
func httpServer(t *testing.T, h *handlers.Handler) *httptest.Server {
	t.Helper()
	return httpServerConfig(t, h, Config{})
}

// httpServerConfig serves the admin port of h, configured by cfg, over httptest.
func httpServerConfig(t *testing.T, h *handlers.Handler, cfg Config) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(New(cfg, h, zap.NewNop()).Handler())
	t.Cleanup(hs.Close)
	return hs
}

func TestHTTPLeafAPI(t *testing.T) {
	ts := startServer(t, serverOpts{autoCreate: true})
	hs := httpServer(t, ts.h)

	for i, want := range []string{"1", "2"} {
		status, ctype, body := testkit.Fetch(t, hs, http.MethodGet, "/api/segment/get/order")
		if status != http.StatusOK || body != want || !strings.HasPrefix(ctype, "text/plain") {
			t.Fatalf("segment get #%d: got %d %q %q, want 200 %q text/plain", i, status, ctype, body, want)
		}
	}
	// Leaf maps its API without a method restriction.
	if status, _, body := testkit.Fetch(t, hs, http.MethodPost, "/api/segment/get/order"); status != http.StatusOK || body != "3" {
		t.Errorf("POST segment get: got %d %q, want 200 \"3\"", status, body)
	}

	status, _, body := testkit.Fetch(t, hs, http.MethodGet, "/api/snowflake/get/anything")
	id, err := strconv.ParseInt(body, 10, 64)
	if status != http.StatusOK || err != nil || id <= 0 {
		t.Fatalf("snowflake get: got %d %q, want 200 and a positive ID", status, body)
	}
	if w := ts.snow.Decode(id).WorkerID; w != 7 {
		t.Errorf("snowflake worker: got %d, want 7", w)
	}

	// The decode answers with Leaf's field names and string values.
	status, ctype, body := testkit.Fetch(t, hs, http.MethodGet, "/decodeSnowflakeId?snowflakeId="+strconv.FormatInt(id, 10))
	if status != http.StatusOK || ctype != "application/json" {
		t.Fatalf("decode: got %d %q %q, want 200 application/json", status, ctype, body)
	}
	var dec map[string]string
	if err := json.Unmarshal([]byte(body), &dec); err != nil || len(dec) != 3 {
		t.Fatalf("decode body %q: %v; want three fields", body, err)
	}
	p := ts.snow.Decode(id)
	wantTS := strconv.FormatInt(p.TimestampMs, 10) + "(" + p.Time.UTC().Format("2006-01-02 15:04:05.000") + ")"
	if dec["timestamp"] != wantTS || dec["workerId"] != "7" || dec["sequenceId"] != strconv.FormatInt(p.Sequence, 10) {
		t.Errorf("decode: got %v, want timestamp %q workerId 7 sequenceId %d", dec, wantTS, p.Sequence)
	}
	// A golden value: Leaf's epoch, 1 ms after it, worker 3, sequence 5.
	_, _, body = testkit.Fetch(t, hs, http.MethodGet, "/decodeSnowflakeId?snowflakeId="+strconv.FormatInt(1<<22|3<<12|5, 10))
	if want := `{"timestamp":"1288834974658(2010-11-04 01:42:54.658)","workerId":"3","sequenceId":"5"}` + "\n"; body != want {
		t.Errorf("decode golden: got %q, want %q", body, want)
	}
}

func TestHTTPErrors(t *testing.T) {
	ts := startServer(t, serverOpts{autoCreate: false})
	hs := httpServer(t, ts.h)
	for _, tc := range []struct {
		name       string
		method     string
		path       string
		wantStatus int
		wantCode   string
	}{
		{"unknown tag", "GET", "/api/segment/get/nosuch", 404, "NOTAG"},
		{"bad tag byte", "GET", "/api/segment/get/" + url.PathEscape("a\x01b"), 400, "BADTAG"},
		{"tag too long", "GET", "/api/segment/get/" + strings.Repeat("x", 200), 400, "BADTAG"},
		{"decode not a number", "GET", "/decodeSnowflakeId?snowflakeId=abc", 400, "ERR"},
		{"decode missing", "GET", "/decodeSnowflakeId", 400, "ERR"},
		{"decode negative", "GET", "/decodeSnowflakeId?snowflakeId=-5", 400, "ERR"},
		{"decode too big", "GET", "/decodeSnowflakeId?snowflakeId=9223372036854775808", 400, "ERR"},
		{"readyz tag not held", "GET", "/readyz?tag=nosuch", 404, "NOTAG"},
		{"readyz bad tag", "GET", "/readyz?tag=" + url.QueryEscape("a b"), 400, "BADTAG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ctype, body := testkit.Fetch(t, hs, tc.method, tc.path)
			if status != tc.wantStatus || ctype != "application/json" {
				t.Fatalf("got %d %q %q, want %d application/json", status, ctype, body, tc.wantStatus)
			}
			if code, msg := testkit.ErrorBody(t, body); code != tc.wantCode || msg == "" {
				t.Errorf("got code %q error %q, want %s and a message", code, msg, tc.wantCode)
			}
			if strings.HasPrefix(body, "-") {
				t.Errorf("body %q looks like a negative ID", body)
			}
		})
	}
	if status, _, _ := testkit.Fetch(t, hs, http.MethodPost, "/healthz"); status != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: got %d, want 405", status)
	}
}

func TestHTTPStatusOfCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"notag", &segment.TagError{Tag: "a", Err: segment.ErrUnknownTag}, 404},
		{"badtag", &segment.TagError{Tag: "a", Err: segment.ErrInvalidTag}, 400},
		{"unavailable", &segment.TagError{Tag: "a", Err: segment.ErrUnavailable}, 503},
		{"regression", &segment.TagError{Tag: "a", Err: segment.ErrRegression}, 409},
		{"limit", &segment.TagError{Tag: "a", Err: segment.ErrLimit}, 400},
		{"syntax", handlers.ReplyError("ERR syntax error"), 400},
		{"internal", errors.New("boom"), 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := handlers.New(handlers.Config{}, nil, nil, zap.NewNop())
			if got, _ := errcode.Status(h.ErrorCode(tc.err)); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestHTTPProbes(t *testing.T) {
	ts := startServer(t, serverOpts{autoCreate: true})
	hs := httpServer(t, ts.h)
	if status, _, body := testkit.Fetch(t, hs, http.MethodGet, "/healthz"); status != 200 || body != "ok" {
		t.Errorf("healthz: got %d %q, want 200 ok", status, body)
	}
	if _, err := ts.seg.Next("ready"); err != nil {
		t.Fatal(err)
	}
	status, ctype, body := testkit.Fetch(t, hs, http.MethodGet, "/readyz")
	if status != http.StatusOK || ctype != "application/json" {
		t.Fatalf("readyz: got %d %q %q, want 200 application/json", status, ctype, body)
	}
	var rep readyReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	want := readyReport{Ready: true, Alive: true, Modes: []string{"segment", "snowflake"}, Store: true,
		Segment:   []tagReadiness{{Tag: "ready", CanServe: true, CanRefill: true}},
		Snowflake: &snowflakeReadiness{Enabled: true, HasWorker: true, WorkerID: 7, HasLease: true}}
	if got, _ := json.Marshal(rep); string(got) != mustJSON(t, want) {
		t.Errorf("readyz: got %s, want %s", got, mustJSON(t, want))
	}
	status, _, body = testkit.Fetch(t, hs, http.MethodGet, "/readyz?tag=ready")
	if want := `{"ready":true,"alive":true,"modes":["segment"],"store":true,"warming":false,"segment":[{"tag":"ready","can_serve":true,"can_refill":true}]}` + "\n"; status != 200 || body != want {
		t.Errorf("readyz?tag=ready: got %d %q, want 200 %q", status, body, want)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHTTPNotReady: a tag that cannot load and no snowflake mode: 503 everywhere, with the
// codes RESP would send.
func TestHTTPNotReady(t *testing.T) {
	cfg := segment.DefaultConfig()
	cfg.AutoCreate = true
	cfg.WaitTimeout = 50 * time.Millisecond
	seg, err := segment.New(cfg, segtest.DownStore{}, segtest.NoMarks{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = seg.Close() })
	h := handlers.New(handlers.Config{}, seg, nil, zap.NewNop())
	hs := httpServer(t, h)

	status, _, body := testkit.Fetch(t, hs, http.MethodGet, "/api/segment/get/down")
	if code, _ := testkit.ErrorBody(t, body); status != http.StatusServiceUnavailable || code != "UNAVAILABLE" {
		t.Errorf("segment get: got %d %q, want 503 UNAVAILABLE", status, body)
	}
	status, _, body = testkit.Fetch(t, hs, http.MethodGet, "/api/snowflake/get/x")
	if code, _ := testkit.ErrorBody(t, body); status != http.StatusServiceUnavailable || code != "NOWORKER" {
		t.Errorf("snowflake get: got %d %q, want 503 NOWORKER", status, body)
	}
	status, _, body = testkit.Fetch(t, hs, http.MethodGet, "/readyz")
	// The tag whose load failed is not held; the store's error says why it is not ready. The
	// warm start waits for the first tag list that succeeds, so it is still pending.
	want := `{"ready":false,"alive":true,"modes":["segment"],"store":false,"store_error":"store error (details in the server log)","warming":true,"segment":[],"snowflake":{"enabled":false,"has_worker":false,"worker_id":-1,"has_lease":false}}` + "\n"
	if status != http.StatusServiceUnavailable || body != want {
		t.Errorf("readyz: got %d %q, want 503 %q", status, body, want)
	}
	// A tag whose first load failed is not held: the store is asked whether it could be
	// loaded, and it fails.
	if status, _, body := testkit.Fetch(t, hs, http.MethodGet, "/readyz?tag=down"); status != http.StatusServiceUnavailable ||
		!strings.Contains(body, `"not_held":true`) || !strings.Contains(body, "store error (details in the server log)") {
		t.Errorf("readyz?tag=down: got %d %s, want 503, not held, with the store's error in plain words", status, body)
	}
	status, _, body = testkit.Fetch(t, hs, http.MethodGet, "/metrics")
	for _, want := range []string{`leafd_segment_loads_total{result="failed"} `, "leafd_snowflake_enabled 0",
		"leafd_ready 0\n", `leafd_command_errors_total{code="UNAVAILABLE"} 1`, `leafd_command_errors_total{code="NOWORKER"} 1`,
		`leafd_segment_load_duration_seconds_count `} {
		if status != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics: got %d, want a line %q", status, want)
		}
	}
}

func TestHTTPMetrics(t *testing.T) {
	ts := startServer(t, serverOpts{autoCreate: true})
	hs := httpServer(t, ts.h)
	c := ts.client(t, 2, "")
	if err := c.Incr(context.Background(), "m").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(context.Background(), "IDS.SNOWFLAKE").Err(); err != nil {
		t.Fatal(err)
	}
	status, ctype, body := testkit.Fetch(t, hs, http.MethodGet, "/metrics")
	if status != http.StatusOK || !strings.HasPrefix(ctype, "text/plain") {
		t.Fatalf("metrics: got %d %q, want 200 text/plain", status, ctype)
	}
	for _, want := range []string{
		"# TYPE leafd_segment_ids_total counter", "leafd_segment_ids_total 1\n",
		`leafd_segment_loads_total{result="ok"} `, "leafd_segment_tags 1\n",
		`leafd_segment_tag_can_serve{tag="m"} 1`, `leafd_segment_tag_step{tag="m"} 1000`,
		"leafd_snowflake_has_worker 1\n", "leafd_snowflake_worker_id 7\n", "leafd_snowflake_ids_total 1\n",
		"# TYPE leafd_connected_clients gauge", "leafd_commands_total ", "leafd_connections_total 1\n",
		"go_goroutines ", "process_start_time_seconds ",
		`leafd_segment_tag_ids_total{tag="m"} 1`, `leafd_segment_tag_current_remaining{tag="m"} 999`,
		"leafd_segment_load_duration_seconds_count 1\n", `leafd_segment_load_duration_seconds_bucket{le="+Inf"} 1`,
		"leafd_ready 1\n", `leafd_command_errors_total{code="UNAVAILABLE"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics: missing %q", want)
		}
	}
	problems, err := testutil.CollectAndLint(&collector{a: New(Config{}, ts.h, zap.NewNop())})
	if err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", err, problems)
	}
}
