package zk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	gozk "github.com/go-zookeeper/zk"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/leafd/leafd/internal/quietlog"
	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

var _ snowflake.WorkerSource = (*Source)(nil)

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
// NOWORKER (snowflake.ErrWorkerHeld) until the holder is gone. The fence is the state node's
// reserved_until, not the ephemeral node (which a paused process can lose without noticing):
// an instance issues only below the reserved_until it has written to the state node with a
// version check, plus OutageTolerance while ZooKeeper cannot be reached. A successor from another
// data dir rewrites the state node (bumping its version, so every later write of the old holder
// fails, it stops and acquires again: snowflake.ErrWorkerLost) and starts above the reserved_until it read plus the holder's
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
// If ZooKeeper is unreachable on start, the cached id is used only with proof that no other
// process can hold it (outageRefusal, acquire.go) and within the outage tolerance.
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
	wg       sync.WaitGroup // the maintain goroutine
	once     sync.Once

	// The goroutines of call: each runs one ZooKeeper operation and may outlive the context of
	// its caller. Close stops them (closing the connection fails every pending operation) and
	// waits for them; a call after Close starts none.
	callMu     sync.Mutex
	calls      sync.WaitGroup
	callsEnded bool // callMu

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
	lost      atomic.Pointer[error] // the id is no longer ours: ErrWorkerLost until Acquire runs again; else (state node deleted) for good
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
		gozk.WithLogger(zkLogger{quietlog.New(s.log, quietlog.DefaultEvery, nil)}), gozk.WithLogInfo(false))
	if err != nil {
		cache.Close()
		return nil, fmt.Errorf("snowflake: zookeeper: %w", err)
	}
	s.conn = conn
	s.wg.Add(1)
	go s.maintain(events)
	return s, nil
}

// zkLogger takes the ZooKeeper client's own lines (a failed connection attempt per server and
// try during an outage) at Debug, each kind (its format) once and then in a summary at most
// every 10 s.
type zkLogger struct{ q *quietlog.Log }

func (z zkLogger) Printf(format string, args ...any) {
	z.q.Fail(zapcore.DebugLevel, "zookeeper client: "+strings.TrimSpace(format), fmt.Errorf(format, args...))
}

// call runs one ZooKeeper operation of s bounded by ctx (the client itself only gives up after a
// whole round of failed connection attempts). The operation may still complete after ctx ends:
// its goroutine belongs to s, and Close waits for it.
func call[T any](s *Source, ctx context.Context, f func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	var zero T
	s.callMu.Lock()
	if s.callsEnded {
		s.callMu.Unlock()
		return zero, fmt.Errorf("zookeeper: %w", gozk.ErrClosing)
	}
	s.calls.Add(1)
	s.callMu.Unlock()
	ch := make(chan res, 1)
	go func() {
		defer s.calls.Done()
		v, err := f()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
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
		s.callMu.Lock()
		s.callsEnded = true
		s.callMu.Unlock()
		s.conn.Close() // fails every pending operation, ends the event channel
		s.wg.Wait()
		s.calls.Wait()
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
