package handlers

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/leafd/leafd/resp"
)

// commands is the command table: every command leafd answers, in one place. mayWait is the
// table's "may block" flag (Redis keeps such facts as command flags): the event-loop server
// runs a command whose flag says it may wait off its loop (Handler.MayBlock, the only reader).
func commands() []*command {
	return []*command{
		{name: "incr", routed: true, arity: 2, write: true, group: "segment", summary: "Return the next segment ID of a tag.", run: cmdIncr, mayWait: waitIncr},
		{name: "incrby", routed: true, arity: 3, write: true, group: "segment", summary: "Reserve n contiguous segment IDs of a tag; return the highest.", run: cmdIncrBy, mayWait: waitIncrBy},
		{name: "ids.segment", routed: true, arity: -2, write: true, group: "segment", summary: "Return count segment IDs of a tag, strictly increasing.", run: cmdIDsSegment, mayWait: waitIDsSegment},
		{name: "ids.next", routed: true, arity: -2, write: true, group: "segment", summary: "Return the next ID of a tag as a bulk string (formatted for a shaped tag), or an array of count.", run: cmdIDsNext, mayWait: waitIDsNext},
		{name: "ids.parse", arity: 3, readonly: true, group: "segment", summary: "Return the counter and period a shaped tag's ID came from.", run: cmdIDsParse, mayWait: waitIDsParse},
		{name: "ids.prune", arity: 3, write: true, group: "segment", summary: "Delete a periodic tag's rows of the periods before the given one.", run: cmdIDsPrune, mayWait: waitAlways},
		{name: "ids.info", arity: 2, readonly: true, group: "segment", summary: "Show a tag's double buffer.", run: cmdIDsInfo, mayWait: waitIDsInfo},
		{name: "ids.tags", arity: -1, readonly: true, group: "segment", summary: "List the tags this server knows.", run: cmdIDsTags},
		{name: "ids.marks", arity: -1, readonly: true, group: "segment", summary: "List every durable mark of this server: tag, highest range end ever granted.", run: cmdIDsMarks, mayWait: waitAlways},
		{name: "ids.create", arity: -2, write: true, group: "segment", summary: "Create a tag in the store.", run: cmdIDsCreate, mayWait: waitAlways},
		{name: "ids.redirect", arity: 2, group: "connection", summary: "ON: answer a command of an ORDERED tag led elsewhere with LEADER host:port instead of forwarding it; OFF (the default).", run: cmdIDsRedirect},
		{name: "ids.retire", arity: 2, write: true, group: "segment", summary: "Stop serving a tag from this server; its IDs are never reissued.", run: cmdIDsRetire},
		{name: "ids.snowflake", arity: -1, write: true, group: "snowflake", summary: "Return one snowflake ID, or an array of count; STRING: as bulk strings.", run: cmdIDsSnowflake, mayWait: waitIDsSnowflake},
		{name: "ids.decode", arity: 2, readonly: true, group: "snowflake", summary: "Decode a snowflake ID with this server's layout.", run: cmdIDsDecode},
		{name: "info", arity: -1, group: "server", summary: "Server information and statistics.", run: cmdInfo},
		{name: "ping", arity: -1, group: "connection", summary: "Ping the server.", run: cmdPing},
		{name: "echo", arity: 2, group: "connection", summary: "Return the given string.", run: cmdEcho},
		{name: "quit", arity: -1, noAuth: true, immediate: true, group: "connection", summary: "Close the connection.", run: cmdQuit},
		{name: "hello", arity: -1, noAuth: true, group: "connection", summary: "Handshake: protocol version, AUTH, SETNAME.", run: cmdHello, mayWait: waitHelloAuth},
		{name: "auth", arity: -2, noAuth: true, group: "connection", summary: "Authenticate the connection.", run: cmdAuth, mayWait: waitAlways},
		{name: "reset", arity: 1, noAuth: true, immediate: true, group: "connection", summary: "Reset the connection.", run: cmdReset},
		{name: "select", arity: 2, group: "connection", summary: "Select database 0 (the only one).", run: cmdSelect},
		{name: "client", arity: -2, group: "connection", summary: "Connection commands: ID, SETNAME, GETNAME, SETINFO, INFO, TRACKING, CACHING, GETREDIR, TRACKINGINFO, NO-EVICT, NO-TOUCH.", run: cmdClient},
		{name: "command", arity: -1, group: "server", summary: "Describe the commands (COUNT, INFO, DOCS).", run: cmdCommand},
		{name: "config", arity: -2, group: "server", summary: "CONFIG GET parameter values.", run: cmdConfig},
		{name: "multi", arity: 1, immediate: true, group: "transactions", summary: "Start a transaction: queue the next commands until EXEC.", run: cmdMulti},
		{name: "exec", arity: 1, immediate: true, group: "transactions", summary: "Run the queued commands back to back; reply with their replies.", run: cmdExec, mayWait: waitExec},
		{name: "discard", arity: 1, immediate: true, group: "transactions", summary: "Drop the queued commands.", run: cmdDiscard},
		{name: "watch", arity: -2, immediate: true, group: "transactions", summary: "Accepted for compatibility: leafd has no keys another client could change.", run: cmdWatch},
		{name: "unwatch", arity: 1, group: "transactions", summary: "Accepted for compatibility (see WATCH).", run: cmdUnwatch},
		{name: "pttl", arity: 2, readonly: true, group: "keyspace", summary: "-1: no key of leafd expires (what client-side caches ask before caching a reply).", run: cmdPTTL},
		{name: "ttl", arity: 2, readonly: true, group: "keyspace", summary: "-1: no key of leafd expires (see PTTL).", run: cmdPTTL},
		{name: "time", arity: 1, group: "server", summary: "Return the server time.", run: cmdTime},
	}
}

// cmdInfo: INFO [section ...] — Redis-style text with server, clients, stats, segment and
// snowflake sections. "all", "everything" and "default" give every section.
func cmdInfo(h *Handler, c *resp.Conn, args [][]byte) error {
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := len(want) == 0 || want["all"] || want["everything"] || want["default"]
	var b strings.Builder
	section := func(name string, fill func(w func(k string, v any))) {
		if !all && !want[name] {
			return
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		fmt.Fprintf(&b, "# %s\r\n", strings.ToUpper(name[:1])+name[1:])
		fill(func(k string, v any) { fmt.Fprintf(&b, "%s:%v\r\n", k, v) })
	}
	now := h.now()
	section("server", func(w func(string, any)) {
		w("redis_version", RedisVersion)
		w("leafd_version", h.cfg.Version)
		w("redis_mode", "standalone")
		w("os", runtime.GOOS+" "+runtime.GOARCH)
		w("go_version", runtime.Version())
		w("process_id", os.Getpid())
		if h.srv != nil {
			up := now.Sub(h.srv.Started())
			w("uptime_in_seconds", int64(up/time.Second))
			w("uptime_in_days", int64(up/(24*time.Hour)))
		}
		w("store", h.cfg.StoreName)
	})
	if h.srv != nil {
		st := h.srv.Stats()
		cfg := h.srv.Config()
		section("clients", func(w func(string, any)) {
			w("connected_clients", st.ConnectedClients)
			w("maxclients", cfg.MaxClients)
		})
		section("stats", func(w func(string, any)) {
			w("total_connections_received", st.TotalConnections)
			w("total_commands_processed", st.TotalCommands)
			w("rejected_connections", st.RejectedConnections)
			w("total_protocol_errors", st.ProtocolErrors)
			w("client_query_buffer_limit_disconnections", st.QueryLimitClosed)
			w("client_output_buffer_limit_disconnections", st.OutputLimitClosed)
			w("acl_access_denied_auth", h.guard.failures.Load())
			w("loop_offloads", st.LoopOffloads)
			w("loop_takeovers", st.LoopTakeovers)
		})
	}
	section("segment", func(w func(string, any)) {
		s := h.seg.Stats()
		w("segment_tags", s.Tags)
		w("segment_ids_issued", s.IDs)
		w("segment_loads_ok", s.LoadsOK)
		w("segment_loads_failed", s.LoadsFailed)
		w("segment_loads_rejected", s.LoadsRejected)
		w("segment_regressions", s.Regressions)
		w("segment_unavailable", s.Unavailable)
		w("segment_unknown_tag", s.UnknownTag)
		w("segment_loads_panicked", s.LoadsPanicked)
		w("segment_load_waits", s.Waits)
		w("segment_warm_loads", s.WarmLoads)
		w("segment_step_capped", s.StepCapped)
		w("segment_remainder_resumed", s.RemainderResumed)
		w("segment_remainder_discarded", s.RemainderDiscarded)
	})
	section("snowflake", func(w func(string, any)) {
		if h.snow == nil {
			w("snowflake_enabled", 0)
			return
		}
		in := h.snow.Info()
		w("snowflake_enabled", 1)
		w("snowflake_worker_id", in.WorkerID)
		w("snowflake_worker_source", in.Source)
		w("snowflake_status", orOK(publicStatus(in.Status)))
		w("snowflake_reserved_until_ms", msOrZero(in.ReservedUntil))
		w("snowflake_start_bound_ms", msOrZero(in.StartBound))
		w("snowflake_epoch_ms", in.Layout.EpochMs())
		w("snowflake_bits", fmt.Sprintf("%d/%d/%d", in.Layout.TimeBits, in.Layout.WorkerBits, in.Layout.SeqBits))
		w("snowflake_ids_issued", in.Issued)
		w("snowflake_last_clock_back_ms", msOrZero(in.LastClockBack))
		w("snowflake_last_clock_back_offset_ms", in.LastClockBackOffset.Milliseconds())
		w("snowflake_clock_back_events", in.ClockBackEvents)
		w("snowflake_clock_back_errors", in.ClockBackErrors)
		w("snowflake_sequence_waits", in.SequenceWaits)
		w("snowflake_lease_extensions", in.Extensions)
		w("snowflake_lease_extend_failures", in.ExtendFailures)
		if l := in.Lease; l != nil { // a leased worker id (the MySQL source)
			w("snowflake_worker_lease_ms", l.Lease.Milliseconds())
			w("snowflake_worker_lease_deadline_ms", msOrZero(l.Deadline))
			w("snowflake_worker_last_renewal_ms", msOrZero(l.LastRenewal))
			w("snowflake_worker_acquisitions", l.Acquisitions)
			w("snowflake_worker_renewals", l.Renewals)
			w("snowflake_worker_renewal_failures", l.RenewalFailures)
			w("snowflake_worker_self_fences", l.SelfFences)
		}
	})
	c.WriteVerbatim(b.String())
	return nil
}

func orOK(s string) string {
	if s == "" {
		return "ok"
	}
	return strings.ReplaceAll(s, "\n", " ")
}

func msOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
