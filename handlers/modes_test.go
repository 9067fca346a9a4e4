package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/testkit"
	"github.com/leafd/leafd/segment"
)

// TestModesDisabled: a mode turned off by --modes answers DISABLED, naming the option, on
// RESP (inside MULTI too) and HTTP, and its probe is DISABLED (501); the other mode serves
// and the plain /readyz covers it alone.
func TestModesDisabled(t *testing.T) {
	ctx := context.Background()
	for _, off := range []string{"segment", "snowflake"} {
		t.Run(off+" off", func(t *testing.T) {
			ts := startServer(t, serverOpts{autoCreate: true, config: func(c *Config) {
				c.NoSegment, c.NoSnowflake = off == "segment", off == "snowflake"
			}})
			c := ts.client(t, 2, "")
			hs := httpServer(t, ts.h)
			offCmd, onCmd := []any{"INCR", "t"}, []any{"IDS.SNOWFLAKE"}
			offPath, onPath := "/api/segment/get/t", "/api/snowflake/get/x"
			if off == "snowflake" {
				offCmd, onCmd, offPath, onPath = onCmd, offCmd, onPath, offPath
			}
			err := c.Do(ctx, offCmd...).Err()
			if err == nil || !strings.HasPrefix(err.Error(), "DISABLED "+off+" mode") || !strings.Contains(err.Error(), "--modes") {
				t.Fatalf("%v with %s off: got %v, want DISABLED naming --modes", offCmd, off, err)
			}
			if err := c.Do(ctx, onCmd...).Err(); err != nil {
				t.Fatalf("%v with %s off: %v", onCmd, off, err)
			}
			status, _, body := testkit.Fetch(t, hs, http.MethodGet, offPath)
			if code, msg := testkit.ErrorBody(t, body); status != http.StatusNotImplemented || code != "DISABLED" || !strings.Contains(msg, "--modes") {
				t.Fatalf("%s: got %d %s, want 501 DISABLED naming --modes", offPath, status, body)
			}
			if status, _, body := testkit.Fetch(t, hs, http.MethodGet, onPath); status != 200 {
				t.Fatalf("%s: got %d %s", onPath, status, body)
			}
			if status, _, body := testkit.Fetch(t, hs, http.MethodGet, "/readyz?mode="+off); status != http.StatusNotImplemented {
				t.Fatalf("/readyz?mode=%s: got %d %s, want 501", off, status, body)
			}
			status, _, body = testkit.Fetch(t, hs, http.MethodGet, "/readyz")
			var rep struct {
				Modes []string `json:"modes"`
			}
			if err := json.Unmarshal([]byte(body), &rep); err != nil {
				t.Fatal(err)
			}
			if status != 200 || len(rep.Modes) != 1 || rep.Modes[0] == off {
				t.Fatalf("/readyz with %s off: got %d %s, want 200 covering the other mode only", off, status, body)
			}
			// Inside MULTI the command is refused at once and EXEC aborts, like an unknown one.
			pipe := c.TxPipeline()
			pipe.Do(ctx, offCmd...)
			if _, err := pipe.Exec(ctx); err == nil || !strings.Contains(err.Error(), "EXECABORT") && !strings.Contains(err.Error(), "DISABLED") {
				t.Fatalf("MULTI with a disabled command: got %v, want EXECABORT", err)
			}
		})
	}
}

// TestReadyPerMode: with the snowflake lease lost (the worker-id source unreachable), the
// plain /readyz is 503, /readyz?mode=snowflake too, but /readyz?mode=segment is 200: a
// segment Service is not emptied by an outage of the snowflake side. leafd_ready follows
// the plain one.
func TestReadyPerMode(t *testing.T) {
	var skew atomic.Int64
	ts := startServer(t, serverOpts{autoCreate: true, config: func(c *Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	}})
	hs := httpServer(t, ts.h)
	if _, err := ts.seg.Next("order"); err != nil {
		t.Fatal(err)
	}
	want := func(path string, status int) {
		t.Helper()
		if got, _, body := testkit.Fetch(t, hs, http.MethodGet, path); got != status {
			t.Errorf("%s: got %d %s, want %d", path, got, body, status)
		}
	}
	want("/readyz", 200)
	want("/readyz?mode=segment", 200)
	want("/readyz?mode=snowflake", 200)
	skew.Store(int64(time.Until(ts.snow.Info().ReservedUntil) + time.Hour))
	want("/readyz", 503)
	want("/readyz?mode=snowflake", 503)
	want("/readyz?mode=segment", 200)
	want("/readyz?mode=both", 400)
	if _, _, metrics := testkit.Fetch(t, hs, http.MethodGet, "/metrics"); !strings.Contains(metrics, "\nleafd_ready 0\n") {
		t.Error("leafd_ready: ready while the plain /readyz is not")
	}
	_, _, body := testkit.Fetch(t, hs, http.MethodGet, "/readyz?mode=segment")
	if strings.Contains(body, "snowflake") {
		t.Errorf("/readyz?mode=segment reports snowflake: %s", body)
	}
}

// TestReadyTagNotHeld: /readyz?tag= of a tag the store has but this instance has not loaded
// asks the store (nothing is loaded): 200, not held, can refill. A tag the store lacks is 404
// NOTAG with auto-create off, and could be served (created on first use) with it on.
func TestReadyTagNotHeld(t *testing.T) {
	for _, auto := range []bool{false, true} {
		ts := startServer(t, serverOpts{autoCreate: auto})
		hs := httpServer(t, ts.h)
		if err := ts.seg.Create(context.Background(), segment.Tag{Name: "stored", Step: 10}); err != nil {
			t.Fatal(err)
		}
		ts.seg.Retire("stored") // in the store, not held
		status, _, body := testkit.Fetch(t, hs, http.MethodGet, "/readyz?tag=stored")
		if status != 200 || !strings.Contains(body, `"not_held":true`) || !strings.Contains(body, `"can_refill":true`) {
			t.Fatalf("auto %v: readyz?tag=stored: got %d %s, want 200 not held, can refill", auto, status, body)
		}
		if held := ts.seg.Tags(); len(held) != 0 {
			t.Fatalf("auto %v: the probe loaded %v", auto, held)
		}
		status, _, body = testkit.Fetch(t, hs, http.MethodGet, "/readyz?tag=absent")
		switch {
		case !auto && status != http.StatusNotFound:
			t.Fatalf("readyz?tag=absent, auto-create off: got %d %s, want 404", status, body)
		case auto && (status != 200 || !strings.Contains(body, `"not_held":true`)):
			t.Fatalf("readyz?tag=absent, auto-create on: got %d %s, want 200 (created on first use)", status, body)
		}
	}
}
