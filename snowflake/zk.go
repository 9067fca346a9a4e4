package snowflake

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

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
)

// ZKCacheFile is the name, in the data dir, of ZKSource's local cache.
const ZKCacheFile = "snowflake-zk.json"

// leafReportMs is Leaf's reporting period: a node written by Leaf itself (no reserved_until) may
// have been used up to about this long after its timestamp.
const leafReportMs = 3000

var _ WorkerSource = (*ZKSource)(nil)

// ZKConfig configures a ZKSource. A zero field means its default.
type ZKConfig struct {
	// Servers: ZooKeeper addresses (host:port). Required.
	Servers []string
	// Name: the cluster name (Leaf's leaf.name): nodes live under /snowflake/<Name>. Default "leafd".
	Name string
	// Addr: this instance's identity, ip:port (--advertise-addr; see DefaultAdvertiseAddr). Required.
	Addr string
	// DataDir holds the local cache <DataDir>/snowflake-zk.json (locked). Required.
	DataDir string
	// Reuse lets this instance take over the worker id of a dead instance (see the type's doc).
	// All instances of one Name should agree; nodes written without reuse are never taken over.
	Reuse bool
	// MaxWorkerID: the largest id the layout encodes (Layout.MaxWorkerID()). Default 1023.
	MaxWorkerID int64
	// SessionTimeout of the ZooKeeper session. Default 10s.
	SessionTimeout time.Duration
	// ReportInterval: how often the node's timestamp is refreshed (Leaf: 3s) and a lagging ZK
	// copy of the bound is synced. Default 3s.
	ReportInterval time.Duration
	// Now is the clock for the reported timestamps. Default time.Now.
	Now func() time.Time
	// Logger; default none.
	Logger *zap.Logger
}

func (c ZKConfig) withDefaults() ZKConfig {
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
func (c ZKConfig) Validate() error {
	c = c.withDefaults()
	if len(c.Servers) == 0 {
		return errors.New("snowflake: ZKConfig.Servers is empty")
	}
	if c.DataDir == "" {
		return errors.New("snowflake: ZKConfig.DataDir is empty")
	}
	if strings.ContainsAny(c.Name, "/") {
		return fmt.Errorf("snowflake: cluster name %q contains '/'", c.Name)
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("snowflake: advertise address %q is not ip:port", c.Addr)
	}
	if strings.Contains(c.Addr, "-") || strings.Contains(c.Addr, "/") {
		return fmt.Errorf("snowflake: advertise address %q may not contain '-' or '/'", c.Addr)
	}
	if c.MaxWorkerID < 0 || c.SessionTimeout < time.Second || c.ReportInterval < 0 {
		return errors.New("snowflake: ZKConfig: MaxWorkerID, SessionTimeout (≥ 1s) or ReportInterval out of range")
	}
	return nil
}

// zkNode is the JSON of a forever node. ip, port and timestamp are Leaf's Endpoint (port is a
// string there too); the other fields are leafd's and are ignored by Leaf.
type zkNode struct {
	IP            string `json:"ip"`
	Port          string `json:"port"`
	Timestamp     int64  `json:"timestamp"`
	ReservedUntil int64  `json:"reserved_until,omitempty"` // Unix ms; the time lease
	Reuse         bool   `json:"reuse,omitempty"`          // holder never issues beyond ReservedUntil
	Holder        string `json:"holder,omitempty"`         // ip:port of the instance using the id
	Token         string `json:"token,omitempty"`          // that instance's random token
}

// bound is the time before which the previous holder may have issued IDs.
func (n zkNode) bound() int64 {
	if n.ReservedUntil > 0 {
		return max(n.ReservedUntil, n.Timestamp)
	}
	if n.Timestamp > 0 {
		return n.Timestamp + leafReportMs // a Leaf-written node has no lease
	}
	return 0
}

// zkLive is the JSON of a live (ephemeral) node.
type zkLive struct {
	Holder string `json:"holder"`
	Token  string `json:"token"`
}

// ZKSource takes worker ids from ZooKeeper, compatible with Leaf's SnowflakeZookeeperHolder:
// persistent sequential nodes /snowflake/<name>/forever/<ip>:<port>-<seq> whose sequence number is
// the worker id (parsed from the created node on every start, also the first: Leaf PR #108), with
// {"ip","port","timestamp"} JSON refreshed every ReportInterval. leafd adds reserved_until (the
// time lease) and a few fields to that JSON; Leaf ignores them.
//
// A local cache <data-dir>/snowflake-zk.json (flock'ed, written durably) records the id, ip:port,
// name and reserved_until. The bound a new run must start above is the maximum of the node's and
// the cache's reserved_until.
//
// Without reuse (Leaf's model) an id belongs to its ip:port forever. If ZooKeeper is unreachable
// on start, the cached id is used (unless the cache was written by a run with reuse: that id
// may have been taken over since); Extend persists reserved_until in the cache first and copies it
// to ZooKeeper in the background, so the instance keeps serving through an outage. Without ZK
// and without a cache, Acquire fails with ErrSourceUnavailable (the generator then waits in the
// no-worker state).
//
// # Worker-id reuse and fencing
//
// With Reuse, each holder also keeps an ephemeral node /snowflake/<name>/live/<id> holding its
// ip:port and a random token. An instance without a usable node of its own may take over an id
// whose node was written with reuse on and has no live node: it creates the live node (atomic:
// one winner) and rewrites the forever node with a version check, then starts above the bound
// read from that node. The fence is that bound, not the ephemeral node (which a paused process
// can lose without noticing): a reuse holder never issues beyond the reserved_until it has
// persisted in ZooKeeper, because Extend succeeds only after a version-checked write to the node
// succeeds. Every write of the successor bumps the version, so a paused holder's later writes
// fail (the id is lost: ErrNoWorker), and any write of the holder that did succeed happened before
// the successor read the bound. Hence holder IDs are < bound < successor IDs. Without ZooKeeper
// a reuse holder serves up to its last ZK-persisted bound, then ErrNoWorker until ZK returns.
// Nodes without reuse (and nodes written by Leaf) are never taken over.
type ZKSource struct {
	cfg   ZKConfig
	log   *zap.Logger
	conn  *zk.Conn
	cache *localFile
	token string
	root  string
	ip    string
	port  string
	kick  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once

	// zkMu serialises the ZooKeeper I/O on our nodes and is held across it; mu guards the
	// state and is held across ZooKeeper I/O only where the caller must wait for ZooKeeper
	// anyway (Acquire, Extend with Reuse, Close). The background report takes zkMu alone, so
	// that an Extend without Reuse (a local cache write) never waits for an unreachable
	// ZooKeeper: that wait outlasted the lease and turned an outage into NOWORKER. Order: zkMu,
	// then mu. A field written under both may be read under either.
	zkMu      sync.Mutex
	mu        sync.Mutex
	acquired  bool                  // zkMu+mu
	closed    bool                  // zkMu+mu
	id        int64                 // zkMu+mu
	node      string                // zkMu; full path of the forever node; "" when started from the cache
	version   int32                 // zkMu; of the forever node, as last written or read by us
	zkUntil   int64                 // zkMu; reserved_until last written to ZooKeeper
	reported  int64                 // zkMu; last timestamp written
	session   int64                 // zkMu; the ZooKeeper session our live node belongs to
	dirty     bool                  // mu; the cache's bound is ahead of ZooKeeper's (no reuse)
	cacheHigh int64                 // mu; reserved_until in the cache
	lost      atomic.Pointer[error] // the id is no longer ours: permanent
}

// lostErr returns the error that made the id no longer ours, or nil.
func (s *ZKSource) lostErr() error {
	if p := s.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// setLost records err as lost (nil clears it) and returns it.
func (s *ZKSource) setLost(err error) error {
	if err == nil {
		s.lost.Store(nil)
	} else {
		s.lost.Store(&err)
	}
	return err
}

// NewZKSource locks the local cache and starts connecting to ZooKeeper (it does not wait for
// the connection; Acquire does).
func NewZKSource(cfg ZKConfig) (*ZKSource, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cache, err := openLocalFile(filepath.Join(cfg.DataDir, ZKCacheFile))
	if err != nil {
		return nil, err
	}
	var tok [12]byte
	if _, err := rand.Read(tok[:]); err != nil {
		cache.close()
		return nil, err
	}
	host, port, _ := net.SplitHostPort(cfg.Addr)
	s := &ZKSource{
		cfg:   cfg,
		log:   cfg.Logger,
		cache: cache,
		token: hex.EncodeToString(tok[:]),
		root:  "/snowflake/" + cfg.Name,
		ip:    host,
		port:  port,
		kick:  make(chan struct{}, 1),
	}
	conn, events, err := zk.Connect(cfg.Servers, cfg.SessionTimeout,
		zk.WithLogger(zkLogger{s.log}), zk.WithLogInfo(false))
	if err != nil {
		cache.close()
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
	for _, e := range []error{zk.ErrNoServer, zk.ErrConnectionClosed, zk.ErrSessionExpired, zk.ErrClosing,
		zk.ErrSessionMoved, context.DeadlineExceeded, context.Canceled, ErrSourceUnavailable} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (s *ZKSource) forever() string { return s.root + "/forever" }
func (s *ZKSource) livePath(id int64) string {
	return s.root + "/live/" + strconv.FormatInt(id, 10)
}

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

// Acquire returns this instance's worker id: its own node's (by ip:port), a taken-over one
// (Reuse), or a new sequential node's. With ZooKeeper unreachable it falls back to the local
// cache (no reuse) or fails with ErrSourceUnavailable.
func (s *ZKSource) Acquire(ctx context.Context) (Worker, error) {
	s.zkMu.Lock()
	defer s.zkMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Worker{}, errors.New("snowflake: source closed")
	}
	cache, hasCache, err := s.cache.read()
	if err != nil {
		return Worker{}, err
	}
	if hasCache && (cache.Name != s.cfg.Name || cache.Addr != s.cfg.Addr) {
		s.log.Warn("snowflake: local cache is for another identity; ignoring it",
			zap.String("cache_name", cache.Name), zap.String("cache_addr", cache.Addr))
		hasCache = false
	}
	w, err := s.acquireZK(ctx, cache, hasCache)
	if err == nil {
		return w, nil
	}
	if !unavailable(err) {
		return Worker{}, err
	}
	if s.cfg.Reuse || !hasCache || cache.Reuse {
		why := ""
		switch {
		case s.cfg.Reuse:
			why = " (worker reuse needs ZooKeeper to start)"
		case hasCache:
			// The previous run used reuse: its id may have been taken over since.
			why = " (the cached worker id was used with worker reuse; ZooKeeper must confirm it is still ours)"
		}
		return Worker{}, fmt.Errorf("%w: zookeeper unreachable (%v) and no usable local cache%s", ErrSourceUnavailable, err, why)
	}
	if cache.WorkerID > s.cfg.MaxWorkerID {
		return Worker{}, fmt.Errorf("snowflake: cached worker id %d above the layout's maximum %d", cache.WorkerID, s.cfg.MaxWorkerID)
	}
	s.log.Warn("snowflake: zookeeper unreachable; starting from the local cache", zap.Error(err),
		zap.Int64("worker_id", cache.WorkerID))
	s.id, s.node, s.acquired, s.dirty, s.cacheHigh = cache.WorkerID, "", true, true, cache.ReservedUntilMs
	return Worker{ID: cache.WorkerID, Bound: msTime(cache.ReservedUntilMs), Source: "zookeeper (local cache)"}, nil
}

func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func (s *ZKSource) ensurePaths(ctx context.Context) error {
	for _, p := range []string{"/snowflake", s.root, s.forever(), s.root + "/live"} {
		_, err := call(ctx, func() (string, error) { return s.conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
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

func (s *ZKSource) children(ctx context.Context) ([]foreverChild, error) {
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

type nodeData struct {
	n    zkNode
	stat *zk.Stat
}

func (s *ZKSource) getNode(ctx context.Context, path string) (zkNode, *zk.Stat, error) {
	d, err := call(ctx, func() (nodeData, error) {
		b, st, err := s.conn.Get(path)
		if err != nil {
			return nodeData{}, err
		}
		var n zkNode
		if len(b) > 0 {
			if err := json.Unmarshal(b, &n); err != nil {
				return nodeData{}, fmt.Errorf("snowflake: node %s: bad JSON: %w", path, err)
			}
		}
		return nodeData{n, st}, nil
	})
	return d.n, d.stat, err
}

func (s *ZKSource) acquireZK(ctx context.Context, cache localState, hasCache bool) (Worker, error) {
	if err := s.ensurePaths(ctx); err != nil {
		return Worker{}, err
	}
	kids, err := s.children(ctx)
	if err != nil {
		return Worker{}, err
	}
	var own *foreverChild
	for i := range kids {
		if kids[i].addr == s.cfg.Addr {
			own = &kids[i]
			break
		}
	}
	var (
		id    int64
		path  string
		bound int64
		stat  *zk.Stat
		node  zkNode
		how   string
	)
	if own != nil && s.cfg.Reuse {
		ok, err := s.claimLive(ctx, own.id, true)
		if err != nil {
			return Worker{}, err
		}
		if !ok {
			s.log.Warn("snowflake: our worker id is held by another live instance", zap.Int64("worker_id", own.id))
			own = nil
		}
	}
	switch {
	case own != nil:
		id, path, how = own.id, s.forever()+"/"+own.name, "own node"
		if node, stat, err = s.getNode(ctx, path); err != nil {
			return Worker{}, err
		}
		bound = node.bound()
		if node.Reuse && !s.cfg.Reuse {
			// Our node was last written with reuse on: it may have been taken over, or be
			// taken over while we use it. Check the holder, fence takeovers with the live node,
			// and mark the node "no reuse" before using the id.
			if node.Holder != "" && node.Holder != s.cfg.Addr {
				return Worker{}, fmt.Errorf("snowflake: worker id %d of %s was taken over by %s (worker reuse); "+
					"start this instance with --worker-reuse too, or with a new identity", own.id, s.cfg.Addr, node.Holder)
			}
			ok, err := s.claimLive(ctx, own.id, true)
			if err != nil {
				return Worker{}, err
			}
			if !ok {
				return Worker{}, fmt.Errorf("snowflake: worker id %d of %s is held by a live instance using worker reuse", own.id, s.cfg.Addr)
			}
			s.id, s.node, s.version = own.id, path, stat.Version
			if err := s.writeNodeLocked(ctx, bound); err != nil {
				s.setLost(nil)
				return Worker{}, err
			}
			stat = &zk.Stat{Version: s.version}
			node.ReservedUntil = bound
		}
	default:
		if s.cfg.Reuse {
			var ok bool
			if id, path, node, stat, ok, err = s.takeOver(ctx, kids); err != nil {
				return Worker{}, err
			}
			if ok {
				bound, how = node.bound(), "taken over"
				break
			}
		}
		if id, path, stat, err = s.createNode(ctx); err != nil {
			return Worker{}, err
		}
		how = "new node"
		if s.cfg.Reuse {
			if ok, err := s.claimLive(ctx, id, false); err != nil || !ok {
				return Worker{}, fmt.Errorf("snowflake: live node of new worker id %d: %v", id, err)
			}
		}
	}
	if id > s.cfg.MaxWorkerID {
		return Worker{}, fmt.Errorf("snowflake: worker id %d (node %s) is above the layout's maximum %d: "+
			"the worker ids of /snowflake/%s are exhausted (use a new --name, more worker bits, or --worker-reuse)",
			id, path, s.cfg.MaxWorkerID, s.cfg.Name)
	}
	if hasCache && cache.WorkerID == id {
		bound = max(bound, cache.ReservedUntilMs)
	}
	s.id, s.node, s.version, s.acquired, s.dirty = id, path, stat.Version, true, false
	s.session = s.conn.SessionID()
	s.zkUntil = node.ReservedUntil
	s.cacheHigh = bound
	if err := s.cache.write(localState{WorkerID: id, ReservedUntilMs: bound, Source: "zookeeper", Addr: s.cfg.Addr, Name: s.cfg.Name,
		Reuse: s.cfg.Reuse}); err != nil {
		return Worker{}, err
	}
	s.log.Info("snowflake: worker id from zookeeper", zap.Int64("worker_id", id), zap.String("node", path),
		zap.String("how", how), zap.Time("bound", msTime(bound)))
	return Worker{ID: id, Bound: msTime(bound), Source: "zookeeper"}, nil
}

// createNode creates our persistent sequential node and parses the worker id from its name,
// on the first start too (Leaf PR #108 returned 0 there). Ids above the maximum are deleted and
// reported as exhaustion.
func (s *ZKSource) createNode(ctx context.Context) (int64, string, *zk.Stat, error) {
	now := s.cfg.Now().UnixMilli()
	n := zkNode{IP: s.ip, Port: s.port, Timestamp: now, Reuse: s.cfg.Reuse, Holder: s.cfg.Addr, Token: s.token}
	b, _ := json.Marshal(n)
	path, err := call(ctx, func() (string, error) {
		return s.conn.Create(s.forever()+"/"+s.cfg.Addr+"-", b, zk.FlagSequence, zk.WorldACL(zk.PermAll))
	})
	if err != nil {
		return 0, "", nil, err
	}
	_, id, ok := parseNodeName(path[strings.LastIndexByte(path, '/')+1:])
	if !ok {
		return 0, "", nil, fmt.Errorf("snowflake: unexpected sequential node name %q", path)
	}
	if id > s.cfg.MaxWorkerID {
		_, _ = call(ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(path, -1) })
		return 0, "", nil, fmt.Errorf("snowflake: new worker id %d is above the layout's maximum %d: "+
			"the worker ids of /snowflake/%s are exhausted (use a new --name, more worker bits, or --worker-reuse)",
			id, s.cfg.MaxWorkerID, s.cfg.Name)
	}
	return id, path, &zk.Stat{Version: 0}, nil
}

// claimLive creates the live node of id for us. ok is false when another instance holds it. A
// live node left by an earlier incarnation of this ip:port (a crash, its session not yet
// expired) is replaced when replaceOwnAddr: no two live processes share an ip:port.
func (s *ZKSource) claimLive(ctx context.Context, id int64, replaceOwnAddr bool) (bool, error) {
	p := s.livePath(id)
	b, _ := json.Marshal(zkLive{Holder: s.cfg.Addr, Token: s.token})
	for range 3 {
		_, err := call(ctx, func() (string, error) {
			return s.conn.Create(p, b, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		})
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return false, err
		}
		type got struct {
			l  zkLive
			st *zk.Stat
		}
		g, err := call(ctx, func() (got, error) {
			b, st, err := s.conn.Get(p)
			var l zkLive
			if err == nil {
				_ = json.Unmarshal(b, &l)
			}
			return got{l, st}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return false, err
		}
		if g.l.Token == s.token {
			return true, nil
		}
		if !replaceOwnAddr || g.l.Holder != s.cfg.Addr {
			return false, nil
		}
		err = func() error {
			_, err := call(ctx, func() (struct{}, error) { return struct{}{}, s.conn.Delete(p, g.st.Version) })
			return err
		}()
		if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
			return false, err
		}
	}
	return false, nil
}

// takeOver looks for an id whose node was written with reuse on and has no live holder.
func (s *ZKSource) takeOver(ctx context.Context, kids []foreverChild) (int64, string, zkNode, *zk.Stat, bool, error) {
	for _, k := range kids {
		if k.id > s.cfg.MaxWorkerID || k.addr == s.cfg.Addr {
			continue
		}
		path := s.forever() + "/" + k.name
		n, _, err := s.getNode(ctx, path)
		if err != nil {
			if unavailable(err) {
				return 0, "", zkNode{}, nil, false, err
			}
			continue
		}
		if !n.Reuse || n.ReservedUntil == 0 {
			continue // its holder may serve beyond what ZooKeeper knows: never reuse
		}
		exists, err := call(ctx, func() (bool, error) {
			ok, _, err := s.conn.Exists(s.livePath(k.id))
			return ok, err
		})
		if err != nil {
			return 0, "", zkNode{}, nil, false, err
		}
		if exists {
			if ok, err := s.claimLive(ctx, k.id, false); err != nil || !ok {
				continue // live, and not ours
			}
		} else if ok, err := s.claimLive(ctx, k.id, false); err != nil {
			return 0, "", zkNode{}, nil, false, err
		} else if !ok {
			continue // another instance won the race
		}
		// We hold the live node. Fence: rewrite the forever node with a version check, so a
		// former holder's later writes fail; retry when it wrote in between (its bound then
		// counts, as we re-read it).
		for range 5 {
			n, st, err := s.getNode(ctx, path)
			if err != nil {
				return 0, "", zkNode{}, nil, false, err
			}
			n2 := n
			n2.Holder, n2.Token, n2.Reuse, n2.Timestamp = s.cfg.Addr, s.token, true, max(n.Timestamp, s.cfg.Now().UnixMilli())
			n2.ReservedUntil = n.bound()
			b, _ := json.Marshal(n2)
			st2, err := call(ctx, func() (*zk.Stat, error) { return s.conn.Set(path, b, st.Version) })
			if errors.Is(err, zk.ErrBadVersion) {
				continue
			}
			if err != nil {
				return 0, "", zkNode{}, nil, false, err
			}
			s.log.Warn("snowflake: taking over the worker id of a dead instance", zap.Int64("worker_id", k.id),
				zap.String("previous_holder", n.Holder), zap.Time("bound", msTime(n.bound())))
			return k.id, path, n2, st2, true, nil
		}
		return 0, "", zkNode{}, nil, false, fmt.Errorf("snowflake: node %s keeps changing during takeover", path)
	}
	return 0, "", zkNode{}, nil, false, nil
}

// writeNodeLocked writes our forever node with a version check. A version conflict that is not
// explained by a write of ours (a reply we missed) means the id was taken: s.lost is set.
func (s *ZKSource) writeNodeLocked(ctx context.Context, until int64) error {
	if err := s.lostErr(); err != nil {
		return err
	}
	now := s.cfg.Now().UnixMilli()
	n := zkNode{IP: s.ip, Port: s.port, Reuse: s.cfg.Reuse, Holder: s.cfg.Addr, Token: s.token,
		Timestamp: max(now, s.reported), ReservedUntil: until}
	if ip, port, err := net.SplitHostPort(s.nodeAddr()); err == nil {
		n.IP, n.Port = ip, port // keep Leaf's view of the node: the identity in its name
	}
	b, _ := json.Marshal(n)
	for range 3 {
		st, err := call(ctx, func() (*zk.Stat, error) { return s.conn.Set(s.node, b, s.version) })
		if err == nil {
			s.version, s.zkUntil, s.reported = st.Version, until, n.Timestamp
			return nil
		}
		if errors.Is(err, zk.ErrNoNode) {
			return s.setLost(fmt.Errorf("%w: worker id %d: node %s was deleted", ErrNoWorker, s.id, s.node))
		}
		if !errors.Is(err, zk.ErrBadVersion) {
			return fmt.Errorf("%w: %w", ErrSourceUnavailable, err)
		}
		cur, st2, err := s.getNode(ctx, s.node)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSourceUnavailable, err)
		}
		if cur.Token != s.token {
			err := s.setLost(fmt.Errorf("%w: worker id %d was taken over by %s", ErrNoWorker, s.id, cur.Holder))
			s.log.Error("snowflake: worker id lost", zap.Error(err))
			return err
		}
		s.version = st2.Version // an earlier write of ours whose reply we missed
	}
	return fmt.Errorf("%w: node %s keeps changing", ErrSourceUnavailable, s.node)
}

func (s *ZKSource) nodeAddr() string {
	addr, _, _ := parseNodeName(s.node[strings.LastIndexByte(s.node, '/')+1:])
	return addr
}

// Extend persists reserved_until. With Reuse it must reach ZooKeeper (the fence); without, the
// local cache is enough and ZooKeeper is updated in the background.
func (s *ZKSource) Extend(ctx context.Context, until time.Time) error {
	if s.cfg.Reuse {
		s.zkMu.Lock()
		defer s.zkMu.Unlock()
	}
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
	st := localState{WorkerID: s.id, ReservedUntilMs: u, Source: "zookeeper", Addr: s.cfg.Addr, Name: s.cfg.Name, Reuse: s.cfg.Reuse}
	if s.cfg.Reuse {
		if err := s.writeNodeLocked(ctx, u); err != nil {
			return err
		}
		if err := s.cache.write(st); err != nil {
			return err
		}
		s.cacheHigh = u
		return nil
	}
	if err := s.cache.write(st); err != nil {
		return err
	}
	s.cacheHigh, s.dirty = u, true
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// maintain owns the background work: drain session events, recreate the live node after a
// session expiry, copy the cached bound to ZooKeeper, report the timestamp. It ends when the
// connection's event channel is closed (after Close), which also means the client's own
// goroutines have ended.
func (s *ZKSource) maintain(events <-chan zk.Event) {
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
			case zk.StateExpired:
				s.log.Warn("snowflake: zookeeper session expired")
			case zk.StateHasSession:
				s.refresh(true)
			}
		case <-tick:
			s.refresh(false)
		case <-s.kick:
			s.refresh(false)
		}
	}
}

// refresh re-claims the live node (Reuse, after a new session) and writes the node: the
// timestamp and, without Reuse, the cache's bound.
func (s *ZKSource) refresh(session bool) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.SessionTimeout)
	defer cancel()
	s.zkMu.Lock()
	defer s.zkMu.Unlock()
	if !s.acquired || s.closed || s.lostErr() != nil {
		return
	}
	// Not s.mu across the I/O below: see zkMu.
	s.mu.Lock()
	cacheHigh, dirty := s.cacheHigh, s.dirty
	s.mu.Unlock()
	if s.node == "" && s.resolveLocked(ctx) != nil {
		return
	}
	if session {
		sid := s.conn.SessionID()
		if sid == s.session {
			return // the session the live node was created in: nothing to do
		}
		if !s.cfg.Reuse {
			s.session = sid
		}
	}
	if s.cfg.Reuse && session {
		sid := s.conn.SessionID()
		ok, err := s.claimLive(ctx, s.id, false)
		if err != nil {
			return
		}
		if !ok {
			err := s.setLost(fmt.Errorf("%w: worker id %d is held by another live instance", ErrNoWorker, s.id))
			s.log.Error("snowflake: worker id lost", zap.Error(err))
			return
		}
		s.session = sid
	}
	until := s.zkUntil
	if !s.cfg.Reuse {
		until = max(until, cacheHigh)
	}
	if now := s.cfg.Now().UnixMilli(); now < s.reported && !dirty {
		return // clock behind the last report (Leaf skips such reports too)
	}
	if err := s.writeNodeLocked(ctx, until); err != nil {
		if s.lostErr() == nil {
			s.log.Debug("snowflake: zookeeper report failed", zap.Error(err))
		}
		return
	}
	s.mu.Lock()
	if s.cacheHigh <= until { // else an Extend ran meanwhile: still dirty
		s.dirty = false
	}
	s.mu.Unlock()
}

// resolveLocked finds the node of an id taken from the cache while ZooKeeper was down.
func (s *ZKSource) resolveLocked(ctx context.Context) error {
	kids, err := s.children(ctx)
	if err != nil {
		return err
	}
	for _, k := range kids {
		if k.addr == s.cfg.Addr && k.id == s.id {
			path := s.forever() + "/" + k.name
			n, st, err := s.getNode(ctx, path)
			if err != nil {
				return err
			}
			s.node, s.version, s.zkUntil = path, st.Version, n.ReservedUntil
			s.log.Info("snowflake: zookeeper back; cached worker id confirmed", zap.Int64("worker_id", s.id))
			return nil
		}
	}
	err = s.setLost(fmt.Errorf("%w: zookeeper has no node %s-%010d for the cached worker id (was its data lost?)", ErrNoWorker, s.cfg.Addr, s.id))
	s.log.Error("snowflake: cached worker id not confirmed", zap.Error(err))
	return err
}

// Close copies a bound still only in the cache to ZooKeeper (best effort, 2s), stops the
// background work, closes the ZooKeeper session (the live node goes with it) and releases the
// cache lock. It is idempotent.
func (s *ZKSource) Close() error {
	var err error
	s.once.Do(func() {
		s.zkMu.Lock()
		s.mu.Lock()
		if s.acquired && s.dirty && s.node != "" && s.lostErr() == nil {
			// Copy the cache's bound to ZooKeeper while we can, so that a restart on another
			// data dir (or a reuse successor) sees it.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := s.writeNodeLocked(ctx, max(s.zkUntil, s.cacheHigh)); err == nil {
				s.dirty = false
			}
			cancel()
		}
		s.closed = true
		s.mu.Unlock()
		s.zkMu.Unlock()
		s.conn.Close()
		s.wg.Wait()
		err = s.cache.close()
	})
	return err
}

// WorkerID returns the acquired worker id (-1 before Acquire).
func (s *ZKSource) WorkerID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.acquired {
		return -1
	}
	return s.id
}

// DefaultAdvertiseAddr returns the identity Leaf would use for listenAddr: the first
// non-loopback IPv4 address of an up interface, with listenAddr's port; 127.0.0.1 when there is
// none.
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
	return net.JoinHostPort("127.0.0.1", port), nil
}
