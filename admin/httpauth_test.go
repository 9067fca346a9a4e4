package admin

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leafd/leafd/handlers"
	"go.uber.org/zap"
)

// TestHTTPAuth: with a token every admin endpoint needs it (Bearer or Basic); wrong and
// missing tokens are counted; with open probes /healthz and a tag-less /readyz answer
// without it, /readyz with only its status and {"ready": ...}.
func TestHTTPAuth(t *testing.T) {
	ts := startServer(t, serverOpts{autoCreate: true})
	if err := ts.client(t, 2, "").Incr(context.Background(), "secret-tag").Err(); err != nil {
		t.Fatal(err)
	}
	paths := []string{"/healthz", "/readyz", "/readyz?tag=secret-tag", "/metrics", "/status", "/status.json",
		"/api/segment/get/newtag", "/api/snowflake/get/x", "/decodeSnowflakeId?snowflakeId=1"}
	for _, open := range []bool{false, true} {
		h := handlers.New(handlers.Config{}, ts.seg, ts.snow, zap.NewNop())
		hs := httptest.NewServer(New(Config{HTTPAuth: "tok", HTTPOpenProbes: open}, h, zap.NewNop()).Handler())
		for _, p := range paths {
			for _, auth := range []string{"", "Bearer wrong", "Basic " + base64.StdEncoding.EncodeToString([]byte("u:wrong"))} {
				status, body := doAuth(t, hs, p, auth)
				openProbe := open && auth == "" && (p == "/healthz" || p == "/readyz")
				switch {
				case openProbe && p == "/readyz":
					if status != http.StatusOK || body != `{"ready":true}`+"\n" {
						t.Errorf("open=%v %s %q: got %d %q, want 200 {\"ready\":true}", open, p, auth, status, body)
					}
				case openProbe:
					if status != http.StatusOK {
						t.Errorf("open=%v %s %q: got %d, want 200", open, p, auth, status)
					}
				case status != http.StatusUnauthorized || strings.Contains(body, "secret-tag"):
					t.Errorf("open=%v %s %q: got %d %q, want 401", open, p, auth, status, body)
				}
			}
			for _, auth := range []string{"Bearer tok", "Basic " + base64.StdEncoding.EncodeToString([]byte("prometheus:tok"))} {
				if status, _ := doAuth(t, hs, p, auth); status != http.StatusOK {
					t.Errorf("open=%v %s %q: got %d, want 200", open, p, auth, status)
				}
			}
		}
		if _, body := doAuth(t, hs, "/metrics", "Bearer tok"); !strings.Contains(body, `leafd_auth_failures_total{port="http"} `) ||
			strings.Contains(body, `leafd_auth_failures_total{port="http"} 0`) {
			t.Errorf("open=%v: metrics do not count the HTTP failures", open)
		}
		hs.Close()
	}
	// No token: the mux as it was, open.
	hs := httpServer(t, handlers.New(handlers.Config{}, ts.seg, ts.snow, zap.NewNop()))
	if status, _ := doAuth(t, hs, "/api/segment/get/x", ""); status != http.StatusOK {
		t.Errorf("without a token: got %d, want 200", status)
	}
}

func doAuth(t *testing.T, hs *httptest.Server, path, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, hs.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
