package handlers

// What the admin port (package admin) reads of the command layer: the cores, the server, a
// few facts of the configuration, the counters only the command layer keeps, the one error
// mapping (errorCode) and Leaf's HTTP API, whose routing (ordered, shaped, plain tags) is the
// commands' own. Nothing here runs on the RESP path.

import (
	"time"

	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/snowflake"
	"go.uber.org/zap"
)

// Facts is what the admin side reports of the command layer's configuration.
type Facts struct {
	Version   string // leafd's version
	StoreName string // "embedded" or "mysql"
	// NoSegment and NoSnowflake: the mode is off (--modes).
	NoSegment   bool
	NoSnowflake bool
	Now         func() time.Time // the command layer's clock
}

// Facts returns the configuration facts (defaults filled in).
func (h *Handler) Facts() Facts {
	return Facts{Version: h.cfg.Version, StoreName: h.cfg.StoreName, NoSegment: h.cfg.NoSegment,
		NoSnowflake: h.cfg.NoSnowflake, Now: h.cfg.Now}
}

// Segments returns the segment core.
func (h *Handler) Segments() Segments { return h.seg }

// Snowflakes returns the snowflake core (nil when snowflake mode is off).
func (h *Handler) Snowflakes() Snowflakes { return h.snow }

// Server returns the server SetServer gave (nil before).
func (h *Handler) Server() *resp.Server { return h.srv }

// Ordered returns the ordered tags' manager and forwarder (nil without ordered tags; the
// forwarder is nil with a local manager).
func (h *Handler) Ordered() (*ordered.Manager, *ordered.Forwarder) { return h.ord, h.fwd }

// ErrorCode maps err to its code and message, counting it, as a RESP reply does (errorCode).
func (h *Handler) ErrorCode(err error) (code, msg string) { return h.errorCode(err) }

// EachErrorCount calls f with every code of internal/errcode's table, in table order, and the
// count of error replies with that code, then errcode.Other (leafd_command_errors_total).
func (h *Handler) EachErrorCount(f func(code string, n uint64)) { h.errs.Each(f) }

// AuthFailures returns the failed authentications of the RESP port and of the admin port.
func (h *Handler) AuthFailures() (respPort, httpPort int64) {
	return h.guard.failures.Load(), h.guard.httpFail.Load()
}

// HTTPAuthFailed records a failed authentication of the admin port (counted, logged at most
// once a second). A wrong token (paced) is slowed like a wrong AUTH; tooMany reports that its
// turn is too far away: the caller answers 429 at once.
func (h *Handler) HTTPAuthFailed(remote, path string, paced bool) (tooMany bool) {
	n := h.guard.httpFail.Add(1)
	now := h.now()
	if len(path) > 64 {
		path = path[:64]
	}
	h.logAuthFailure(now, "http", remote, n, zap.String("path", escapeControl(path)))
	if !paced {
		return false
	}
	wait, ok := h.authDelay(now)
	if !ok {
		return true
	}
	if wait > 0 {
		h.cfg.Sleep(wait)
	}
	return false
}

// EachLatency calls f with every command that ran, its count, the sum of its latencies and
// its cumulative buckets (upper bound in seconds -> commands at or under it).
func (h *Handler) EachLatency(f func(command string, count uint64, sumSeconds float64, buckets map[float64]uint64)) {
	for name, cmd := range h.table {
		l := &h.lat[cmd.idx]
		var count uint64
		cum := make(map[float64]uint64, len(latencyBuckets))
		for i, ub := range latencyBuckets {
			count += l.buckets[i].Load()
			cum[ub] = count
		}
		count += l.buckets[len(latencyBuckets)].Load()
		if count > 0 {
			f(name, count, float64(l.sumNs.Load())/1e9, cum)
		}
	}
}

// ReplyError returns an error whose text is the reply, code first ("ERR syntax error").
func ReplyError(text string) error { return replyError(text) }

// DisabledMode is the error of a command or endpoint of a mode that --modes turned off.
func DisabledMode(mode string) error { return disabledMode(mode) }

// PublicLoadError, PublicStoreError and PublicStatus say in words what a segment load, the
// store's latest call and the snowflake status failed of, without addresses or users
// (redact.go).
func PublicLoadError(s string) string  { return publicLoadError(s) }
func PublicStoreError(s string) string { return publicStoreError(s) }
func PublicStatus(s string) string     { return publicStatus(s) }

// errNoSnowflake is the answer of the snowflake endpoints when the mode is off.
var errNoSnowflake = replyError("NOWORKER snowflake mode is not enabled on this server")

// LeafSegmentGet is Leaf's /api/segment/get/{key}: the next ID of key as text, routed as INCR
// routes it (an ordered tag to its leader, a shaped tag's formatted ID); an unknown tag is
// created as INCR would.
func (h *Handler) LeafSegmentGet(key string) (string, error) {
	if h.cfg.NoSegment {
		return "", disabledMode("segment")
	}
	var buf [64]byte
	b, err := h.ids.AppendNext(buf[:0], key)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// LeafSnowflake returns the snowflake core for Leaf's snowflake endpoints, or the error they
// answer when there is none (DISABLED, NOWORKER).
func (h *Handler) LeafSnowflake() (Snowflakes, error) {
	if h.cfg.NoSnowflake {
		return nil, disabledMode("snowflake")
	}
	if h.snow == nil {
		return nil, errNoSnowflake
	}
	return h.snow, nil
}

// LeafDecode is Leaf's /decodeSnowflakeId: the fields of the snowflake ID written arg.
func (h *Handler) LeafDecode(arg string) (snowflake.Parts, error) {
	snow, err := h.LeafSnowflake()
	if err != nil {
		return snowflake.Parts{}, err
	}
	id, err := parseInt([]byte(arg))
	if err != nil {
		return snowflake.Parts{}, replyError("ERR snowflakeId: value is not an integer or out of range")
	}
	if id < 0 {
		return snowflake.Parts{}, replyError("ERR snowflake IDs are not negative")
	}
	return snow.Decode(id), nil
}
