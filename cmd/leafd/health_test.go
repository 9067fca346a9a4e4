package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProbeTarget(t *testing.T) {
	for _, tc := range []struct {
		name, flag, env, want string
	}{
		{name: "default", want: "127.0.0.1:8080"},
		{name: "env any IPv4", env: "0.0.0.0:9090", want: "127.0.0.1:9090"},
		{name: "env empty host", env: ":9091", want: "127.0.0.1:9091"},
		{name: "env any IPv6", env: "[::]:9092", want: "[::1]:9092"},
		{name: "env specific", env: "10.0.0.5:8080", want: "10.0.0.5:8080"},
		{name: "flag beats env", flag: "127.0.0.2:1", env: "0.0.0.0:9090", want: "127.0.0.2:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := probeTarget(tc.flag, tc.env)
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := probeTarget("nonsense", ""); err == nil {
		t.Error("bad address: got no error")
	}
}

// TestHealthCommand: exit 0 on 200, 1 on anything else or no answer, 2 on bad usage; --ready
// asks /readyz, with --mode /readyz?mode=.
func TestHealthCommand(t *testing.T) {
	ready := false
	var query string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		switch {
		case r.URL.Path == "/healthz":
			_, _ = w.Write([]byte("ok"))
		case r.URL.Path == "/readyz" && ready:
			_, _ = w.Write([]byte("{}"))
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	addr := strings.TrimPrefix(hs.URL, "http://")
	noEnv := func(string) string { return "" }
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		return health(args, noEnv, &out), out.String()
	}
	if code, out := run("--addr", addr); code != 0 {
		t.Errorf("healthz: got exit %d (%s), want 0", code, out)
	}
	if code, out := run("--addr", addr, "--ready"); code != 1 || !strings.Contains(out, "503") {
		t.Errorf("readyz not ready: got exit %d %q, want 1 naming 503", code, out)
	}
	ready = true
	if code, out := run("--addr", addr, "--ready"); code != 0 {
		t.Errorf("readyz ready: got exit %d (%s), want 0", code, out)
	}
	if code, out := run("--addr", addr, "--ready", "--mode", "segment"); code != 0 || query != "mode=segment" {
		t.Errorf("readyz per mode: got exit %d (%s), query %q, want 0 asking mode=segment", code, out, query)
	}
	for _, bad := range [][]string{{"--ready", "--mode", "both"}, {"--mode", "segment"}} {
		if code, _ := run(append([]string{"--addr", addr}, bad...)...); code != 2 {
			t.Errorf("%v: got exit %d, want 2", bad, code)
		}
	}
	if code, _ := run("--addr", addr, "extra"); code != 2 {
		t.Errorf("extra argument: got exit %d, want 2", code)
	}
	hs.Close()
	if code, _ := run("--addr", addr, "--timeout", "2s"); code != 1 {
		t.Errorf("server gone: got exit %d, want 1", code)
	}
}

// TestHealthAuth: `leafd health` sends the admin token the server reads from the same
// environment (the password file here), so the image's HEALTHCHECK passes an admin port
// behind authentication.
func TestHealthAuth(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer hs.Close()
	addr := strings.TrimPrefix(hs.URL, "http://")
	file := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := health([]string{"--addr", addr}, func(string) string { return "" }, &out); code != 1 {
		t.Errorf("without the token: got exit %d, want 1", code)
	}
	env := func(k string) string {
		if k == "LEAFD_REQUIREPASS_FILE" {
			return file
		}
		return ""
	}
	if code := health([]string{"--addr", addr}, env, &out); code != 0 {
		t.Errorf("with LEAFD_REQUIREPASS_FILE: got exit %d (%s), want 0", code, out.String())
	}
}
