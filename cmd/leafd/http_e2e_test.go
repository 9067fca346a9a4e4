package main

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/e2e"
)

// TestHTTPAdmin: the server (in-process) serves Leaf's segment API and the metrics on --http-addr,
// shares the segment state with RESP, and stops gracefully with the admin port open.
func TestHTTPAdmin(t *testing.T) {
	l := startInProcess(t)
	for i, want := range []string{"1", "2"} {
		status, body, err := l.HTTPGet("/api/segment/get/web", "")
		if err != nil || status != http.StatusOK || body != want {
			t.Fatalf("segment get #%d: got %d %q %v, want 200 %q", i, status, body, err, want)
		}
	}
	if out, err := l.RedisCLI("INCR", "web"); err != nil || out != "3" {
		t.Errorf("INCR after HTTP: got %q %v, want 3", out, err)
	}
	status, body, err := l.HTTPGet("/api/snowflake/get/x", "")
	if id, perr := strconv.ParseInt(body, 10, 64); err != nil || status != 200 || perr != nil || id <= 0 {
		t.Errorf("snowflake get: got %d %q %v, want 200 and a positive ID", status, body, err)
	}
	status, body, err = l.HTTPGet("/metrics", "")
	if err != nil || status != http.StatusOK {
		t.Fatalf("metrics: got %d %v", status, err)
	}
	for _, want := range []string{`leafd_segment_tag_can_serve{tag="web"} 1`, "leafd_segment_ids_total 3", "leafd_snowflake_has_worker 1", "leafd_commands_total "} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics: missing %q", want)
		}
	}
	if status, body, err := l.HTTPGet("/readyz", ""); err != nil || status != http.StatusOK || !strings.Contains(body, `"ready":true`) {
		t.Errorf("readyz: got %d %q %v, want 200 ready", status, body, err)
	}
	if err := l.Stop(20 * time.Second); err != nil {
		t.Errorf("stop: %v\n%s", err, l.Log())
	}
}

// TestHTTPDisabled: --http-addr "" opens no admin port.
func TestHTTPDisabled(t *testing.T) {
	l := startInProcess(t, "--http-addr", "")
	if l.HTTPAddr != "" {
		t.Fatalf("httpAddr %q, want empty", l.HTTPAddr)
	}
	if strings.Contains(l.Log(), "admin HTTP ready") {
		t.Errorf("admin HTTP started although disabled:\n%s", l.Log())
	}
	// A taken admin port is a start-up error naming the option.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, e2e.Binary(), "--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--http-addr", addr).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--http-addr") {
		t.Errorf("taken admin port: got %v\n%s", err, out)
	}
}
