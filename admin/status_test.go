package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testenv"
	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/segment"
)

// hostileTag is a tag name that is also markup: the page must show it as text.
const hostileTag = `z<img/src=x/onerror=alert(1)>`

func TestStatusJSON(t *testing.T) {
	ts := startServer(t, serverOpts{autoCreate: true})
	hs := httpServer(t, ts.h)
	for range 3 {
		if _, err := ts.seg.Next("orders"); err != nil {
			t.Fatal(err)
		}
	}
	if status, _, _ := testkit.Fetch(t, hs, http.MethodGet, "/api/segment/get/"+url.PathEscape(hostileTag)); status != 200 {
		t.Fatalf("hostile tag get: got %d, want 200", status)
	}
	if _, err := ts.snow.Next(); err != nil {
		t.Fatal(err)
	}
	status, ctype, body := testkit.Fetch(t, hs, http.MethodGet, "/status.json")
	if status != http.StatusOK || ctype != "application/json" {
		t.Fatalf("status.json: got %d %q, want 200 application/json", status, ctype)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Ready || rep.Version != "test" || rep.Store != "embedded" || rep.NowMs <= 0 || len(rep.Tags) != 2 {
		t.Fatalf("status.json: got %+v", rep)
	}
	var o statusTag
	for _, tg := range rep.Tags {
		if tg.Tag == "orders" {
			o = tg
		}
	}
	if o.Current != (statusSegment{Loaded: true, Start: 1, End: 1001, Next: 4, Remaining: 997}) || o.Issued != 3 || o.Step != 1000 || o.Mark < 1001 {
		t.Errorf("orders: got %+v", o)
	}
	if len(o.Loads) == 0 || o.Loads[0].Start != 1 || o.Loads[0].End != 1001 || o.Loads[0].Error != "" || o.Loads[0].AtMs <= 0 || o.Loads[0].DurationMs < 0 {
		t.Errorf("orders loads: got %+v, want the load of [1, 1001)", o.Loads)
	}
	sf := rep.Snowflake
	if sf == nil || !sf.HasWorker || sf.WorkerID != 7 || sf.Issued != 1 || sf.ReservedUntilMs <= 0 || sf.Layout != "41/10/12" {
		t.Errorf("snowflake: got %+v", sf)
	}

	status, ctype, page := testkit.Fetch(t, hs, http.MethodGet, "/status")
	if status != http.StatusOK || !strings.HasPrefix(ctype, "text/html") {
		t.Fatalf("status: got %d %q, want 200 text/html", status, ctype)
	}
	// No external assets: nothing is loaded from another origin, the script only fetches
	// status.json, and the page never uses innerHTML.
	for _, bad := range []string{"http://", "https://", "<link", "src=", "innerHTML", "@import"} {
		if strings.Contains(page, bad) {
			t.Errorf("status page contains %q", bad)
		}
	}
}

// TestStatusPageInChromium loads /status in headless Chromium while traffic runs, checks the
// DOM its script built from /status.json (tags with both segments as bars, rates, loads, the
// snowflake worker and lease; the hostile tag name as text, not markup) and takes a
// screenshot (docs/status.png comes from TestStatusManyTags).
func TestStatusPageInChromium(t *testing.T) {
	chromium := testenv.Tool(t, "chromium", "chromium")
	ts := startServer(t, serverOpts{autoCreate: true})
	hs := httpServer(t, ts.h)
	ctx := context.Background()
	for _, tg := range []segment.Tag{{Name: "orders", Step: 5000}, {Name: "payments", Step: 2000}, {Name: "users", Step: 1000}} {
		if err := ts.seg.Create(ctx, tg); err != nil {
			t.Fatal(err)
		}
	}
	// Traffic: orders fast, payments slower, users and the hostile tag a little; snowflake.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for range 20 {
				_, _ = ts.seg.Next("orders")
			}
			for range 5 {
				_, _ = ts.seg.Next("payments")
			}
			if i%10 == 0 {
				_, _ = ts.seg.Next("users")
				_, _ = ts.seg.Next(hostileTag)
			}
			for range 10 {
				_, _ = ts.snow.Next()
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
	// Let a few segments switch so the last loads have history.
	var in segment.Info
	if !testkit.Poll(30*time.Second, func() bool {
		var err error
		in, err = ts.seg.Info("orders")
		return err == nil && len(in.Loads) >= 3
	}) {
		t.Fatalf("orders: fewer than 3 loads after 30s: %+v", in)
	}

	// The server's rates need two /status.json requests at least rateMinGap apart: a watcher
	// that came before this one.
	var body string
	if !testkit.Poll(30*time.Second, func() bool {
		_, _, body = testkit.Fetch(t, hs, http.MethodGet, "/status.json")
		var rep statusReport
		if err := json.Unmarshal([]byte(body), &rep); err != nil {
			t.Fatal(err)
		}
		return len(rep.Tags) > 0 && rep.Tags[0].IDsPerSec != nil
	}) {
		t.Fatalf("status.json: no rates after 30s: %s", body)
	}

	dir := t.TempDir()
	browse := func(args ...string) []byte {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--no-first-run", "--hide-scrollbars", "--user-data-dir=" + filepath.Join(dir, "profile"),
			"--window-size=1280,900", "--virtual-time-budget=5000"}
		cmd := exec.CommandContext(cctx, chromium, append(base, args...)...)
		cmd.Dir = dir
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
		}
		return out.Bytes()
	}

	dom := string(browse("--dump-dom", hs.URL+"/status"))
	polls := regexp.MustCompile(`data-polls="(\d+)"`).FindStringSubmatch(dom)
	if polls == nil || polls[1] == "1" {
		t.Errorf("the page did not refresh itself (data-polls %v); DOM:\n%s", polls, dom)
	}
	for _, want := range []string{
		`data-tag="orders"`, `data-tag="payments"`, "current runs out in", "with next", "last loads",
		`class="bar"`, "IDs/s", "ready", `id="snowflake-card"`, ">7<", "lease", "clock-back events",
		"z&lt;img/src=x/onerror=alert(1)&gt;",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page: missing %q", want)
		}
	}
	if strings.Contains(dom, "<img") {
		t.Errorf("the hostile tag name became markup:\n%s", dom)
	}
	// The first figure of the orders card is its rate: a number, not the placeholder.
	if m := regexp.MustCompile(`data-tag="orders".*?<div class="v">([^<]*)</div>`).FindStringSubmatch(dom); m == nil || !strings.HasSuffix(m[1], "/s") {
		t.Errorf("orders: IDs/s shown as %v, want a rate", m)
	}

	shot := filepath.Join(dir, "status.png")
	browse("--screenshot="+shot, hs.URL+"/status")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if r := img.Bounds(); r.Dx() != 1280 || r.Dy() != 900 {
		t.Errorf("screenshot is %v, want 1280x900", r)
	}
	colors := map[uint32]bool{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 7 {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 7 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colors[r>>8<<16|g>>8<<8|bl>>8] = true
		}
	}
	if len(colors) < 20 {
		t.Errorf("screenshot has %d colors: blank page?", len(colors))
	}
}

func TestRateSampler(t *testing.T) {
	var s rateSampler
	t0 := time.Unix(1000, 0)
	if _, _, ok := s.rates(t0, map[string]int64{"a": 10}, 5); ok {
		t.Fatal("first sample: got a rate, want none")
	}
	if _, _, ok := s.rates(t0.Add(100*time.Millisecond), map[string]int64{"a": 20}, 5); ok {
		t.Fatal("100ms later: got a rate, want none (below rateMinGap)")
	}
	tr, sr, ok := s.rates(t0.Add(2*time.Second), map[string]int64{"a": 30, "b": 1}, 45)
	if !ok || tr["a"] != 10 || sr != 20 {
		t.Errorf("2s later: got %v %v %v, want a=10/s, snowflake 20/s", tr, sr, ok)
	}
	if _, seen := tr["b"]; seen {
		t.Error("a tag without an earlier sample got a rate")
	}
	// Samples older than the window are dropped: the rate is that of the last seconds.
	tr, _, ok = s.rates(t0.Add(11*time.Second), map[string]int64{"a": 930, "b": 1}, 45)
	if !ok || tr["a"] != 100 {
		t.Errorf("11s later: got %v %v, want a=100/s against the 2s sample", tr, ok)
	}
}
