package handlers

import (
	"net/http"
	"net/http/httptest"
	"testing"
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
