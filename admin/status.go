package admin

// The status page: a static HTML page (status.html, embedded) that polls /status.json every
// second and draws it. Everything it needs is in the binary; the page loads nothing else.

import (
	"cmp"
	_ "embed"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/internal/storeerr"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/snowflake"
)

//go:embed status.html
var statusHTML []byte

// serveStatus sends the page. Its script builds the DOM with textContent only, so tag names
// and error texts are never interpreted as markup.
func (a *Server) serveStatus(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// The page runs its own inline script and fetches only its own origin.
	w.Header().Set("Content-Security-Policy",
		"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	_, _ = w.Write(statusHTML)
}

// statusSegment is one segment of a tag's double buffer in /status.json.
type statusSegment struct {
	Loaded    bool  `json:"loaded"`
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
	Next      int64 `json:"next"`
	Remaining int64 `json:"remaining"`
}

// statusLoad is one of a tag's last loads.
type statusLoad struct {
	AtMs       int64   `json:"at_ms"`
	DurationMs float64 `json:"duration_ms"`
	Start      int64   `json:"start"`
	End        int64   `json:"end"`
	Error      string  `json:"error,omitempty"`
}

// statusTag is one held tag.
type statusTag struct {
	Tag          string        `json:"tag"`
	Current      statusSegment `json:"current"`
	Next         statusSegment `json:"next"`
	NextReady    bool          `json:"next_ready"`
	Loading      bool          `json:"loading"`
	InitOK       bool          `json:"init_ok"`
	Step         int64         `json:"step"`
	MinStep      int64         `json:"min_step"`
	Mark         int64         `json:"mark"`
	Issued       int64         `json:"issued"`
	IDsPerSec    *float64      `json:"ids_per_sec"` // null until a second request has seen the tag
	LastRefillMs int64         `json:"last_refill_ms"`
	LastError    string        `json:"last_error,omitempty"`
	Loads        []statusLoad  `json:"loads"`
}

// statusSnowflake is the snowflake worker in /status.json.
type statusSnowflake struct {
	HasWorker             bool     `json:"has_worker"`
	WorkerID              int64    `json:"worker_id"`
	Source                string   `json:"source"`
	Status                string   `json:"status,omitempty"`
	StartBoundMs          int64    `json:"start_bound_ms"`
	ReservedUntilMs       int64    `json:"reserved_until_ms"`
	Layout                string   `json:"layout"`
	EpochMs               int64    `json:"epoch_ms"`
	Issued                uint64   `json:"issued"`
	IDsPerSec             *float64 `json:"ids_per_sec"`
	SequenceWaits         uint64   `json:"sequence_waits"`
	ClockBackEvents       uint64   `json:"clock_back_events"`
	ClockBackErrors       uint64   `json:"clock_back_errors"`
	LastClockBackMs       int64    `json:"last_clock_back_ms"`
	LastClockBackOffsetMs float64  `json:"last_clock_back_offset_ms"`
	Extensions            uint64   `json:"lease_extensions"`
	ExtendFailures        uint64   `json:"lease_extend_failures"`

	WorkerLease *statusWorkerLease `json:"worker_lease,omitempty"` // a leased worker id (MySQL source)
}

// statusWorkerLease is the worker-id lease of a leased source in /status.json.
type statusWorkerLease struct {
	LeaseMs         int64  `json:"lease_ms"`
	DeadlineMs      int64  `json:"deadline_ms"`
	LastRenewalMs   int64  `json:"last_renewal_ms"`
	Acquisitions    uint64 `json:"acquisitions"`
	Renewals        uint64 `json:"renewals"`
	RenewalFailures uint64 `json:"renewal_failures"`
	SelfFences      uint64 `json:"self_fences"`
}

// statusReport is the body of /status.json. Times are Unix milliseconds (0: never); now_ms is
// the server's clock, which the page uses for rates so that the browser's clock does not
// matter. Tags holds at most ?limit tags (default statusDefaultLimit, at most
// statusMaxLimit), those matching ?filter (a substring), in the order ?sort asks for:
// "runout" (default: the closest to running out first), "busy" (the most IDs/s first) or
// "name"; Matched counts every match and Totals every held tag, so the reply stays small at
// any tag count.
type statusReport struct {
	Version   string           `json:"version"`
	Store     string           `json:"store"`
	NowMs     int64            `json:"now_ms"`
	Ready     bool             `json:"ready"`
	Totals    statusTotals     `json:"totals"`
	Sort      string           `json:"sort"`
	Filter    string           `json:"filter"`
	Matched   int              `json:"matched"`
	Tags      []statusTag      `json:"tags"`
	Snowflake *statusSnowflake `json:"snowflake"` // null when snowflake mode is off
	// StoreHealth is the segment store's latest answer (null when segment mode is off).
	StoreHealth *statusStore   `json:"store_health"`
	Ordered     *statusOrdered `json:"ordered"` // null without ordered tags (orderedStatus)
}

// statusStore is the store panel: whether the latest store call was answered and, when it
// was not, its cause (internal/storeerr's class) and what failed, in words.
type statusStore struct {
	OK    bool   `json:"ok"`
	Cause string `json:"cause,omitempty"`
	Error string `json:"error,omitempty"`
}

// statusTotals sums every held tag.
type statusTotals struct {
	Tags        int      `json:"tags"`
	Issued      int64    `json:"issued"`
	IDsPerSec   *float64 `json:"ids_per_sec"`  // null until rates are known
	CannotServe int      `json:"cannot_serve"` // no ID left in memory
	NoNext      int      `json:"no_next"`      // current segment only, next not loaded
	Loading     int      `json:"loading"`
	Failing     int      `json:"failing"` // last load failed
}

const (
	statusDefaultLimit = 100
	statusMaxLimit     = 1000
)

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func statusSeg(s segment.SegmentInfo) statusSegment {
	return statusSegment{Loaded: s.Loaded, Start: s.Start, End: s.End, Next: s.Next, Remaining: s.Remaining}
}

// serveStatusJSON reports what the page draws, from memory (the store is never queried; the
// mark stands for max_id as this instance last saw it).
func (a *Server) serveStatusJSON(w http.ResponseWriter, r *http.Request) {
	now := a.now()
	q := r.URL.Query()
	limit := statusDefaultLimit
	if v, err := strconv.Atoi(q.Get("limit")); err == nil && v >= 0 {
		limit = min(v, statusMaxLimit)
	}
	order := q.Get("sort")
	if order != "busy" && order != "name" {
		order = "runout"
	}
	filter := q.Get("filter")
	rep := statusReport{Version: a.facts.Version, Store: a.facts.StoreName, NowMs: now.UnixMilli(),
		Ready: a.ready(), Sort: order, Filter: filter, Tags: []statusTag{}}
	tags := a.seg.Tags()
	infos := make([]segment.Info, 0, len(tags))
	issued := make(map[string]int64, len(tags))
	for _, tag := range tags {
		in, err := a.seg.Info(tag)
		if err != nil {
			continue // dropped since Tags
		}
		infos = append(infos, in)
		issued[in.Tag] = in.Issued
	}
	var snowIssued uint64
	var snowInfo snowflake.Info
	if a.snow != nil {
		snowInfo = a.snow.Info()
		snowIssued = snowInfo.Issued
	}
	tagRates, snowRate, rated := a.rates.rates(now, issued, snowIssued)

	tot := &rep.Totals
	var sum float64
	matched := make([]int, 0, len(infos))
	for i, in := range infos {
		tot.Tags++
		tot.Issued += in.Issued
		sum += tagRates[in.Tag]
		if in.Current.Remaining == 0 && in.Next.Remaining == 0 {
			tot.CannotServe++
		} else if !in.NextReady {
			tot.NoNext++
		}
		if in.Loading {
			tot.Loading++
		}
		if in.LastError != "" {
			tot.Failing++
		}
		if filter == "" || strings.Contains(in.Tag, filter) {
			matched = append(matched, i)
		}
	}
	if rated {
		tot.IDsPerSec = &sum
	}
	rep.Matched = len(matched)
	// secondsLeft: how long the tag's IDs in memory last at its rate (+Inf when idle or the
	// rate is unknown); a tag with none left comes first whatever its rate.
	secondsLeft := func(in segment.Info) float64 {
		left := in.Current.Remaining + in.Next.Remaining
		if left == 0 {
			return -1
		}
		if r := tagRates[in.Tag]; r > 0 {
			return float64(left) / r
		}
		return math.Inf(1)
	}
	slices.SortStableFunc(matched, func(a, b int) int {
		x, y := infos[a], infos[b]
		switch order {
		case "busy":
			if c := cmp.Compare(tagRates[y.Tag], tagRates[x.Tag]); c != 0 {
				return c
			}
			if c := cmp.Compare(y.Issued, x.Issued); c != 0 {
				return c
			}
		case "runout":
			if c := cmp.Compare(secondsLeft(x), secondsLeft(y)); c != 0 {
				return c
			}
			if c := cmp.Compare(x.Current.Remaining+x.Next.Remaining, y.Current.Remaining+y.Next.Remaining); c != 0 {
				return c
			}
		}
		return strings.Compare(x.Tag, y.Tag) // Tags is sorted: keeps name order
	})
	for _, i := range matched[:min(limit, len(matched))] {
		in := infos[i]
		t := statusTag{Tag: in.Tag, Current: statusSeg(in.Current), Next: statusSeg(in.Next),
			NextReady: in.NextReady, Loading: in.Loading, InitOK: in.InitOK, Step: in.Step,
			MinStep: in.MinStep, Mark: in.Mark, Issued: in.Issued, LastRefillMs: unixMs(in.LastRefill),
			LastError: handlers.PublicLoadError(in.LastError), Loads: make([]statusLoad, 0, len(in.Loads))}
		for _, l := range in.Loads {
			t.Loads = append(t.Loads, statusLoad{AtMs: unixMs(l.At),
				DurationMs: float64(l.Duration.Microseconds()) / 1000, Start: l.Start, End: l.End, Error: handlers.PublicLoadError(l.Error)})
		}
		if r, seen := tagRates[in.Tag]; seen {
			t.IDsPerSec = &r
		}
		rep.Tags = append(rep.Tags, t)
	}
	if a.snow != nil {
		in := snowInfo
		rep.Snowflake = &statusSnowflake{
			HasWorker: in.HasWorker, WorkerID: in.WorkerID, Source: in.Source, Status: handlers.PublicStatus(in.Status),
			StartBoundMs: unixMs(in.StartBound), ReservedUntilMs: unixMs(in.ReservedUntil),
			Layout:  fmt.Sprintf("%d/%d/%d", in.Layout.TimeBits, in.Layout.WorkerBits, in.Layout.SeqBits),
			EpochMs: unixMs(in.Layout.Epoch), Issued: in.Issued, SequenceWaits: in.SequenceWaits,
			ClockBackEvents: in.ClockBackEvents, ClockBackErrors: in.ClockBackErrors,
			LastClockBackMs:       unixMs(in.LastClockBack),
			LastClockBackOffsetMs: float64(in.LastClockBackOffset.Microseconds()) / 1000,
			Extensions:            in.Extensions, ExtendFailures: in.ExtendFailures,
		}
		if l := in.Lease; l != nil {
			rep.Snowflake.WorkerLease = &statusWorkerLease{LeaseMs: l.Lease.Milliseconds(), DeadlineMs: unixMs(l.Deadline),
				LastRenewalMs: unixMs(l.LastRenewal), Acquisitions: l.Acquisitions, Renewals: l.Renewals,
				RenewalFailures: l.RenewalFailures, SelfFences: l.SelfFences}
		}
		if rated {
			rep.Snowflake.IDsPerSec = &snowRate
		}
	}
	if !a.facts.NoSegment {
		health := a.seg.Health()
		rep.StoreHealth = &statusStore{OK: health.StoreOK, Cause: storeCause(health.StoreError), Error: handlers.PublicStoreError(health.StoreError)}
	}
	w.Header().Set("Cache-Control", "no-store")
	rep.Ordered = a.orderedStatus()
	a.writeJSON(w, http.StatusOK, rep)
}

// storeCause is the cause class of a store error kept as text ("" when none is known).
func storeCause(s string) string { return storeerr.ClassifyText(s).String() }

// statusOrdered is /status.json's "ordered": the forwarding counters and each ordered tag's
// leader as this instance sees it.
type statusOrdered struct {
	Local         bool   `json:"local"` // the embedded store: every ordered tag is led here
	Holder        string `json:"advertise_addr"`
	Forwarded     int64  `json:"forwarded"`
	ForwardErrors int64  `json:"forward_errors"`
	TryAgain      int64  `json:"tryagain"`
	// ForwardWrites and ForwardRequests: the writes to leaders and the requests they carried
	// (a follower's pipelines and many clients' calls share writes).
	ForwardWrites   int64              `json:"forward_writes"`
	ForwardRequests int64              `json:"forward_requests"`
	Tags            []statusOrderedTag `json:"tags"`
}

type statusOrderedTag struct {
	Tag              string `json:"tag"`
	Leader           string `json:"leader"`
	LeaderHere       bool   `json:"leader_here"`
	Epoch            int64  `json:"epoch"`
	LeaseRemainingMs int64  `json:"lease_remaining_ms"`
	Forwarded        int64  `json:"forwarded"`
	ForwardErrors    int64  `json:"forward_errors"`
	LastError        string `json:"last_error,omitempty"`
}

func (a *Server) orderedStatus() *statusOrdered {
	ord, fwd := a.h.Ordered()
	if ord == nil {
		return nil
	}
	so := &statusOrdered{Local: ord.Local(), Holder: ord.Holder(), Forwarded: ord.Forwarded.Load(),
		ForwardErrors: ord.ForwardErrors.Load(), TryAgain: ord.TryAgain.Load(), Tags: []statusOrderedTag{}}
	if fwd != nil {
		so.ForwardWrites, so.ForwardRequests = fwd.Writes(), fwd.Requests()
	}
	for _, s := range ord.Statuses() {
		so.Tags = append(so.Tags, statusOrderedTag{Tag: s.Tag, Leader: s.Leader, LeaderHere: s.Here, Epoch: s.Epoch,
			LeaseRemainingMs: s.Remaining.Milliseconds(), Forwarded: s.Forwarded, ForwardErrors: s.ForwardErrors, LastError: s.LastError})
	}
	return so
}
