package admin

import (
	"time"

	"github.com/leafd/leafd/segment"
	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes the cores' and the server's own counters to Prometheus. It reads them at
// scrape time (segment.Stats, Info per held tag, snowflake.Info, resp.Server.Stats, the
// command layer's counters), so the ID paths carry no metrics work of their own.
type collector struct {
	a *Server
}

var _ prometheus.Collector = (*collector)(nil)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("leafd_"+name, help, labels, nil)
}

var (
	descSegIDs          = desc("segment_ids_total", "Segment IDs handed out (an estimate: unused INCRBY remainders are subtracted).")
	descSegLoads        = desc("segment_loads_total", "Segment range loads from the store, by result (ok, failed, rejected).", "result")
	descSegRegressions  = desc("segment_regressions_total", "Ranges refused by the regression guard.")
	descSegUnavailable  = desc("segment_unavailable_total", "Requests failed with UNAVAILABLE.")
	descSegUnknown      = desc("segment_unknown_tag_total", "Requests failed with NOTAG.")
	descSegPanics       = desc("segment_load_panics_total", "Segment loads that panicked (recovered; counted as failed loads too).")
	descSegWaits        = desc("segment_load_waits_total", "Requests that found no segment ready and waited for a load from the store.")
	descSegStepCapped   = desc("segment_step_capped_total", "Loads whose demand needed a larger segment than --max-step to outlast the next load (requests wait at switches; raise --max-step).")
	descSegWarmLoads    = desc("segment_warm_loads_total", "First segments loaded by the warm start (tags served before the restart).")
	descSegTags         = desc("segment_tags", "Tags held by this instance.")
	descSegRemainder    = desc("segment_remainder_ids_total", "IDs of the previous graceful shutdown's remainder file, by outcome (resumed: served first; discarded: refused by a fence, a gap).", "outcome")
	descTagsExported    = desc("segment_tags_exported", "Tags with per-tag series in this scrape (at most --metrics-max-tags: those that cannot serve, failing, running out, then the busiest).")
	descTagsCannotServe = desc("segment_tags_cannot_serve", "Held tags with no ID left in memory (no current IDs, no next segment).")
	descTagsFailing     = desc("segment_tags_failing", "Held tags whose latest load failed.")
	descTagsNoNext      = desc("segment_tags_no_next", "Held tags without a loaded next segment.")
	descTagsLoading     = desc("segment_tags_loading", "Held tags with a load queued or running.")
	descSegRemaining    = desc("segment_remaining", "IDs left in memory over every held tag (current and next segments).")
	descTagRemaining    = desc("segment_tag_remaining", "IDs left in the tag's current and next segments.", "tag")
	descTagStep         = desc("segment_tag_step", "The tag's current dynamic step.", "tag")
	descTagCanServe     = desc("segment_tag_can_serve", "1 when the tag's current segment has IDs left or the next one is ready.", "tag")
	descTagCanRefill    = desc("segment_tag_can_refill", "1 when the tag's latest load did not fail.", "tag")
	descTagIDs          = desc("segment_tag_ids_total", "Segment IDs handed out for the tag by this instance (an estimate, as leafd_segment_ids_total).", "tag")
	descTagCurRemain    = desc("segment_tag_current_remaining", "IDs left in the tag's current segment only.", "tag")
	descTagNextReady    = desc("segment_tag_next_ready", "1 when the tag's next segment is loaded.", "tag")
	descTagLoading      = desc("segment_tag_loading", "1 while a load of the tag's next segment is queued or running.", "tag")
	descSegLoadSeconds  = desc("segment_load_duration_seconds", "Time of segment loads from the store (failed ones included), mark checks included.")
	descCmdErrors       = desc("command_errors_total", "Error replies of commands (RESP and HTTP API) by code; unknown-command, arity and NOAUTH replies are not counted.", "code")
	descReady           = desc("ready", "1 when /readyz answers 200 (the instance can serve), 0 otherwise.")
	descCmdDuration     = desc("command_duration_seconds", "Server-side latency of RESP commands by command: from the read of the batch of pipelined commands to its replies written.", "command")

	descSnowEnabled    = desc("snowflake_enabled", "1 when snowflake mode is on.")
	descSnowHasWorker  = desc("snowflake_has_worker", "1 when the instance holds a worker id.")
	descSnowWorkerID   = desc("snowflake_worker_id", "The worker id (-1 without one).")
	descSnowReserved   = desc("snowflake_reserved_until_seconds", "The persisted time bound, Unix seconds (0 without a lease).")
	descSnowIssued     = desc("snowflake_ids_total", "Snowflake IDs issued.")
	descSnowCBEvents   = desc("snowflake_clock_back_events_total", "Times the clock was seen moving back.")
	descSnowCBErrors   = desc("snowflake_clock_back_errors_total", "Requests refused with CLOCKBACK.")
	descSnowSeqWaits   = desc("snowflake_sequence_waits_total", "Waits for the next millisecond after the sequence ran out.")
	descSnowExtensions = desc("snowflake_lease_extensions_total", "Successful time-lease extensions.")
	descSnowExtFails   = desc("snowflake_lease_extend_failures_total", "Failed time-lease extensions.")

	// A leased worker id (the MySQL source); absent for the other sources.
	descWLDeadline  = desc("snowflake_worker_lease_deadline_seconds", "Unix seconds at which the worker-id lease runs out unless renewed (the self-fence).")
	descWLRenewal   = desc("snowflake_worker_lease_last_renewal_seconds", "Unix seconds of the send of the last confirmed lease renewal.")
	descWLLease     = desc("snowflake_worker_lease_seconds", "The worker-id lease length (--worker-lease).")
	descWLAcquire   = desc("snowflake_worker_acquisitions_total", "Worker-id acquisitions (first ones and re-acquisitions).")
	descWLRenewals  = desc("snowflake_worker_renewals_total", "Confirmed worker-id lease renewals.")
	descWLRenewFail = desc("snowflake_worker_renewal_failures_total", "Worker-id lease renewals that failed or whose outcome is unknown.")
	descWLFences    = desc("snowflake_worker_self_fences_total", "Times the worker-id lease ran out before it was renewed (issuing stopped until re-acquired).")

	descConnected   = desc("connected_clients", "RESP connections open.")
	descConnections = desc("connections_total", "RESP connections accepted.")
	descRejected    = desc("rejected_connections_total", "RESP connections refused by --maxclients.")
	descCommands    = desc("commands_total", "RESP commands processed.")
	descProtoErrors = desc("protocol_errors_total", "RESP connections closed for a protocol error.")
	descOutputLimit = desc("output_limit_disconnections_total", "RESP connections closed for a reply over --max-output-buffer.")
	descQueryLimit  = desc("query_limit_disconnections_total", "RESP connections closed for input over --max-query-buffer.")
	descAuthFails   = desc("auth_failures_total", "Failed authentications, by port (resp: AUTH and HELLO AUTH; http: a missing or wrong token).", "port")
	descOffloads    = desc("loop_offloads_total", "RESP commands an event loop ran off the loop because the command table says they may wait.")
	descTakeovers   = desc("loop_takeovers_total", "Event loops the watchdog handed to a new goroutine because a command waited on the loop without its table flag saying so (each stalled the loop's other clients 10-20 ms).")
)

// Describe sends every descriptor.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descSegIDs, descSegLoads, descSegRegressions, descSegUnavailable, descSegUnknown, descSegTags,
		descSegPanics, descSegWaits, descSegWarmLoads, descSegStepCapped, descSegRemainder,
		descTagsExported, descTagsCannotServe, descTagsFailing, descTagsNoNext, descTagsLoading, descSegRemaining,
		descTagRemaining, descTagStep, descTagCanServe, descTagCanRefill,
		descTagIDs, descTagCurRemain, descTagNextReady, descTagLoading, descSegLoadSeconds, descReady, descCmdErrors,
		descCmdDuration,
		descSnowEnabled, descSnowHasWorker, descSnowWorkerID, descSnowReserved, descSnowIssued,
		descSnowCBEvents, descSnowCBErrors, descSnowSeqWaits, descSnowExtensions, descSnowExtFails,
		descWLDeadline, descWLRenewal, descWLLease, descWLAcquire, descWLRenewals, descWLRenewFail, descWLFences,
		descConnected, descConnections, descRejected, descCommands, descProtoErrors,
		descOutputLimit, descQueryLimit, descAuthFails, descOffloads, descTakeovers,
		descOrdForwarded, descOrdForwardErrs, descOrdTryAgain, descOrdLeaderHere,
	} {
		ch <- d
	}
}

// Collect reads the counters now.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	a := c.a
	a.h.EachLatency(func(command string, count uint64, sum float64, buckets map[float64]uint64) {
		ch <- prometheus.MustNewConstHistogram(descCmdDuration, count, sum, buckets, command)
	})

	st := a.seg.Stats()
	counter(descSegIDs, float64(st.IDs))
	counter(descSegLoads, float64(st.LoadsOK), "ok")
	counter(descSegLoads, float64(st.LoadsFailed), "failed")
	counter(descSegLoads, float64(st.LoadsRejected), "rejected")
	counter(descSegRegressions, float64(st.Regressions))
	counter(descSegUnavailable, float64(st.Unavailable))
	counter(descSegUnknown, float64(st.UnknownTag))
	counter(descSegPanics, float64(st.LoadsPanicked))
	counter(descSegWaits, float64(st.Waits))
	counter(descSegWarmLoads, float64(st.WarmLoads))
	counter(descSegStepCapped, float64(st.StepCapped))
	counter(descSegRemainder, float64(st.RemainderResumed), "resumed")
	counter(descSegRemainder, float64(st.RemainderDiscarded), "discarded")
	gauge(descSegTags, float64(st.Tags))
	buckets := make(map[float64]uint64, len(segment.LoadBuckets))
	for i, le := range segment.LoadBuckets {
		buckets[le] = st.LoadSeconds.Counts[i]
	}
	ch <- prometheus.MustNewConstHistogram(descSegLoadSeconds, st.LoadSeconds.Count, st.LoadSeconds.Sum, buckets)
	gauge(descReady, float64(b2i(a.ready())))
	a.h.EachErrorCount(func(code string, n uint64) { counter(descCmdErrors, float64(n), code) })
	a.collectOrdered(counter, gauge)
	infos, tot := pickTags(a.seg, a.cfg.MetricsMaxTags)
	gauge(descTagsExported, float64(tot.exported))
	gauge(descTagsCannotServe, float64(tot.cannotServe))
	gauge(descTagsFailing, float64(tot.failing))
	gauge(descTagsNoNext, float64(tot.noNext))
	gauge(descTagsLoading, float64(tot.loading))
	gauge(descSegRemaining, float64(tot.remaining))
	for _, in := range infos {
		tag := in.Tag
		t := readiness(in)
		gauge(descTagRemaining, float64(in.Current.Remaining+in.Next.Remaining), tag)
		gauge(descTagStep, float64(in.Step), tag)
		gauge(descTagCanServe, float64(b2i(t.CanServe)), tag)
		gauge(descTagCanRefill, float64(b2i(t.CanRefill)), tag)
		counter(descTagIDs, float64(in.Issued), tag)
		gauge(descTagCurRemain, float64(in.Current.Remaining), tag)
		gauge(descTagNextReady, float64(b2i(in.NextReady)), tag)
		gauge(descTagLoading, float64(b2i(in.Loading)), tag)
	}

	if a.snow == nil {
		gauge(descSnowEnabled, 0)
	} else {
		in := a.snow.Info()
		gauge(descSnowEnabled, 1)
		gauge(descSnowHasWorker, float64(b2i(in.HasWorker)))
		gauge(descSnowWorkerID, float64(in.WorkerID))
		reserved := 0.0
		if !in.ReservedUntil.IsZero() {
			reserved = float64(in.ReservedUntil.UnixMilli()) / 1000
		}
		gauge(descSnowReserved, reserved)
		counter(descSnowIssued, float64(in.Issued))
		counter(descSnowCBEvents, float64(in.ClockBackEvents))
		counter(descSnowCBErrors, float64(in.ClockBackErrors))
		counter(descSnowSeqWaits, float64(in.SequenceWaits))
		counter(descSnowExtensions, float64(in.Extensions))
		counter(descSnowExtFails, float64(in.ExtendFailures))
		if l := in.Lease; l != nil {
			gauge(descWLDeadline, unixSeconds(l.Deadline))
			gauge(descWLRenewal, unixSeconds(l.LastRenewal))
			gauge(descWLLease, l.Lease.Seconds())
			counter(descWLAcquire, float64(l.Acquisitions))
			counter(descWLRenewals, float64(l.Renewals))
			counter(descWLRenewFail, float64(l.RenewalFailures))
			counter(descWLFences, float64(l.SelfFences))
		}
	}

	if srv := a.h.Server(); srv != nil {
		rs := srv.Stats()
		gauge(descConnected, float64(rs.ConnectedClients))
		counter(descConnections, float64(rs.TotalConnections))
		counter(descRejected, float64(rs.RejectedConnections))
		counter(descCommands, float64(rs.TotalCommands))
		counter(descProtoErrors, float64(rs.ProtocolErrors))
		counter(descOutputLimit, float64(rs.OutputLimitClosed))
		counter(descQueryLimit, float64(rs.QueryLimitClosed))
		counter(descOffloads, float64(rs.LoopOffloads))
		counter(descTakeovers, float64(rs.LoopTakeovers))
	}
	respFails, httpFails := a.h.AuthFailures()
	counter(descAuthFails, float64(respFails), "resp")
	counter(descAuthFails, float64(httpFails), "http")
}

var (
	descOrdForwarded   = desc("ordered_forwarded_total", "Requests of ORDERED tags forwarded to their leader and answered.", "tag")
	descOrdForwardErrs = desc("ordered_forward_errors_total", "Requests of ORDERED tags whose leader could not be reached (answered UNAVAILABLE).", "tag")
	descOrdTryAgain    = desc("ordered_tryagain_total", "Requests of ORDERED tags answered TRYAGAIN (no leader, or a lease lost during the request).")
	descOrdLeaderHere  = desc("ordered_leader", "1 for the ORDERED tag's leader as this instance sees it.", "tag", "leader")
)

func (a *Server) collectOrdered(counter, gauge func(d *prometheus.Desc, v float64, labels ...string)) {
	ord, _ := a.h.Ordered()
	if ord == nil {
		return
	}
	counter(descOrdTryAgain, float64(ord.TryAgain.Load()))
	for _, s := range ord.Statuses() {
		counter(descOrdForwarded, float64(s.Forwarded), s.Tag)
		counter(descOrdForwardErrs, float64(s.ForwardErrors), s.Tag)
		gauge(descOrdLeaderHere, 1, s.Tag, s.Leader)
	}
}

// unixSeconds is t in Unix seconds (0 for the zero time).
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMilli()) / 1000
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
