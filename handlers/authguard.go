package handlers

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/leafd/leafd/resp"
	"go.uber.org/zap"
)

// Failed authentication (AUTH, HELLO ... AUTH) is counted (INFO acl_access_denied_auth,
// /metrics leafd_auth_failures_total), logged at most once a second, and slowed: the failures
// of all connections together pass at AuthFailRate per second after a burst of AuthFailBurst,
// each failing client waiting for its turn before its WRONGPASS. A client whose turn is more
// than authMaxWait away is answered at once and disconnected, and so is one that failed
// AuthMaxFailures times. A correct password never waits.

// Defaults of the authentication guard.
const (
	DefaultAuthMaxFailures = 10
	DefaultAuthFailRate    = 100
	DefaultAuthFailBurst   = 20
	authMaxWait            = time.Second
)

// authGuard holds the server-wide state of failed authentications.
type authGuard struct {
	failures atomic.Int64 // RESP failures
	httpFail atomic.Int64 // admin-port failures (HTTPAuthFailed, package admin)
	tat      atomic.Int64 // GCRA theoretical arrival time of the next failure, unix ns
	logLast  atomic.Int64 // unix ns of the last log line
	logSkip  atomic.Int64 // failures not logged since
}

// authDelay reserves a turn for one failure at now and returns how long the failing client
// waits for it; ok is false when the turn is more than authMaxWait away (nothing is reserved
// then, so a flood of refused guesses does not push the turns of later ones further out).
func (h *Handler) authDelay(now time.Time) (wait time.Duration, ok bool) {
	interval := int64(time.Second) / int64(h.cfg.AuthFailRate)
	burst := int64(h.cfg.AuthFailBurst) * interval
	for {
		old := h.guard.tat.Load()
		n := now.UnixNano()
		next := max(old, n) + interval
		w := next - n - burst
		if w > int64(authMaxWait) {
			return 0, false
		}
		if h.guard.tat.CompareAndSwap(old, next) {
			return time.Duration(max(w, 0)), true
		}
	}
}

// authFailed records a failed authentication of c and slows or disconnects it. The caller
// replies WRONGPASS.
func (h *Handler) authFailed(c *resp.Conn) {
	n := h.guard.failures.Add(1)
	now := h.now()
	h.logAuthFailure(now, "resp", c.Info(now).Addr, n, zap.Int("connection_failures", c.AuthFailures()))
	if c.AuthFailures() >= h.cfg.AuthMaxFailures {
		c.CloseAfterReply()
		return
	}
	wait, ok := h.authDelay(now)
	if !ok {
		c.CloseAfterReply()
		return
	}
	if wait > 0 {
		h.cfg.Sleep(wait)
	}
}

// logAuthFailure logs one line per second at most, with the count left out since.
func (h *Handler) logAuthFailure(now time.Time, port, client string, total int64, extra ...zap.Field) {
	last := h.guard.logLast.Load()
	if now.UnixNano()-last < int64(time.Second) || !h.guard.logLast.CompareAndSwap(last, now.UnixNano()) {
		h.guard.logSkip.Add(1)
		return
	}
	fields := append([]zap.Field{zap.String("port", port), zap.String("client", client),
		zap.Int64("total_failures", total), zap.Int64("not_logged_since_last", h.guard.logSkip.Swap(0))}, extra...)
	h.log.Warn("authentication failed", fields...)
}

// escapeControl returns s with control bytes (below 0x20, and DEL) written as \xHH, so that
// a client's bytes echoed in an error reply or a log line cannot carry terminal escapes or
// NULs. Printable bytes and UTF-8 pass unchanged.
func escapeControl(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f {
			b.WriteString(`\x`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
