package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/segtest"
)

// AdminHandler builds the admin port of h for the tests of this package that look at the
// HTTP side too. Package admin imports handlers, so the external test package sets it
// (admin_hook_test.go).
var AdminHandler func(h *Handler) http.Handler

// httpServer serves the admin port of h over httptest.
func httpServer(t *testing.T, h *Handler) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(AdminHandler(h))
	t.Cleanup(hs.Close)
	return hs
}

// get fetches path and returns the status, the Content-Type and the body.
func get(t *testing.T, hs *httptest.Server, method, path string) (int, string, string) {
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

// errorBody decodes an error reply and checks that it has exactly the two fields.
func errorBody(t *testing.T, body string) (code, msg string) {
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

// downStore is a store whose every call fails, as a MySQL that went away.
type downStore struct{ segtest.StoreBase }

var errDown = errors.New("store down")

func (downStore) Allocate(context.Context, string, int64) (segment.Alloc, error) {
	return segment.Alloc{}, errDown
}
func (downStore) Tags(context.Context) ([]string, error)    { return nil, errDown }
func (downStore) Create(context.Context, segment.Tag) error { return errDown }

type noMarks struct{ segtest.MarksBase }

func (noMarks) Mark(string) (int64, error) { return 0, nil }
func (noMarks) Raise(string, int64) error  { return nil }
