package zk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// CacheFile is the name, in the data dir, of the local cache of earlier versions. Its content
// is merged into snowflake.LocalStateFile when a source opens the data dir (see
// snowflake/internal/statefile/bound.go).
const CacheFile = statefile.LegacyZKFile

// leafReportMs is Leaf's reporting period: a node written by Leaf itself may have been used up
// to about this long after its timestamp.
const leafReportMs = 3000

var _ snowflake.WorkerSource = (*Source)(nil)

// Config configures a Source. A zero field means its default unless said otherwise.
type Config struct {
	// Servers: ZooKeeper addresses (host:port). Required.
	Servers []string
	// Chroot: a path prefix for every node ("/leaf"), as in the connection string
	// "host:port/leaf" (see ParseConnect). Empty: none.
	Chroot string
	// Name: the cluster name (Leaf's leaf.name): nodes live under /snowflake/<Name>. Default "leafd".
	Name string
	// Addr: this instance's identity, ip:port (--advertise-addr; see DefaultAdvertiseAddr). Required.
	Addr string
	// DataDir holds the local state <DataDir>/snowflake.json (locked). Required.
	DataDir string
	// Reuse lets this instance take over the worker id of a dead instance of another identity
	// (see the type's doc). Nodes whose holder ran without reuse are never taken over.
	Reuse bool
	// OutageTolerance: how far past the bound ZooKeeper last confirmed this instance keeps
	// issuing when it cannot reach ZooKeeper (0, the default: not at all, i.e. at most the rest
	// of its lease). Another data dir that later claims the id starts that much further above
	// the bound. Negative is an error.
	OutageTolerance time.Duration
	// MaxWorkerID: the largest id the layout encodes (Layout.MaxWorkerID()). Default 1023.
	MaxWorkerID int64
	// SessionTimeout of the ZooKeeper session. Default 10s.
	SessionTimeout time.Duration
	// ReportInterval: how often the forever node's timestamp is refreshed (Leaf: 3s) and a bound
	// kept only locally during an outage is copied to ZooKeeper. Default 3s.
	ReportInterval time.Duration
	// Now is the clock for the reported timestamps. Default time.Now.
	Now func() time.Time
	// Logger; default none.
	Logger *zap.Logger
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "leafd"
	}
	if c.MaxWorkerID == 0 {
		c.MaxWorkerID = 1023
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = 10 * time.Second
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = 3 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Validate checks the configuration, defaults applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	if len(c.Servers) == 0 {
		return errors.New("snowflake: Config.Servers is empty")
	}
	if c.DataDir == "" {
		return errors.New("snowflake: Config.DataDir is empty")
	}
	if strings.ContainsAny(c.Name, "/") {
		return fmt.Errorf("snowflake: cluster name %q contains '/'", c.Name)
	}
	if c.Chroot != "" {
		if err := validChroot(c.Chroot); err != nil || c.Chroot == "/" {
			return fmt.Errorf("snowflake: ZooKeeper chroot %q: want /a/b", c.Chroot)
		}
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("snowflake: advertise address %q is not ip:port", c.Addr)
	}
	if strings.Contains(c.Addr, "-") || strings.Contains(c.Addr, "/") {
		return fmt.Errorf("snowflake: advertise address %q may not contain '-' or '/'", c.Addr)
	}
	if c.MaxWorkerID < 0 || c.SessionTimeout < time.Second || c.ReportInterval < 0 {
		return errors.New("snowflake: Config: MaxWorkerID, SessionTimeout (≥ 1s) or ReportInterval out of range")
	}
	if c.OutageTolerance < 0 {
		return fmt.Errorf("snowflake: Config.OutageTolerance %v is negative", c.OutageTolerance)
	}
	return nil
}

// zkNode is the JSON of a forever node: exactly Leaf's Endpoint (ip and port are strings there,
// timestamp a long), so that Leaf can read every node leafd writes.
type zkNode struct {
	IP        string `json:"ip"`
	Port      string `json:"port"`
	Timestamp int64  `json:"timestamp"`
}

// foreverData is how a forever node is read: Leaf's fields, and the reserved_until that earlier
// leafd versions kept there (honoured as a bound when adopting such a tree).
type foreverData struct {
	zkNode
	LegacyReservedUntil int64 `json:"reserved_until,omitempty"`
}

// Source takes worker ids from ZooKeeper, compatible with Leaf's SnowflakeZookeeperHolder:
// persistent sequential nodes /snowflake/<name>/forever/<ip>:<port>-<seq> whose sequence number is
// the worker id (parsed from the created node on every start, also the first: Leaf PR #108), with
// Leaf's {"ip","port","timestamp"} JSON and nothing else, the timestamp refreshed every
// ReportInterval.
//
// # Exclusive claim and fence (claim.go)
//
// Before it issues, an instance creates the ephemeral /snowflake/<name>/live/<id> (reuse on or
// off; one winner) and rewrites /snowflake/<name>/state/<id> with a version check. A second
// process of the same identity on another data dir finds the live node held and answers
// NOWORKER (ErrWorkerHeld) until the holder is gone. The fence is the state node's
// reserved_until, not the ephemeral node (which a paused process can lose without noticing):
// an instance issues only below the reserved_until it has written to the state node with a
// version check, plus OutageTolerance while ZooKeeper cannot be reached. A successor from another
// data dir rewrites the state node (bumping its version, so every later write of the old holder
// fails and it stops: ErrNoWorker) and starts above the reserved_until it read plus the holder's
// tolerance. Every write of the old holder that succeeded came before that read, so old IDs <
// bound + tolerance < new IDs, whatever the pause and the clocks.
//
// # Reuse
//
// With Reuse, an instance without a usable node of its own may also take over the id of
// another identity whose state says reuse and which has no live node. Without it (Leaf's model)
// an id only ever moves between processes of one identity.
//
// # Local state
//
// The data dir's snowflake.json (flock'ed, written durably, shared with the file and static
// sources) records the id, ip:port, name, reserved_until and the last bound ZooKeeper confirmed.
// Its bound is the data dir's: every start on the data dir, with any source, begins above it.
// If ZooKeeper is unreachable on start, the cached id is used only within the outage tolerance.
type Source struct {
	cfg      Config
	log      *zap.Logger
	conn     *gozk.Conn
	cache    *statefile.File
	token    string // this process
	instance string // this data dir
	root     string
	ip       string
	port     string
	kick     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once

	// zkMu serialises the ZooKeeper I/O on our nodes and is held across it; mu guards the
	// state. Order: zkMu, then mu. A field written under both may be read under either.
	zkMu      sync.Mutex
	mu        sync.Mutex
	acquired  bool                  // zkMu+mu
	closed    bool                  // zkMu+mu
	id        int64                 // zkMu+mu
	node      string                // zkMu; full path of the forever node; "" when started from the local state
	version   int32                 // zkMu; of the state node, as last written or read by us
	zkUntil   int64                 // zkMu; reserved_until last written to the state node: the fence
	tolerance int64                 // zkMu; ms past zkUntil this process may issue without ZooKeeper
	reported  int64                 // zkMu; last timestamp written to the forever node
	session   int64                 // zkMu; the ZooKeeper session our live node belongs to
	dirty     bool                  // mu; the local bound is ahead of ZooKeeper's
	cacheHigh int64                 // mu; reserved_until in the local state
	lost      atomic.Pointer[error] // the id is no longer ours: permanent
	lastHeld  string                // zkMu; the last ErrWorkerHeld logged
	releaseAt int64                 // zkMu; state node deleted: release the live node once the clock is past it
}

// lostErr returns the error that made the id no longer ours, or nil.
func (s *Source) lostErr() error {
	if p := s.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// setLost records err as lost and returns it.
func (s *Source) setLost(err error) error {
	s.lost.Store(&err)
	return err
}

// NewSource locks the data dir's state file and starts connecting to ZooKeeper (it does not
// wait for the connection; Acquire does).
func NewSource(cfg Config) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cache, err := statefile.Open(filepath.Join(cfg.DataDir, snowflake.LocalStateFile))
	if err != nil {
		return nil, err
	}
	var tok [12]byte
	if _, err := rand.Read(tok[:]); err != nil {
		cache.Close()
		return nil, err
	}
	host, port, _ := net.SplitHostPort(cfg.Addr)
	s := &Source{
		cfg:       cfg,
		log:       cfg.Logger,
		cache:     cache,
		token:     hex.EncodeToString(tok[:]),
		instance:  cache.Instance(),
		root:      cfg.Chroot + "/snowflake/" + cfg.Name,
		ip:        host,
		port:      port,
		kick:      make(chan struct{}, 1),
		tolerance: cfg.OutageTolerance.Milliseconds(),
	}
	conn, events, err := gozk.Connect(cfg.Servers, cfg.SessionTimeout,
		gozk.WithLogger(zkLogger{s.log}), gozk.WithLogInfo(false))
	if err != nil {
		cache.Close()
		return nil, fmt.Errorf("snowflake: zookeeper: %w", err)
	}
	s.conn = conn
	s.wg.Add(1)
	go s.maintain(events)
	return s, nil
}

type zkLogger struct{ l *zap.Logger }

func (z zkLogger) Printf(format string, args ...any) {
	z.l.Debug("zookeeper: " + fmt.Sprintf(format, args...))
}

// call runs one ZooKeeper operation bounded by ctx (the client itself only gives up after a
// whole round of failed connection attempts). The operation may still complete after ctx ends.
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := f()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("zookeeper: %w", ctx.Err())
	}
}

// unavailable reports whether err means "ZooKeeper cannot be reached now" (as opposed to an
// answer).
func unavailable(err error) bool {
	for _, e := range []error{gozk.ErrNoServer, gozk.ErrConnectionClosed, gozk.ErrSessionExpired, gozk.ErrClosing,
		gozk.ErrSessionMoved, context.DeadlineExceeded, context.Canceled, snowflake.ErrSourceUnavailable} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (s *Source) forever() string { return s.root + "/forever" }

// parseNodeName splits "<ip>:<port>-<seq>".
func parseNodeName(name string) (addr string, seq int64, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil || seq < 0 {
		return "", 0, false
	}
	return name[:i], seq, true
}

// Acquire claims this instance's worker id: its own node's (by ip:port), a taken-over one
// (Reuse), or a new sequential node's. With ZooKeeper unreachable it falls back to the local
// state within the outage tolerance, or fails with ErrSourceUnavailable. A worker id held by
// another live process is an ErrWorkerHeld error.
func (s *Source) Acquire(ctx context.Context) (snowflake.Worker, error) {
	s.zkMu.Lock()
	defer s.zkMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return snowflake.Worker{}, errors.New("snowflake: source closed")
	}
	cache, _, err := s.cache.Read()
	if err != nil {
		return snowflake.Worker{}, err
	}
	s.cache.Lock()
	err = s.cache.CheckLayout(cache)
	s.cache.Unlock()
	if err != nil {
		return snowflake.Worker{}, err
	}
	dirBound := cache.ReservedUntilMs // the data dir's, whichever source wrote it
	usable := cache.Source == "zookeeper" && cache.Name == s.cfg.Name && cache.Addr == s.cfg.Addr
	if cache.Source == "zookeeper" && !usable {
		s.log.Warn("snowflake: local state is for another identity; keeping only its time bound",
			zap.String("cache_name", cache.Name), zap.String("cache_addr", cache.Addr))
	}
	w, err := s.acquireZK(ctx, cache, dirBound)
	if err == nil || !unavailable(err) {
		return w, err
	}
	tol := min(s.tolerance, cache.ToleranceMs)
	now := s.cfg.Now().UnixMilli()
	switch {
	case !usable:
		return snowflake.Worker{}, fmt.Errorf("%w: zookeeper unreachable (%v) and no local state of this identity", snowflake.ErrSourceUnavailable, err)
	case tol <= 0:
		return snowflake.Worker{}, fmt.Errorf("%w: zookeeper unreachable (%v); with no outage tolerance the worker id needs ZooKeeper's confirmation", snowflake.ErrSourceUnavailable, err)
	case now >= cache.ZKConfirmedMs+tol:
		return snowflake.Worker{}, fmt.Errorf("%w: zookeeper unreachable (%v) and the outage tolerance past the last confirmed bound %v is used up",
			snowflake.ErrSourceUnavailable, err, msTime(cache.ZKConfirmedMs))
	case cache.WorkerID > s.cfg.MaxWorkerID:
		return snowflake.Worker{}, fmt.Errorf("snowflake: cached worker id %d above the layout's maximum %d", cache.WorkerID, s.cfg.MaxWorkerID)
	}
	s.log.Warn("snowflake: zookeeper unreachable; starting from the local state within the outage tolerance", zap.Error(err),
		zap.Int64("worker_id", cache.WorkerID), zap.Time("until", msTime(cache.ZKConfirmedMs+tol)))
	s.id, s.node, s.acquired, s.dirty, s.cacheHigh = cache.WorkerID, "", true, true, dirBound
	s.zkUntil, s.tolerance = cache.ZKConfirmedMs, tol
	return snowflake.Worker{ID: cache.WorkerID, Bound: msTime(dirBound), Source: "zookeeper (local cache)"}, nil
}

func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func (s *Source) ensurePaths(ctx context.Context) error {
	var ps []string
	if s.cfg.Chroot != "" {
		parts := strings.Split(s.cfg.Chroot[1:], "/")
		for i := range parts {
			ps = append(ps, "/"+strings.Join(parts[:i+1], "/"))
		}
	}
	ps = append(ps, s.cfg.Chroot+"/snowflake", s.root, s.forever(), s.root+"/live", s.root+"/state")
	for _, p := range ps {
		_, err := call(ctx, func() (string, error) { return s.conn.Create(p, nil, 0, gozk.WorldACL(gozk.PermAll)) })
		if err != nil && !errors.Is(err, gozk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

type foreverChild struct {
	name string
	addr string
	id   int64
}

func (s *Source) children(ctx context.Context) ([]foreverChild, error) {
	names, err := call(ctx, func() ([]string, error) {
		c, _, err := s.conn.Children(s.forever())
		return c, err
	})
	if err != nil {
		return nil, err
	}
	var out []foreverChild
	for _, n := range names {
		if addr, id, ok := parseNodeName(n); ok {
			out = append(out, foreverChild{n, addr, id})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}

func (s *Source) getForever(ctx context.Context, path string) (foreverData, error) {
	return call(ctx, func() (foreverData, error) {
		b, _, err := s.conn.Get(path)
		if err != nil {
			return foreverData{}, err
		}
		var n foreverData
		if len(b) > 0 {
			if err := json.Unmarshal(b, &n); err != nil {
				return foreverData{}, fmt.Errorf("snowflake: node %s: bad JSON: %w", path, err)
			}
		}
		return n, nil
	})
}

func (s *Source) acquireZK(ctx context.Context, cache statefile.State, dirBound int64) (snowflake.Worker, error) {
	if err := s.ensurePaths(ctx); err != nil {
		return snowflake.Worker{}, err
	}
	if err := s.checkZKLayout(ctx); err != nil {
		return snowflake.Worker{}, err
	}
	kids, err := s.children(ctx)
	if err != nil {
		return snowflake.Worker{}, err
	}
	var own *foreverChild
	for i := range kids {
		if kids[i].addr == s.cfg.Addr {
			own = &kids[i]
			break
		}
	}
	var (
		id    int64 = -1
		path  string
		how   string
		fresh bool
	)
	s.reported = 0 // set from the nodes below
	if own != nil {
		err := s.claimLive(ctx, own.id)
		switch {
		case err == nil:
			id, path, how = own.id, s.forever()+"/"+own.name, "own node"
		case errors.Is(err, snowflake.ErrWorkerHeld):
			l, _, lerr := s.readLive(ctx, own.id)
			if !s.cfg.Reuse || lerr != nil || l.Holder == s.cfg.Addr {
				if msg := err.Error(); msg != s.lastHeld { // once per holder: the retries run every 100ms
					s.lastHeld = msg
					s.log.Warn("snowflake: worker id held by another live process; not serving it", zap.Error(err))
				}
				return snowflake.Worker{}, err
			}
			// Taken over by another identity (worker reuse): look for another id.
			s.log.Warn("snowflake: our worker id is held by another live instance", zap.Int64("worker_id", own.id),
				zap.String("holder", l.Holder))
		default:
			return snowflake.Worker{}, err
		}
	}
	if id < 0 && s.cfg.Reuse {
		if id, path, err = s.takeOver(ctx, kids); err != nil {
			return snowflake.Worker{}, err
		}
		how = "taken over"
	}
	if id < 0 {
		if id, path, err = s.createNode(ctx); err != nil {
			return snowflake.Worker{}, err
		}
		if err := s.claimLive(ctx, id); err != nil {
			return snowflake.Worker{}, fmt.Errorf("snowflake: live node of new worker id %d: %w", id, err)
		}
		how, fresh = "new node", true
	}
	if id > s.cfg.MaxWorkerID {
		return snowflake.Worker{}, fmt.Errorf("snowflake: worker id %d (node %s) is above the layout's maximum %d: "+
			"the worker ids of /snowflake/%s are exhausted (use a new --name, more worker bits, or --worker-reuse)",
			id, path, s.cfg.MaxWorkerID, s.cfg.Name)
	}
	var fv foreverData
	if !fresh {
		if fv, err = s.getForever(ctx, path); err != nil {
			return snowflake.Worker{}, err
		}
	}
	bound, ver, prev, err := s.fence(ctx, id, path, fv, dirBound)
	if err != nil {
		return snowflake.Worker{}, err
	}
	s.id, s.node, s.version, s.acquired, s.dirty = id, path, ver, true, false
	s.session = s.conn.SessionID()
	s.zkUntil, s.cacheHigh = bound, bound
	if err := s.cache.Write(s.localState(bound)); err != nil {
		return snowflake.Worker{}, err
	}
	s.log.Info("snowflake: worker id from zookeeper", zap.Int64("worker_id", id), zap.String("node", path),
		zap.String("how", how), zap.Time("bound", msTime(bound)), zap.String("previous_holder", prev.Holder))
	return snowflake.Worker{ID: id, Bound: msTime(bound), Source: "zookeeper"}, nil
}

// localState is what the data dir records for bound until.
func (s *Source) localState(until int64) statefile.State {
	return statefile.State{WorkerID: s.id, ReservedUntilMs: until, Source: "zookeeper", Addr: s.cfg.Addr, Name: s.cfg.Name,
		Reuse: s.cfg.Reuse, ZKConfirmedMs: s.zkUntil, ToleranceMs: s.tolerance}
}

// createNode creates our persistent sequential node (Leaf's data only) and parses the worker id
// from its name, on the first start too (Leaf PR #108 returned 0 there). Ids above the maximum
// are deleted and reported as exhaustion.
func (s *Source) createNode(ctx context.Context) (int64, string, error) {
	now := s.cfg.Now().UnixMilli()
	b, _ := json.Marshal(zkNode{IP: s.ip, Port: s.port, Timestamp: now})
	path, err := call(ctx, func() (string, error) {
		return s.conn.Create(s.forever()+"/"+s.cfg.Addr+"-", b, gozk.FlagSequence, gozk.WorldACL(gozk.PermAll))
	})
	if err != nil {
		return 0, "", err
	}
	_, id, ok := parseNodeName(path[strings.LastIndexByte(path, '/')+1:])
	if !ok {
		return 0, "", fmt.Errorf("snowflake: unexpected sequential node name %q", path)
	}
	if id > s.cfg.MaxWorkerID {
		_, _ = call(ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(path, -1) })
		return 0, "", fmt.Errorf("snowflake: new worker id %d is above the layout's maximum %d: "+
			"the worker ids of /snowflake/%s are exhausted (use a new --name, more worker bits, or --worker-reuse)",
			id, s.cfg.MaxWorkerID, s.cfg.Name)
	}
	s.reported = now
	return id, path, nil
}

// takeOver claims the live node of an id whose holder ran with reuse and is gone. It returns
// id -1 when there is none. The caller fences the state node.
func (s *Source) takeOver(ctx context.Context, kids []foreverChild) (int64, string, error) {
	for _, k := range kids {
		if k.id > s.cfg.MaxWorkerID || k.addr == s.cfg.Addr {
			continue
		}
		st, _, ok, err := s.readState(ctx, k.id)
		if err != nil {
			if unavailable(err) {
				return -1, "", err
			}
			continue
		}
		if !ok || !st.Reuse {
			continue // its holder may serve beyond what ZooKeeper knows, or is Leaf: never reuse
		}
		if err := s.claimLive(ctx, k.id); err != nil {
			if errors.Is(err, snowflake.ErrWorkerHeld) {
				continue // live, and not ours
			}
			return -1, "", err
		}
		s.log.Warn("snowflake: taking over the worker id of a dead instance", zap.Int64("worker_id", k.id),
			zap.String("previous_holder", st.Holder))
		return k.id, s.forever() + "/" + k.name, nil
	}
	return -1, "", nil
}

// reportLocked refreshes the forever node's timestamp with Leaf's data only. Like Leaf, it skips
// a report when the clock is behind the last one. The state node records the timestamp first,
// so that a later timestamp in the forever node can only have been written by someone else
// (Leaf, see fence).
func (s *Source) reportLocked(ctx context.Context) error {
	now := s.cfg.Now().UnixMilli()
	if now < s.reported {
		return nil
	}
	s.reported = now
	if err := s.writeStateLocked(ctx, s.zkUntil); err != nil {
		return err
	}
	n := zkNode{IP: s.ip, Port: s.port, Timestamp: now}
	if ip, port, err := net.SplitHostPort(s.nodeAddr()); err == nil {
		n.IP, n.Port = ip, port // keep Leaf's view of the node: the identity in its name
	}
	b, _ := json.Marshal(n)
	_, err := call(ctx, func() (*gozk.Stat, error) { return s.conn.Set(s.node, b, -1) })
	return err
}

func (s *Source) nodeAddr() string {
	addr, _, _ := parseNodeName(s.node[strings.LastIndexByte(s.node, '/')+1:])
	return addr
}

// Extend persists reserved_until: first in the state node (version-checked: the fence), then in
// the data dir. When ZooKeeper cannot be reached, the data dir alone is enough while until stays
// within the outage tolerance past the last bound ZooKeeper confirmed; the state node is updated
// in the background when ZooKeeper returns.
func (s *Source) Extend(ctx context.Context, until time.Time) error {
	s.zkMu.Lock()
	defer s.zkMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("snowflake: source closed")
	}
	if !s.acquired {
		return errors.New("snowflake: Extend before Acquire")
	}
	if err := s.lostErr(); err != nil {
		return err
	}
	u := until.UnixMilli()
	var zkErr error
	switch {
	case s.node == "":
		zkErr = errors.New("worker id not yet confirmed by zookeeper")
	case s.conn.State() != gozk.StateHasSession:
		zkErr = fmt.Errorf("zookeeper %v", s.conn.State())
	default:
		zctx := ctx
		if s.tolerance > 0 {
			// With a tolerance to fall back on, do not let a hung ZooKeeper eat the lease.
			var cancel context.CancelFunc
			zctx, cancel = context.WithTimeout(ctx, time.Second)
			defer cancel()
		}
		tol := s.tolerance
		if u < s.zkUntil {
			// Lowering the bound: the generator's Close, after it has stopped issuing.
			// Announce tolerance 0, so that a successor (a clean restart) need not wait it.
			s.tolerance = 0
		}
		zkErr = s.writeStateLocked(zctx, u)
		if zkErr != nil {
			s.tolerance = tol
		}
		if zkErr == nil {
			if err := s.cache.Write(s.localState(u)); err != nil {
				return err
			}
			s.cacheHigh, s.dirty = u, false
			return nil
		}
		if s.lostErr() != nil {
			return zkErr
		}
	}
	if u > s.zkUntil+s.tolerance {
		return fmt.Errorf("%w: %v; %v is beyond the outage tolerance (%dms) past the bound zookeeper confirmed (%v)",
			snowflake.ErrSourceUnavailable, zkErr, msTime(u), s.tolerance, msTime(s.zkUntil))
	}
	if err := s.cache.Write(s.localState(u)); err != nil {
		return err
	}
	s.cacheHigh, s.dirty = u, true
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// maintain owns the background work: drain session events, re-claim the live node after a
// session expiry, copy a local bound to ZooKeeper, report the timestamp. It ends when the
// connection's event channel is closed (after Close), which also means the client's own
// goroutines have ended.
func (s *Source) maintain(events <-chan gozk.Event) {
	defer s.wg.Done()
	var tick <-chan time.Time
	if s.cfg.ReportInterval > 0 {
		t := time.NewTicker(s.cfg.ReportInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			switch ev.State {
			case gozk.StateExpired:
				s.log.Warn("snowflake: zookeeper session expired")
			case gozk.StateHasSession:
				s.refresh()
			}
		case <-tick:
			s.refresh()
		case <-s.kick:
			s.refresh()
		}
	}
}

// refresh confirms an id taken from the local state, re-claims the live node in a new session,
// copies a bound kept only locally to the state node, and reports the timestamp.
func (s *Source) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), min(s.cfg.SessionTimeout, 2*time.Second))
	defer cancel()
	s.zkMu.Lock()
	defer s.zkMu.Unlock()
	if !s.acquired || s.closed || s.conn.State() != gozk.StateHasSession {
		return
	}
	if s.lostErr() != nil {
		s.releaseLiveLocked(ctx)
		return
	}
	s.mu.Lock()
	cacheHigh, dirty := s.cacheHigh, s.dirty
	s.mu.Unlock()
	if s.node == "" {
		if err := s.resolveLocked(ctx); err != nil {
			return
		}
	} else if sid := s.conn.SessionID(); sid != s.session {
		if err := s.claimLive(ctx, s.id); err != nil {
			if errors.Is(err, snowflake.ErrWorkerHeld) {
				err := s.setLost(fmt.Errorf("%w: %w", snowflake.ErrNoWorker, err))
				s.log.Error("snowflake: worker id lost", zap.Error(err))
			}
			return
		}
		s.session = sid
	}
	if dirty {
		until := max(s.zkUntil, cacheHigh)
		if err := s.writeStateLocked(ctx, until); err != nil {
			return
		}
		s.mu.Lock()
		if s.cacheHigh <= until { // else an Extend ran meanwhile: still dirty
			s.dirty = false
		}
		_ = s.cache.Write(s.localState(s.cacheHigh))
		s.mu.Unlock()
	}
	if err := s.reportLocked(ctx); err != nil {
		s.log.Debug("snowflake: zookeeper report failed", zap.Error(err))
	}
}

// resolveLocked confirms, once ZooKeeper is back, an id taken from the local state during an
// outage: the node must still exist, the live node must be ours to claim, and the state must
// not have been rewritten by another data dir.
func (s *Source) resolveLocked(ctx context.Context) error {
	kids, err := s.children(ctx)
	if err != nil {
		return err
	}
	path := ""
	for _, k := range kids {
		if k.addr == s.cfg.Addr && k.id == s.id {
			path = s.forever() + "/" + k.name
		}
	}
	if path == "" {
		err := s.setLost(fmt.Errorf("%w: zookeeper has no node %s-%010d for the cached worker id (was its data lost?)", snowflake.ErrNoWorker, s.cfg.Addr, s.id))
		s.log.Error("snowflake: cached worker id not confirmed", zap.Error(err))
		return err
	}
	if err := s.claimLive(ctx, s.id); err != nil {
		if errors.Is(err, snowflake.ErrWorkerHeld) {
			err = s.setLost(fmt.Errorf("%w: %w", snowflake.ErrNoWorker, err))
			s.log.Error("snowflake: cached worker id not confirmed", zap.Error(err))
		}
		return err
	}
	st, ver, ok, err := s.readState(ctx, s.id)
	if err != nil {
		return err
	}
	if ok && st.Instance != s.instance {
		err := s.setLost(fmt.Errorf("%w: worker id %d was claimed by %s (instance %s) during the outage", snowflake.ErrNoWorker, s.id, st.Holder, st.Instance))
		s.log.Error("snowflake: cached worker id not confirmed", zap.Error(err))
		return err
	}
	s.node, s.version, s.session = path, ver, s.conn.SessionID()
	if ok {
		s.zkUntil = max(s.zkUntil, st.ReservedUntil)
	}
	s.log.Info("snowflake: zookeeper back; cached worker id confirmed", zap.Int64("worker_id", s.id))
	return nil
}

// releaseLiveLocked deletes our live node once the clock is past releaseAt (set when our state
// node was found deleted), so that a standby of this identity can take the id over instead of
// waiting for this process to restart. Not before: the generator may issue up to the lease it
// last extended, and the successor, with no state node, starts only above the forever node's
// report + 3 s (docs/SNOWFLAKE.md, "Never delete state/ or live/ by hand").
func (s *Source) releaseLiveLocked(ctx context.Context) {
	if s.releaseAt <= 0 || s.cfg.Now().UnixMilli() <= s.releaseAt {
		return
	}
	l, st, err := s.readLive(ctx, s.id)
	if err == nil && l.Token == s.token {
		_, err = call(ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(s.livePath(s.id), st.Version) })
	}
	if err == nil || errors.Is(err, gozk.ErrNoNode) || errors.Is(err, gozk.ErrBadVersion) {
		s.log.Warn("snowflake: state node deleted; live node released", zap.Int64("worker_id", s.id))
		s.releaseAt = 0
	}
}

// Close stops the background work, closes the ZooKeeper session (the live node goes with it)
// and releases the data dir. The generator has lowered the bound before (Extend). It is
// idempotent.
func (s *Source) Close() error {
	var err error
	s.once.Do(func() {
		s.zkMu.Lock()
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.zkMu.Unlock()
		s.conn.Close()
		s.wg.Wait()
		err = s.cache.Close()
	})
	return err
}

// WorkerID returns the acquired worker id (-1 before Acquire).
func (s *Source) WorkerID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.acquired {
		return -1
	}
	return s.id
}

// ErrNoAdvertiseAddr: the host has no non-loopback IPv4 address to derive an identity from.
var ErrNoAdvertiseAddr = errors.New("snowflake: no non-loopback IPv4 address to advertise")

// DefaultAdvertiseAddr returns the identity Leaf would use for listenAddr: the first
// non-loopback IPv4 address of an up interface, with listenAddr's port. On a host without one it
// fails with ErrNoAdvertiseAddr rather than fall back to 127.0.0.1, which every such host (and
// container) shares.
func DefaultAdvertiseAddr(listenAddr string) (string, error) {
	_, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return "", fmt.Errorf("snowflake: listen address %q: %w", listenAddr, err)
	}
	if port == "" || port == "0" {
		return "", fmt.Errorf("snowflake: listen address %q has no fixed port", listenAddr)
	}
	ifs, err := net.Interfaces()
	if err == nil {
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, err := ifc.Addrs()
			if err != nil {
				continue
			}
			for _, a := range addrs {
				ipn, ok := a.(*net.IPNet)
				if !ok {
					continue
				}
				if ip4 := ipn.IP.To4(); ip4 != nil && !ip4.IsLoopback() && !ip4.IsLinkLocalUnicast() {
					return net.JoinHostPort(ip4.String(), port), nil
				}
			}
		}
	}
	return "", ErrNoAdvertiseAddr
}
