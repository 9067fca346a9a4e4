package e2e

import (
	"crypto/tls"
	"io"
	"net/http"
	"time"
)

// HTTPGet fetches path from the admin port, with a Bearer token unless token is empty.
func (l *Leafd) HTTPGet(path, token string) (int, string, error) {
	return HTTPDo("http://"+l.HTTPAddr+path, token, nil)
}

// HTTPStatus is the status of GET path on the admin port; an error fails the test.
func (l *Leafd) HTTPStatus(path string) int {
	l.t.Helper()
	status, _, err := l.HTTPGet(path, "")
	if err != nil {
		l.t.Fatalf("GET %s: %v", path, err)
	}
	return status
}

// HTTPDo sends GET url (with a Bearer token unless empty, over TLS with tlsCfg when set) on a
// connection of its own, and returns the status and body.
func HTTPDo(url, token string, tlsCfg *tls.Config) (int, string, error) {
	tr := &http.Transport{TLSClientConfig: tlsCfg}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
