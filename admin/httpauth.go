package admin

// Authentication of the admin port. With a token configured (--http-auth, or --requirepass
// when that is not given) every endpoint requires it, as "Authorization: Bearer <token>" or
// HTTP Basic with the token as the password (any user name; what Prometheus' basic_auth and a
// browser send). HTTPOpenProbes leaves two answers open for orchestrators' probes: /healthz,
// and /readyz without ?tag, reduced to {"ready": bool} and its status (no tag names).

import (
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/leafd/leafd/internal/errcode"
)

// withAuth wraps the admin mux with the token check; without a token it is the mux.
func (a *Server) withAuth(next http.Handler) http.Handler {
	token := a.cfg.HTTPAuth
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		given, present := requestToken(r)
		if present && subtle.ConstantTimeCompare([]byte(given), []byte(token)) == 1 {
			next.ServeHTTP(w, r)
			return
		}
		if a.cfg.HTTPOpenProbes && !present {
			switch {
			case r.URL.Path == "/healthz":
				next.ServeHTTP(w, r)
				return
			case r.URL.Path == "/readyz" && !r.URL.Query().Has("tag"):
				a.serveReadyOpen(next, w, r)
				return
			}
		}
		// A wrong token is paced like a wrong AUTH; a missing one (a scraper not yet
		// configured) is not.
		if a.h.HTTPAuthFailed(r.RemoteAddr, r.URL.Path, present) {
			w.Header().Set("Retry-After", "1")
			a.writeJSON(w, http.StatusTooManyRequests, authBody{"NOAUTH", "too many failed authentications; retry later"})
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="leafd", Basic realm="leafd"`)
		status, _ := errcode.Status("NOAUTH", "")
		a.writeJSON(w, status, authBody{"NOAUTH", "authentication required: send Authorization: Bearer <token>"})
	})
}

type authBody struct {
	Code  string `json:"code"`
	Error string `json:"error"`
}

// requestToken extracts the token of a Bearer or Basic Authorization header.
func requestToken(r *http.Request) (string, bool) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "", false
	}
	scheme, rest, _ := strings.Cut(auth, " ")
	switch strings.ToLower(scheme) {
	case "bearer":
		return strings.TrimSpace(rest), true
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
		if err != nil {
			return "", true
		}
		_, pass, _ := strings.Cut(string(raw), ":")
		return pass, true
	}
	return "", true
}

// serveReadyOpen answers an unauthenticated /readyz with the status the full answer would
// have and only {"ready": bool}: a probe learns whether to route traffic, not the tags.
func (a *Server) serveReadyOpen(next http.Handler, w http.ResponseWriter, r *http.Request) {
	rec := &statusOnly{header: http.Header{}, status: http.StatusOK}
	next.ServeHTTP(rec, r)
	ready := rec.status == http.StatusOK
	if !ready {
		w.Header().Set("Retry-After", "1")
	}
	a.writeJSON(w, rec.status, struct {
		Ready bool `json:"ready"`
	}{ready})
}

// statusOnly is a ResponseWriter that keeps the status and drops the body.
type statusOnly struct {
	header      http.Header
	status      int
	wroteHeader bool
}

func (s *statusOnly) Header() http.Header { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) {
	s.wroteHeader = true
	return len(b), nil
}
func (s *statusOnly) WriteHeader(code int) {
	if !s.wroteHeader {
		s.status, s.wroteHeader = code, true
	}
}
