package testkit

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Fetch sends method path to hs and returns the status, the Content-Type and the body; a
// failed request fails the test.
func Fetch(t testing.TB, hs *httptest.Server, method, path string) (status int, ctype, body string) {
	t.Helper()
	req, err := http.NewRequest(method, hs.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// ErrorBody decodes an admin-port error reply, {"code": ..., "error": ...}, and checks that
// it has exactly those two fields, the code not empty.
func ErrorBody(t testing.TB, body string) (code, msg string) {
	t.Helper()
	var m map[string]string
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	if len(m) != 2 || m["code"] == "" {
		t.Errorf("error body %q: want exactly code and error", body)
	}
	return m["code"], m["error"]
}
