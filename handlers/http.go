package handlers

// The HTTP admin side (docs/CONTRACT.md, HTTP side): probes, Prometheus metrics, a status page and Leaf's HTTP
// API. With a token configured every endpoint requires it (httpauth.go).

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/leafd/leafd/segment"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// HTTPHandler returns the admin and Leaf-compatible HTTP API:
//
//	/healthz                     200 "ok" while the process is alive
//	/readyz[?tag=t]              200 when it can serve (store answers, or tags hold IDs), 503 otherwise (JSON)
//	/metrics                     Prometheus text format
//	/status                      HTML page (status.go) refreshing itself from /status.json
//	/status.json                 each held tag's buffer and last loads, the snowflake worker
//	/api/segment/get/{key}       Leaf: the next segment ID of key, plain text
//	/api/snowflake/get/{key}     Leaf: a snowflake ID, plain text (key ignored, as in Leaf)
//	/decodeSnowflakeId?snowflakeId=N   Leaf: the fields of a snowflake ID (JSON)
//
// Errors are HTTP error statuses with a JSON body {"code": "...", "error": "..."}, the code
// being the one RESP would send. Call it after SetServer so /metrics includes the server's
// counters. Each call builds its own Prometheus registry.
func (h *Handler) HTTPHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		&collector{h: h},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /readyz", h.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: zap.NewStdLog(h.log), ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /status", h.serveStatus)
	mux.HandleFunc("GET /status.json", h.serveStatusJSON)
	// Leaf maps these without a method restriction; so do we.
	mux.HandleFunc("/api/segment/get/{key}", h.serveSegmentGet)
	mux.HandleFunc("/api/snowflake/get/{key}", h.serveSnowflakeGet)
	mux.HandleFunc("/decodeSnowflakeId", h.serveDecode)
	return h.withAuth(mux) // httpauth.go
}

// httpStatus is the HTTP status of an error code from errorCode.
func httpStatus(code, msg string) int {
	switch code {
	case "NOTAG":
		return http.StatusNotFound
	case "BADTAG", "LIMIT", "BADFORMAT", "BADID", "NOSHAPE", "SHAPED":
		return http.StatusBadRequest
	case "UNAVAILABLE", "TRYAGAIN", "NOWORKER", "CLOCKBACK", "NOKEY", "STORE":
		return http.StatusServiceUnavailable
	case "REGRESSION", "TAGEXISTS", "NOTADOPTED":
		return http.StatusConflict
	case "DISABLED":
		return http.StatusNotImplemented
	case "ERR":
		if msg == msgInternal {
			return http.StatusInternalServerError
		}
		return http.StatusBadRequest // Redis's ERR for bad input: not an integer, syntax
	}
	return http.StatusInternalServerError // OVERFLOW and anything new
}

// writeHTTPError sends err as {"code": ..., "error": ...} with the status of its code.
func (h *Handler) writeHTTPError(w http.ResponseWriter, err error) {
	code, msg := h.errorCode(err)
	status := httpStatus(code, msg)
	if status == http.StatusServiceUnavailable && code != "STORE" { // STORE waits for a fix
		w.Header().Set("Retry-After", "1")
	}
	h.writeJSON(w, status, struct {
		Code  string `json:"code"`
		Error string `json:"error"`
	}{code, msg})
}

func (h *Handler) writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // our own types: cannot happen
		h.log.Error("http: encoding JSON", zap.Error(err))
		http.Error(w, `{"code":"ERR","error":"internal error"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeText(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(s))
}

// errNoSnowflake is the answer of the snowflake endpoints when the mode is off.
var errNoSnowflake = replyError("NOWORKER snowflake mode is not enabled on this server")

// serveSegmentGet is Leaf's /api/segment/get/{key}: the ID as plain text, never a negative
// number; an unknown tag is created as INCR would.
func (h *Handler) serveSegmentGet(w http.ResponseWriter, r *http.Request) {
	if h.cfg.NoSegment {
		h.writeHTTPError(w, disabledMode("segment"))
		return
	}
	var buf [64]byte
	b, err := h.ids.AppendNext(buf[:0], r.PathValue("key"))
	if err != nil {
		h.writeHTTPError(w, err)
		return
	}
	writeText(w, string(b))
}

// serveSnowflakeGet is Leaf's /api/snowflake/get/{key}; like Leaf it ignores the key.
func (h *Handler) serveSnowflakeGet(w http.ResponseWriter, _ *http.Request) {
	if h.cfg.NoSnowflake {
		h.writeHTTPError(w, disabledMode("snowflake"))
		return
	}
	if h.snow == nil {
		h.writeHTTPError(w, errNoSnowflake)
		return
	}
	id, err := h.snow.Next()
	if err != nil {
		h.writeHTTPError(w, err)
		return
	}
	writeText(w, strconv.FormatInt(id, 10))
}

// leafTimeLayout is Leaf's "yyyy-MM-dd HH:mm:ss.SSS".
const leafTimeLayout = "2006-01-02 15:04:05.000"

// serveDecode is Leaf's /decodeSnowflakeId?snowflakeId=N with Leaf's field names and string
// values, decoded with this server's epoch and layout. The time is UTC (Leaf uses the
// server's zone). A bad number is a 400, where Leaf answers 200 with an errorMsg field.
func (h *Handler) serveDecode(w http.ResponseWriter, r *http.Request) {
	if h.cfg.NoSnowflake {
		h.writeHTTPError(w, disabledMode("snowflake"))
		return
	}
	if h.snow == nil {
		h.writeHTTPError(w, errNoSnowflake)
		return
	}
	id, err := parseInt([]byte(r.URL.Query().Get("snowflakeId")))
	if err != nil {
		h.writeHTTPError(w, replyError("ERR snowflakeId: value is not an integer or out of range"))
		return
	}
	if id < 0 {
		h.writeHTTPError(w, replyError("ERR snowflake IDs are not negative"))
		return
	}
	p := h.snow.Decode(id)
	h.writeJSON(w, http.StatusOK, struct {
		Timestamp  string `json:"timestamp"`
		WorkerID   string `json:"workerId"`
		SequenceID string `json:"sequenceId"`
	}{
		Timestamp:  strconv.FormatInt(p.TimestampMs, 10) + "(" + p.Time.UTC().Format(leafTimeLayout) + ")",
		WorkerID:   strconv.FormatInt(p.WorkerID, 10),
		SequenceID: strconv.FormatInt(p.Sequence, 10),
	})
}

// tagReadiness is one tag in /readyz.
type tagReadiness struct {
	Tag string `json:"tag"`
	// CanServe: the current segment has IDs left or the next one is ready.
	CanServe bool `json:"can_serve"`
	// CanRefill: the latest load did not fail (a tag not held: a load could lease a range).
	CanRefill bool `json:"can_refill"`
	// NotHeld: /readyz?tag= of a tag this instance has not loaded; CanRefill then says
	// whether its first load could lease a range, and Error why not.
	NotHeld bool   `json:"not_held,omitempty"`
	Error   string `json:"error,omitempty"`
}

func readiness(in segment.Info) tagReadiness {
	return tagReadiness{
		Tag:       in.Tag,
		CanServe:  in.Current.Remaining > 0 || in.NextReady,
		CanRefill: in.LastError == "",
	}
}

// snowflakeReadiness is the snowflake part of /readyz.
type snowflakeReadiness struct {
	Enabled   bool   `json:"enabled"`
	HasWorker bool   `json:"has_worker"`
	WorkerID  int64  `json:"worker_id"`
	HasLease  bool   `json:"has_lease"`
	Status    string `json:"status,omitempty"`
}

// readyReport is the body of /readyz.
type readyReport struct {
	Ready bool `json:"ready"`
	Alive bool `json:"alive"`
	// Modes are the modes this report covers: every enabled one, or the one ?mode= asks.
	Modes []string `json:"modes"`
	// Store: the segment store answered its latest call; StoreError when it did not.
	Store      bool   `json:"store"`
	StoreError string `json:"store_error,omitempty"`
	StoreCause string `json:"store_cause,omitempty"` // internal/storeerr's class

	Warming   bool                `json:"warming"`
	Segment   []tagReadiness      `json:"segment"`
	Snowflake *snowflakeReadiness `json:"snowflake,omitempty"`
}

// serveReady answers 200 when the instance can serve, 503 otherwise. Ready means, for each
// mode it covers: segment, the store answers (any tag can then be loaded on its first
// request) or, while it does not, at least one held tag can still serve from its segments;
// snowflake, a worker id and a held lease (its time bound ahead of the clock). It never waits
// for tags to be loaded: a restarted instance is ready as soon as its store answers.
// ?mode=segment or ?mode=snowflake covers that mode alone (a Service of one kind of ID is not
// emptied by an outage of the other's dependency); without it, every enabled mode; a
// disabled mode asked for is DISABLED (501). With ?tag=t only that tag counts: a held tag is
// ready when it can serve now or the store answers; a tag not held is asked of the store
// (one read, nothing loaded): ready when its first load could lease a range (503 with the
// reason when it is not adopted or the store fails; 404 NOTAG when the store lacks it and
// auto-create is off).
func (h *Handler) serveReady(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Has("tag") {
		if h.cfg.NoSegment {
			h.writeHTTPError(w, disabledMode("segment"))
			return
		}
		h.serveReadyTag(w, r, q.Get("tag"))
		return
	}
	var rep readyReport
	switch mode := q.Get("mode"); mode {
	case "":
		rep = h.readyReport()
	case "segment", "snowflake":
		if mode == "segment" && h.cfg.NoSegment || mode == "snowflake" && h.cfg.NoSnowflake {
			h.writeHTTPError(w, disabledMode(mode))
			return
		}
		rep = h.modeReport(mode == "segment", mode == "snowflake")
		if mode == "segment" {
			rep.Snowflake = nil
		}
	default:
		h.writeHTTPError(w, replyError("ERR mode: want segment or snowflake"))
		return
	}
	status := http.StatusOK
	if !rep.Ready {
		status = http.StatusServiceUnavailable
	}
	h.writeJSON(w, status, rep)
}

// serveReadyTag is /readyz?tag=t.
func (h *Handler) serveReadyTag(w http.ResponseWriter, r *http.Request, tag string) {
	health := h.seg.Health()
	rep := readyReport{Alive: true, Modes: []string{"segment"}, Store: health.StoreOK, StoreError: publicStoreError(health.StoreError),
		StoreCause: storeCause(health.StoreError), Warming: health.Warming, Segment: []tagReadiness{}}
	in, err := h.seg.Info(tag)
	switch {
	case err == nil:
		t := readiness(in)
		rep.Segment = append(rep.Segment, t)
		rep.Ready = t.CanServe || health.StoreOK
	case errors.Is(err, segment.ErrUnknownTag):
		lerr := h.seg.CanLoad(r.Context(), tag)
		if errors.Is(lerr, segment.ErrUnknownTag) || errors.Is(lerr, segment.ErrInvalidTag) {
			h.writeHTTPError(w, lerr)
			return
		}
		t := tagReadiness{Tag: tag, NotHeld: true, CanRefill: lerr == nil}
		if lerr != nil {
			code, msg := h.errorCode(lerr)
			if code == "ERR" { // the store's own failure, in the words store_error uses
				msg = publicStoreError(lerr.Error())
			}
			t.Error = code + " " + msg
		}
		rep.Segment = append(rep.Segment, t)
		rep.Ready = t.CanRefill
		health = h.seg.Health() // CanLoad asked the store
		rep.Store, rep.StoreError, rep.StoreCause = health.StoreOK, publicStoreError(health.StoreError), storeCause(health.StoreError)
	default:
		h.writeHTTPError(w, err)
		return
	}
	status := http.StatusOK
	if !rep.Ready {
		status = http.StatusServiceUnavailable
	}
	h.writeJSON(w, status, rep)
}

// readyReport is /readyz without ?tag and ?mode: every held tag, and snowflake, of the
// enabled modes. The leafd_ready metric reads it too, so both always agree.
func (h *Handler) readyReport() readyReport {
	return h.modeReport(!h.cfg.NoSegment, !h.cfg.NoSnowflake)
}

// ready is readyReport().Ready without the list of tags (/metrics and /status at any tag
// count).
func (h *Handler) ready() bool {
	return h.modeReadiness(!h.cfg.NoSegment, !h.cfg.NoSnowflake, false).Ready
}

// modeReport is the readiness of the modes asked for (each enabled).
func (h *Handler) modeReport(seg, snow bool) readyReport {
	return h.modeReadiness(seg, snow, true)
}

// modeReadiness is modeReport, with the held tags listed when withTags.
func (h *Handler) modeReadiness(seg, snow, withTags bool) readyReport {
	rep := readyReport{Ready: true, Alive: true, Modes: []string{}, Segment: []tagReadiness{}}
	if seg {
		health := h.seg.Health()
		rep.Modes = append(rep.Modes, "segment")
		rep.Ready, rep.Store, rep.StoreError, rep.Warming = health.Ready(), health.StoreOK, publicStoreError(health.StoreError), health.Warming
		rep.StoreCause = storeCause(health.StoreError)
		if withTags {
			for _, tag := range h.seg.Tags() {
				in, err := h.seg.Info(tag)
				if err != nil {
					continue // dropped since Tags
				}
				rep.Segment = append(rep.Segment, readiness(in))
			}
		}
	}
	sf := &snowflakeReadiness{WorkerID: -1}
	if snow && h.snow != nil {
		rep.Modes = append(rep.Modes, "snowflake")
		in := h.snow.Info()
		// A lease is held while its bound is ahead of the clock: past it, Next refuses until
		// an extension succeeds.
		sf = &snowflakeReadiness{Enabled: true, HasWorker: in.HasWorker, WorkerID: in.WorkerID,
			HasLease: in.ReservedUntil.After(h.now()), Status: publicStatus(in.Status)}
		rep.Ready = rep.Ready && sf.HasWorker && sf.HasLease
	}
	rep.Snowflake = sf
	return rep
}
