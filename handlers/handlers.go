// Package handlers maps RESP commands to leafd's ID cores. It owns the command table, the
// arity and authentication checks, and the one place where an error becomes a code and a
// message (errorCode), used by the RESP replies and by the admin port (package admin, through
// surface.go). It knows RESP only through resp.Conn's reply writers, and serves no HTTP.
package handlers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/leafd/leafd/ids"
	"github.com/leafd/leafd/internal/errcode"
	"github.com/leafd/leafd/internal/limits"
	"github.com/leafd/leafd/internal/quietlog"
	"github.com/leafd/leafd/internal/storeerr"
	"github.com/leafd/leafd/ordered"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/shape"
	"github.com/leafd/leafd/snowflake"
)

// Segments is what the segment commands need from the segment core: what the router takes
// (ids.Segments) and the marks, stats and health the commands report.
type Segments interface {
	ids.Segments
	Marks() ([]segment.Mark, error)
	// MarksAfter lists up to n marks whose tag sorts after the given one (a page of Marks).
	MarksAfter(after string, n int) ([]segment.Mark, error)
	Stats() segment.Stats
	Health() segment.Health
	// CanLoad reports whether a tag not held could be loaded now (one store read).
	CanLoad(ctx context.Context, tag string) error
}

// Snowflakes is what the snowflake commands need from the snowflake core.
type Snowflakes interface {
	Next() (int64, error)
	AppendIDs(dst []int64, n int) ([]int64, error)
	Decode(id int64) snowflake.Parts
	Info() snowflake.Info
	// MayWait reports whether n IDs would wait now (for the next millisecond, a clock step
	// back or a lease extension): IDS.SNOWFLAKE's mayWait flag.
	MayWait(n int64) bool
}

// RedisVersion is the Redis version leafd claims in HELLO's "version" and INFO's
// redis_version: the release whose connection commands it answers (CLIENT SETINFO and
// CLIENT NO-TOUCH are 7.2's). Clients read it to pick features (rueidis takes the major
// version from HELLO). leafd's own version is HELLO's "leafd_version" and INFO's
// leafd_version.
const RedisVersion = "7.2.0"

// DefaultMaxBatch is the largest count of one IDS.SEGMENT or IDS.SNOWFLAKE by default: the
// documented default of --max-batch (README), which cmd/leafd also hands to the segment and
// snowflake generators (internal/limits, shared with their DefaultConfig).
const DefaultMaxBatch = limits.MaxBatch

// Config configures the command layer. A zero field takes its default from DefaultConfig.
type Config struct {
	// MaxBatch bounds the count of IDS.SEGMENT and IDS.SNOWFLAKE (default DefaultMaxBatch).
	MaxBatch int
	// MaxStep bounds IDS.CREATE's STEP (--max-step; zero: segment's default).
	MaxStep int64
	// DisableCreate refuses IDS.CREATE with NOPERM (lock tag creation down to the operator).
	DisableCreate bool
	// NoSegment and NoSnowflake turn a mode off (leafd's --modes): its commands and HTTP
	// endpoints answer DISABLED, and readiness leaves it out.
	NoSegment   bool
	NoSnowflake bool
	// CreateTimeout bounds the store call of IDS.CREATE (default 5s).
	CreateTimeout time.Duration
	// Version is leafd's own version, reported as leafd_version by INFO and HELLO.
	Version string
	// StoreName and WorkerSource describe the configuration in INFO.
	StoreName string
	// ConfigValues are the values CONFIG GET reports (name -> value).
	ConfigValues map[string]string
	// AuthMaxFailures disconnects a client after this many failed AUTHs (default 10).
	AuthMaxFailures int
	// AuthFailRate and AuthFailBurst pace failed AUTHs across all connections: after a
	// burst, AuthFailRate per second (defaults 100 and 20; see authguard.go).
	AuthFailRate  int
	AuthFailBurst int
	// Shapes stores the ID shapes of shaped tags (nil: IDS.CREATE FORMAT/RESET/OPAQUE is
	// refused); IDKey is the --id-key-file AES key of opaque tags (nil: none). The key is
	// never logged nor reported by CONFIG GET.
	Shapes segment.Shapes
	IDKey  []byte
	// Ordered serves the ORDERED tags (nil: IDS.CREATE ... ORDERED is refused) and Forward
	// carries their requests to the leader (nil with a local Ordered: the embedded store).
	Ordered *ordered.Manager
	Forward *ordered.Forwarder
	// PeriodNow is the clock that picks a shaped tag's period (default Now); --period-clock-offset
	// shifts it for drills across a simulated midnight. Uniqueness does not depend on it.
	PeriodNow func() time.Time
	// PeriodLead: within this time before a period's end, the first request of a shaped tag
	// creates the next period's row and loads its first segment in the background, so that
	// at the boundary the tag serves from memory. Default 30s; negative turns it off.
	PeriodLead time.Duration
	// Now is the clock (default time.Now); Sleep waits (default time.Sleep).
	Now   func() time.Time
	Sleep func(time.Duration)
}

// Handler runs leafd's commands; it implements resp.Handler. Safe for concurrent use: every
// connection calls it from its own goroutine.
type Handler struct {
	cfg     Config
	seg     Segments
	snow    Snowflakes // nil when snowflake mode is off
	srv     *resp.Server
	log     *zap.Logger
	quiet   *quietlog.Log       // store errors of commands: one line per kind, then a summary per 10 s
	table   map[string]*command // by lower-case name: COMMAND's listings
	byName  cmdIndex            // every command of the table (lookup)
	waiters cmdIndex            // the commands with a mayWait flag (MayBlock's look-up)
	now     func() time.Time
	errs    errcode.Counts // error replies by code (leafd_command_errors_total)
	guard   authGuard
	lat     []latency // by command index (latency.go)
	// ids routes the ID commands by tag kind: plain, shaped, ordered (package ids).
	ids *ids.Router
	ord *ordered.Manager   // nil: no ordered tags (their status and metrics)
	fwd *ordered.Forwarder // nil with a local ord (forwarding pipelines, orderedfwd.go)
}

// DefaultConfig returns every default of the command layer: the one place they are written
// (cmd/leafd's flags take theirs from here).
func DefaultConfig() Config {
	return Config{
		MaxBatch:        DefaultMaxBatch,
		CreateTimeout:   5 * time.Second,
		Version:         "dev",
		AuthMaxFailures: DefaultAuthMaxFailures,
		AuthFailRate:    DefaultAuthFailRate,
		AuthFailBurst:   DefaultAuthFailBurst,
		Now:             time.Now,
		Sleep:           time.Sleep,
	}
}

// Validate reports every invalid field, joined into one error. Zero fields are valid (they
// mean the default).
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxBatch", c.MaxBatch}, {"AuthMaxFailures", c.AuthMaxFailures}, {"AuthFailRate", c.AuthFailRate}, {"AuthFailBurst", c.AuthFailBurst}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("handlers: %s %d: must not be negative", f.name, f.v))
		}
	}
	if c.CreateTimeout < 0 {
		errs = append(errs, fmt.Errorf("handlers: CreateTimeout %v: must not be negative", c.CreateTimeout))
	}
	return errors.Join(errs...)
}

// withDefaults fills the zero (or negative) fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBatch <= 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.CreateTimeout <= 0 {
		c.CreateTimeout = d.CreateTimeout
	}
	if c.Version == "" {
		c.Version = d.Version
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	if c.Sleep == nil {
		c.Sleep = d.Sleep
	}
	if c.PeriodNow == nil {
		c.PeriodNow = c.Now
	}
	if c.PeriodLead == 0 {
		c.PeriodLead = 30 * time.Second
	}
	if c.AuthMaxFailures <= 0 {
		c.AuthMaxFailures = d.AuthMaxFailures
	}
	if c.AuthFailRate <= 0 {
		c.AuthFailRate = d.AuthFailRate
	}
	if c.AuthFailBurst <= 0 {
		c.AuthFailBurst = d.AuthFailBurst
	}
	return c
}

// New returns a handler. snow may be nil (snowflake commands then answer NOWORKER). Zero
// fields of cfg take their defaults (DefaultConfig).
func New(cfg Config, seg Segments, snow Snowflakes, log *zap.Logger) *Handler {
	cfg = cfg.withDefaults()
	h := &Handler{cfg: cfg, seg: seg, snow: snow, log: log, now: cfg.Now, ord: cfg.Ordered, fwd: cfg.Forward,
		quiet: quietlog.New(log, quietlog.DefaultEvery, cfg.Now)}
	h.table = make(map[string]*command)
	cmds := commands()
	for i, c := range cmds {
		c.idx = i
		h.table[c.name] = c
		h.byName.add(c)
		if c.mayWait != nil {
			h.waiters.add(c)
		}
	}
	h.lat = make([]latency, len(cmds))
	h.ids = ids.New(ids.Config{Shapes: cfg.Shapes, IDKey: cfg.IDKey, Ordered: cfg.Ordered, Forward: cfg.Forward,
		CreateTimeout: cfg.CreateTimeout, PeriodNow: cfg.PeriodNow, PeriodLead: cfg.PeriodLead, Now: cfg.Now, Sleep: cfg.Sleep}, seg, log)
	return h
}

// SetServer gives the handler the server whose stats INFO reports.
func (h *Handler) SetServer(s *resp.Server) { h.srv = s }

// Close ends the handler's background work (the router's preparation of shaped tags' next
// periods) and waits for it. Call it after the last request, before the segment core and the
// stores close.
func (h *Handler) Close() error { return h.ids.Close() }

// command is one entry of the command table.
type command struct {
	name  string // lower case
	arity int    // Redis convention: n exact, -n at least n (the name counts)
	// noAuth commands run before AUTH (AUTH, HELLO, QUIT, RESET).
	noAuth bool
	// immediate commands run at once inside MULTI instead of being queued (MULTI, EXEC,
	// DISCARD, WATCH, QUIT, RESET: Redis's list).
	immediate bool
	summary   string
	group     string
	run       func(h *Handler, c *resp.Conn, args [][]byte) error

	// write commands issue IDs or change the store (COMMAND INFO flag "write"): their reply
	// must never be cached on the client, so they refuse a connection that asked to cache the
	// next reply (noCacheReply). readonly commands answer from state alone (flag "readonly").
	write, readonly bool
	idx             int // position in commands(): its latency histogram (latency.go)
	// routed commands take IDs of the tag args[1] names through the router (package ids):
	// an ordered tag's, led elsewhere, join the forwarded pipeline (orderedfwd.go).
	routed bool
	// mayWait, when set, reports whether this call of the command may wait (a store call, a
	// segment load, a pacing delay); nil means it never does. See mayblock.go.
	mayWait func(h *Handler, c *resp.Conn, args [][]byte) bool
}

// ServeRESP runs one command: look-up, arity and auth checks, then the command (or, inside
// MULTI, its queueing); an error it returns becomes the reply in run and nowhere else.
func (h *Handler) ServeRESP(c *resp.Conn, args [][]byte) {
	st, _ := c.State().(*connState)
	cmd := h.lookup(args[0])
	if cmd == nil {
		st.refuse(c, unknownCommand(args))
		return
	}
	// Redis checks the arity before the authentication.
	if (cmd.arity > 0 && len(args) != cmd.arity) || (cmd.arity < 0 && len(args) < -cmd.arity) {
		st.refuse(c, "ERR wrong number of arguments for '"+cmd.name+"' command")
		return
	}
	if !c.Authed() && !cmd.noAuth {
		st.refuse(c, "NOAUTH Authentication required.")
		return
	}
	if h.cfg.NoSegment && cmd.group == "segment" || h.cfg.NoSnowflake && cmd.group == "snowflake" {
		st.refuse(c, h.errorReply(disabledMode(cmd.group)))
		return
	}
	if st == nil {
		st = &connState{} // the batch's command counts live here (latency.go)
		c.SetState(st)
	}
	st.batch.add(cmd.idx, len(h.lat))
	if cmd.write && st.track.caching && st.track.optin {
		if !st.multi {
			st.track.caching = false // CLIENT CACHING YES applied to this command
		}
		st.refuse(c, noCacheReply(cmd))
		return
	}
	if st.multi && !cmd.immediate {
		if err := st.enqueue(cmd, args); err != nil {
			st.refuse(c, h.errorReply(err))
			return
		}
		c.WriteSimple("QUEUED")
		return
	}
	h.run(c, cmd, args)
	// CLIENT CACHING yes|no applies to the next command only (Redis keeps it across the
	// CLIENT commands themselves, so TRACKINGINFO shows it).
	if st.track.caching && cmd.name != "client" && !st.multi {
		st.track.caching = false
	}
}

// run runs a command whose checks passed and turns its error into the reply.
func (h *Handler) run(c *resp.Conn, cmd *command, args [][]byte) {
	if err := cmd.run(h, c, args); err != nil {
		c.WriteError(h.errorReply(err))
	}
}

// refuse replies with a refusal before the command ran; inside MULTI it also makes EXEC
// abort, as in Redis. st may be nil.
func (st *connState) refuse(c *resp.Conn, msg string) {
	if st != nil && st.multi {
		st.dirty = true
	}
	c.WriteError(msg)
}

// lookup finds a command by name, case-insensitively, without allocating.
func (h *Handler) lookup(name []byte) *command { return h.byName.find(name) }

// unknownCommand builds Redis's exact reply for an unknown command: the arguments are quoted
// while their list is under 128 bytes, each clipped to what is left of the 128.
func unknownCommand(args [][]byte) string {
	var list strings.Builder
	for _, a := range args[1:] {
		if list.Len() >= 128 {
			break
		}
		fmt.Fprintf(&list, "'%s' ", clip(a, 128-list.Len()))
	}
	return fmt.Sprintf("ERR unknown command '%s', with args beginning with: %s", clip(args[0], 128), list.String())
}

// clip returns the first n bytes of a client's argument for an error reply, control bytes
// escaped (escapeControl).
func clip(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return escapeControl(string(b))
}

// replyError is an error whose text is the reply, code included.
type replyError = ids.Refusal

// disabledMode is the error of a command or endpoint of a mode that --modes turned off.
func disabledMode(mode string) error {
	other := "segment"
	if mode == "segment" {
		other = "snowflake"
	}
	return replyError("DISABLED " + mode + " mode is turned off on this server (--modes " + other + "); enable it with --modes segment,snowflake")
}

// Errors with Redis's wording.
var (
	errNotInteger = replyError("ERR value is not an integer or out of range")
	errSyntax     = replyError("ERR syntax error")
)

// errorReply turns an error into the RESP reply text: the code, a space, the message.
func (h *Handler) errorReply(err error) string {
	code, msg := h.errorCode(err)
	if msg == "" {
		return code
	}
	return code + " " + msg
}

// msgInternal is the message of an error errorCode does not know (code ERR).
const msgInternal = errcode.MsgInternal

// errorCode maps an error to a stable code and a message for people. It is the one place
// that does: RESP (errorReply) and HTTP (package admin, through ErrorCode) both use it, and
// it counts the reply under the code's label of internal/errcode's table. Internal details
// are logged, not sent.
func (h *Handler) errorCode(err error) (code, msg string) {
	defer func() { h.errs.Add(code) }()
	var re replyError
	if errors.As(err, &re) {
		code, msg, _ = strings.Cut(string(re), " ")
		return code, msg
	}
	tag := ""
	detail := ""
	waited := ""
	var te *segment.TagError
	if errors.As(err, &te) && errors.Is(te.Err, segment.ErrUnknownTag) && errors.Is(te.Cause, segment.ErrUnavailable) {
		err = te.Cause // IDS.INFO of a tag not held whose first load just failed: why it failed
		errors.As(err, &te)
	}
	if te != nil {
		tag, detail, waited = te.Tag, te.Detail, te.Waited
	}
	switch {
	case errors.Is(err, segment.ErrInvalidTag):
		return "BADTAG", "invalid tag name: " + detail
	case errors.Is(err, segment.ErrUnknownTag):
		if h.cfg.StoreName != "mysql" { // the embedded store has no SQL table to insert into
			return "NOTAG", fmt.Sprintf("tag '%s' does not exist; create it with IDS.CREATE %s [STEP n] [START n] (auto-create is off: --auto-create)", tag, tag)
		}
		return "NOTAG", fmt.Sprintf("tag '%s' does not exist; create it with IDS.CREATE %s [STEP n] [START n], or INSERT INTO leaf_alloc(biz_tag, max_id, step) VALUES('%s', 1, 1000) and then leafd adopt --mysql-dsn DSN", tag, tag, tag)
	case errors.Is(err, segment.ErrNotAdopted):
		return "NOTADOPTED", fmt.Sprintf("tag '%s' has a leaf_alloc row but no leafd_fence row (written by Leaf or by hand, or its adoption was lost in a failover); run leafd adopt --mysql-dsn DSN --instances <every instance that served it> on the primary; after a failover whose instances are gone, raise max_id first (docs/MYSQL.md, Adopting a Leaf table)", tag)
	case errors.Is(err, segment.ErrTagExists):
		return "TAGEXISTS", fmt.Sprintf("tag '%s' already exists", tag)
	case errors.Is(err, segment.ErrUnavailable):
		h.log.Debug("segment unavailable", zap.String("tag", tag), zap.Error(err))
		if c := storeerr.Classify(err); c != storeerr.None && !c.Transient() {
			return "STORE", fmt.Sprintf("no segment ready for tag '%s': %s", tag, storeerr.Describe(err))
		} else if waited == "" && c != storeerr.None {
			waited = storeerr.Describe(err)
		}
		if waited == "" {
			waited = "store unreachable or slow"
		}
		return "UNAVAILABLE", fmt.Sprintf("no segment ready for tag '%s' (%s); retry later", tag, waited)
	case errors.Is(err, segment.ErrRegression):
		return "REGRESSION", fmt.Sprintf("the store handed out a range of tag '%s' below one already used; refusing it (see the server log)", tag)
	case errors.Is(err, ordered.ErrOtherSpelling):
		return "BADTAG", fmt.Sprintf("tag '%s' is an ordered tag stored under another letter case; use its stored spelling", tag)
	case errors.Is(err, segment.ErrNotAdmitted) && errors.Is(err, ordered.ErrUnknownOrder):
		// The store did not say whether the tag is ordered (a timeout): it is refused, never
		// served as an ordinary tag, and the reply does not claim it is ordered.
		h.log.Debug("tag refused: whether it is ordered is unknown", zap.String("tag", tag), zap.Error(err))
		return "UNAVAILABLE", fmt.Sprintf("could not tell whether tag '%s' is ordered (the store did not answer in time; see the server log); retry later", tag)
	case errors.Is(err, segment.ErrNotAdmitted):
		h.log.Debug("ordered tag refused", zap.String("tag", tag), zap.Error(err))
		return "UNAVAILABLE", fmt.Sprintf("tag '%s' is ordered and cannot be served by this instance now (see the server log); retry later", tag)
	case errors.Is(err, segment.ErrShaped):
		return "SHAPED", fmt.Sprintf("tag '%s' has an ID shape: use IDS.NEXT (or INCR) with it", tag)
	case errors.Is(err, shape.ErrTemplate):
		return "BADFORMAT", strings.TrimPrefix(err.Error(), "shape: invalid shape: ")
	case errors.Is(err, shape.ErrLimit):
		return "LIMIT", strings.TrimPrefix(err.Error(), "shape: ")
	case errors.Is(err, shape.ErrParse):
		return "BADID", strings.TrimPrefix(err.Error(), "shape: not an ID of this tag: ")
	case errors.Is(err, shape.ErrKey):
		return "NOKEY", strings.TrimPrefix(err.Error(), "shape: id key missing or not the tag's key: ")
	case errors.Is(err, segment.ErrLimit):
		if detail == "" {
			detail = "limit exceeded"
		}
		return "LIMIT", detail
	case errors.Is(err, snowflake.ErrClockBack):
		return "CLOCKBACK", strings.TrimPrefix(err.Error(), "snowflake: ")
	case errors.Is(err, snowflake.ErrNoWorker):
		h.log.Debug("no worker id", zap.Error(err))
		if c := storeerr.ClassifyText(err.Error()); c != storeerr.None && !c.Transient() {
			return "NOWORKER", "no usable worker id: the worker-id store fails: " + storeerr.DescribeText(err.Error())
		} else if c != storeerr.None {
			return "NOWORKER", "no usable worker id: the worker-id store fails: " + storeerr.DescribeText(err.Error()) + "; retry later"
		}
		return "NOWORKER", "no usable worker id: " + snowflake.Waiting(err) + "; retry later"
	case errors.Is(err, snowflake.ErrOverflow):
		return "OVERFLOW", "the timestamp no longer fits the snowflake layout; check the epoch and the clock"
	case errors.Is(err, snowflake.ErrLimit):
		return "LIMIT", strings.TrimPrefix(err.Error(), "snowflake: ")
	}
	// A store failure of any command (IDS.CREATE, IDS.INFO, a shape's row) says its cause.
	if c := storeerr.Classify(err); c != storeerr.None {
		h.quiet.Fail(zapcore.WarnLevel, "command failed: store error", err, zap.String("cause", c.String()))
		if c.Transient() {
			return "UNAVAILABLE", storeerr.Describe(err) + "; retry later"
		}
		return "STORE", storeerr.Describe(err)
	}
	h.log.Error("command failed", zap.Error(err))
	return "ERR", msgInternal
}

// str views b as a string without copying. The string is valid only while b is, that is,
// during the command; the cores clone what they keep (docs/DESIGN.md).
func str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// parseInt parses a decimal integer argument with Redis's error text.
func parseInt(b []byte) (int64, error) {
	var v int64
	if len(b) == 0 || len(b) > 20 {
		return 0, errNotInteger
	}
	i := 0
	neg := b[0] == '-'
	if neg {
		i = 1
		if len(b) == 1 {
			return 0, errNotInteger
		}
	}
	for ; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, errNotInteger
		}
		d := int64(c - '0')
		if neg {
			if v < (-1<<63+d)/10 {
				return 0, errNotInteger
			}
			v = v*10 - d
		} else {
			if v > (1<<63-1-d)/10 {
				return 0, errNotInteger
			}
			v = v*10 + d
		}
	}
	if len(b) > 1 && b[0] == '0' || neg && b[1] == '0' {
		return 0, errNotInteger // Redis rejects leading zeros
	}
	return v, nil
}
