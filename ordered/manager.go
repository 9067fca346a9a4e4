package ordered

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leafd/leafd/internal/clock"
	"go.uber.org/zap"
)

// Catalog tells which tags are ORDERED (MySQL: leafd_leader; embedded: a bbolt bucket).
type Catalog interface {
	IsOrdered(ctx context.Context, tag string) (bool, error)
	List(ctx context.Context) ([]string, error)
}

// Releaser gives a lease back early (a graceful shutdown, after the holder stopped serving):
// *MySQLLeases. row is the row as the holder's latest write left it; a row written since is
// left alone.
type Releaser interface {
	Release(ctx context.Context, tag string, row Row) error
}

// Errors of the Manager, matched with errors.Is.
var (
	// ErrNotLeader: the tag is ordered and this instance is not serving it now.
	ErrNotLeader = errors.New("ordered: not the leader of the tag")
	// ErrUnknownOrder: the store could not tell whether the tag is ordered.
	ErrUnknownOrder = errors.New("ordered: cannot tell whether the tag is ordered")
	// ErrOtherSpelling: the name is an ordered tag's under another letter case (a
	// case-insensitive collation); an ordered tag answers to its stored spelling only.
	ErrOtherSpelling = errors.New("ordered: another spelling of an ordered tag")
)

// ManagerConfig configures a Manager. Zero fields take the defaults given.
type ManagerConfig struct {
	// Holder is this instance in the leases: its advertised RESP address, the address the
	// other instances forward the tag's commands to. Required unless Local.
	Holder string
	// Length of the lease on the store's clock (default 3s) and Margin taken off the local
	// deadline (default Length/10): see Config.
	Length, Margin time.Duration
	// Local: the embedded store, single-instance by construction (its data dir is locked):
	// every ordered tag is led here, no lease is kept.
	Local bool
	// MaxTags bounds the ordered tags tracked (default 10,000); beyond it a newly seen one is
	// refused (ErrUnknownOrder), never served as an ordinary tag.
	MaxTags int
	// Timeout bounds one store call (default Length/3).
	Timeout time.Duration
	// Manual: Start starts no goroutine; the caller runs the lease calls with Round (tests
	// that drive the lease with a fake clock).
	Manual bool
	Clock  clock.Clock
	Log    *zap.Logger
}

func (c ManagerConfig) withDefaults() ManagerConfig {
	if c.Length == 0 {
		c.Length = 3 * time.Second
	}
	if c.Margin == 0 {
		c.Margin = c.Length / 10
	}
	if c.MaxTags == 0 {
		c.MaxTags = 10000
	}
	if c.Timeout == 0 {
		c.Timeout = c.Length / 3
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	return c
}

// Manager keeps the lease of every ordered tag this instance has seen, on one goroutine: the
// leader renews every Length/3, the others watch the holder and campaign once its lease can
// have lapsed. On a new term it drops the tag's held segments (Start's drop) before serving,
// so that the first range of the term is leased fresh from the store, above every range of
// the earlier terms. Safe for concurrent use.
type Manager struct {
	cfg   ManagerConfig
	cat   Catalog
	store Store // nil when Local

	tags atomic.Pointer[map[string]*Tag] // copy-on-write: Lookup reads without a lock
	n    atomic.Int64                    // len(*tags): the ordinary tags' check is one load while 0
	mu   sync.Mutex                      // writers of tags

	self   string // the lease holder name: Holder + holderSep + a random token
	watch  *serverWatch
	drop   func(tag string)
	kick   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	listed atomic.Bool // a List succeeded
	// nextList: when the next list of the ordered tags is due (its caller only: Round, or
	// listLoop when listApart).
	nextList  time.Time
	listApart bool // set by Start before the goroutines: listLoop lists, Round does not

	// Counters for /status.json and metrics (the handler adds the forwarding ones).
	Forwarded, ForwardErrors, TryAgain atomic.Int64
}

// NewManager returns a Manager; st is the lease store (nil with Local).
func NewManager(cfg ManagerConfig, cat Catalog, st Store) (*Manager, error) {
	cfg = cfg.withDefaults()
	if cat == nil || (!cfg.Local && (st == nil || cfg.Holder == "")) {
		return nil, errors.New("ordered: a manager needs a catalog and, unless local, a lease store and a holder")
	}
	if cfg.Length < 0 || cfg.Margin < 0 || cfg.Margin >= cfg.Length || cfg.MaxTags < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("ordered: lease length %v, margin %v: need 0 <= margin < length", cfg.Length, cfg.Margin)
	}
	m := &Manager{cfg: cfg, cat: cat, store: st, kick: make(chan struct{}, 1), watch: &serverWatch{}}
	// The lease's holder is the address and a token of this process: two instances that
	// advertise the same address by mistake (the default 127.0.0.1:6380 on two hosts) or a
	// restart at the same address are never taken for the same holder.
	var tok [6]byte
	_, _ = rand.Read(tok[:])
	m.self = cfg.Holder + holderSep + hex.EncodeToString(tok[:])
	empty := map[string]*Tag{}
	m.tags.Store(&empty)
	return m, nil
}

// holderSep separates the advertised address from the process token in a lease's holder.
const holderSep = "#"

// HolderAddr is the advertised address of a lease holder ("addr#token").
func HolderAddr(holder string) string {
	if i := strings.LastIndex(holder, holderSep); i >= 0 {
		return holder[:i]
	}
	return holder
}

// Local reports whether the manager serves every ordered tag here (the embedded store).
func (m *Manager) Local() bool { return m.cfg.Local }

// Holder is this instance's name in the leases (its advertised address).
func (m *Manager) Holder() string { return m.cfg.Holder }

// Length is the lease length.
func (m *Manager) Length() time.Duration { return m.cfg.Length }

// Start lists the ordered tags (within Timeout; a failure is retried by the loop) and starts
// the lease goroutine. drop removes a tag's held segments (segment.Generator.Retire). With
// Local nothing runs. Close stops it.
func (m *Manager) Start(ctx context.Context, drop func(tag string)) {
	m.drop = drop
	m.refreshList(ctx)
	m.nextList = m.cfg.Clock.Now().Add(m.cfg.Length)
	if m.cfg.Local || m.cfg.Manual {
		return
	}
	ctx, m.cancel = context.WithCancel(context.Background())
	m.listApart = true
	m.wg.Add(2)
	go m.run(ctx)
	go m.listLoop(ctx)
}

// Close stops the lease goroutine and waits for it; the leases held are given back when the
// store can (Releaser) after this instance stopped serving them, and a store that is an
// io.Closer is closed. Idempotent.
func (m *Manager) Close() error {
	m.once.Do(func() {
		if m.cfg.Local {
			return
		}
		if m.cancel != nil {
			m.cancel()
			m.wg.Wait()
		}
		rel, _ := m.store.(Releaser)
		for _, t := range *m.tags.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
			if err := t.lease.Release(ctx, rel); err != nil {
				m.cfg.Log.Warn("ordered: lease not released; the others wait it out", zap.String("tag", t.Name), zap.Error(err))
			}
			cancel()
		}
		if c, ok := m.store.(io.Closer); ok { // the lease statements' connection (MySQLLeases)
			_ = c.Close()
		}
	})
	return nil
}

// Lookup returns the ordered tag of that name this instance knows, nil for any other tag. It
// takes no lock and allocates nothing; while no ordered tag is known it is one atomic load.
func (m *Manager) Lookup(tag string) *Tag {
	if m == nil || m.n.Load() == 0 {
		return nil
	}
	return (*m.tags.Load())[tag]
}

// Add makes tag known as ordered (IDS.CREATE ... ORDERED here, or found in the store) and
// wakes the lease goroutine to campaign for it. Any segment of it held here is dropped unless
// this instance serves it: it may date from before the tag was known to be ordered.
func (m *Manager) Add(tag string) (*Tag, error) { return m.add(tag, true) }

func (m *Manager) add(tag string, drop bool) (*Tag, error) {
	m.mu.Lock()
	old := *m.tags.Load()
	if t := old[tag]; t != nil {
		m.mu.Unlock()
		return t, nil
	}
	if len(old) >= m.cfg.MaxTags {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %q: this instance tracks %d ordered tags already (the limit)", ErrUnknownOrder, tag, len(old))
	}
	tag = strings.Clone(tag)
	t := &Tag{Name: tag, m: m, stepped: make(chan struct{})}
	if !m.cfg.Local {
		l, err := New(Config{Tag: tag, Holder: m.self, Length: m.cfg.Length, Margin: m.cfg.Margin, Clock: m.cfg.Clock, watch: m.watch}, m.store)
		if err != nil {
			m.mu.Unlock()
			return nil, err
		}
		t.lease = l
	}
	nm := make(map[string]*Tag, len(old)+1)
	for k, v := range old {
		nm[k] = v
	}
	nm[tag] = t
	m.tags.Store(&nm)
	m.n.Store(int64(len(nm)))
	m.mu.Unlock()
	if !m.cfg.Local {
		if drop && m.drop != nil {
			m.drop(tag)
		}
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
	return t, nil
}

// Admit is segment.Config.Admit: asked after a tag's first range was leased here and before
// it is served. nil for a tag that is not ordered, or that this instance serves now;
// ErrNotLeader for an ordered tag led elsewhere (the tag is then known: Lookup finds it);
// ErrUnknownOrder when the store cannot tell.
func (m *Manager) Admit(ctx context.Context, tag string) error {
	if m.cfg.Local {
		return nil
	}
	t := m.Lookup(tag)
	if t == nil {
		ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
		ok, err := m.cat.IsOrdered(ctx, tag)
		cancel()
		if errors.Is(err, ErrOtherSpelling) {
			return err
		}
		if err != nil {
			return fmt.Errorf("%w: %q: %v", ErrUnknownOrder, tag, err)
		}
		if !ok {
			return nil
		}
		// Not dropped here: the buffer being loaded fails with this error and goes.
		if t, err = m.add(tag, false); err != nil {
			return err
		}
	}
	if _, ok := t.Serving(); ok {
		return nil
	}
	return fmt.Errorf("%w: %q", ErrNotLeader, tag)
}

// List lists the ordered tags of the store (within Timeout); nil when the tags are served
// locally (the embedded store: no leases). segment.Config.Ordered.
func (m *Manager) List(ctx context.Context) ([]string, error) {
	if m.cfg.Local {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	return m.cat.List(ctx)
}

// IsOrdered reports whether tag is ordered: known here, or else asked of the store.
func (m *Manager) IsOrdered(ctx context.Context, tag string) (bool, error) {
	if m.Lookup(tag) != nil {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	return m.cat.IsOrdered(ctx, tag)
}

func (m *Manager) run(ctx context.Context) {
	defer m.wg.Done()
	clk := m.cfg.Clock
	for {
		due := m.Round(ctx)
		if ctx.Err() != nil {
			return
		}
		tm := clk.NewTimer(max(0, due.Sub(clk.Now())))
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-m.kick:
			tm.Stop()
		case <-tm.C():
		}
	}
}

// Round runs the lease calls that are due now (each tag's renewal or campaign, and with
// Manual the list of ordered tags every Length) and returns when the next is due. The lease goroutine calls it;
// so do tests with Manual (never both, nor two callers at once).
func (m *Manager) Round(ctx context.Context) time.Time {
	clk := m.cfg.Clock
	due := clk.Now().Add(m.cfg.Length)
	if !m.listApart {
		if !clk.Now().Before(m.nextList) {
			m.refreshList(ctx)
			m.nextList = clk.Now().Add(m.cfg.Length)
		}
		due = m.nextList
	}
	for _, t := range *m.tags.Load() {
		if ctx.Err() != nil {
			return due
		}
		if !clk.Now().Before(t.next) {
			m.step(ctx, t)
		}
		if t.next.Before(due) {
			due = t.next
		}
	}
	return due
}

// step renews or campaigns for t once and schedules its next turn.
func (m *Manager) step(ctx context.Context, t *Tag) {
	clk := m.cfg.Clock
	renewEvery := m.cfg.Length / 3
	retry := max(m.cfg.Length/20, time.Millisecond)
	// A leader's renewal may take until its deadline: cut at a third of the lease, a
	// round trip near that bound would fail (and lose its connection) on any hiccup.
	timeout := m.cfg.Timeout
	if ls := t.lease.State(); ls.Leader {
		timeout = max(timeout, ls.Until.Sub(clk.Now()))
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	_, wasServing := t.Serving()
	// The next turn counts from this one's start, as the deadline counts from its send: a
	// slow round trip does not push the renewals toward the deadline.
	start := clk.Now()
	s, err := t.lease.Renew(cctx)
	cancel()
	defer t.markStepped()
	now := clk.Now()
	if err != nil {
		if errors.Is(err, ErrNotOrdered) { // its row was deleted: no longer ordered
			m.remove(t.Name)
			return
		}
		msg := err.Error()
		if p := t.lastErr.Load(); p == nil || *p != msg {
			m.cfg.Log.Warn("ordered: lease call failed; the lease runs out by itself", zap.String("tag", t.Name), zap.Error(err))
		}
		t.lastErr.Store(&msg)
		t.next = now.Add(retry)
		return
	}
	t.lastErr.Store(nil)
	if !s.Leader {
		if wasServing {
			m.cfg.Log.Warn("ordered: lease lost; stopped serving the tag", zap.String("tag", t.Name), zap.String("holder", s.Holder))
		}
		t.next = start.Add(renewEvery)
		if s.HolderUntil.Before(t.next) { // campaign as soon as the holder's lease can have lapsed
			t.next = s.HolderUntil.Add(time.Millisecond)
		}
		return
	}
	if s.NewTerm {
		// Before the term serves: the held segments (of an earlier term of ours, a remainder,
		// a warm start) go, so the first range is leased now, above every earlier term's.
		if m.drop != nil {
			m.drop(t.Name)
		}
		t.active.Store(s.Term)
		m.cfg.Log.Info("ordered: leader of the tag", zap.String("tag", t.Name), zap.Int64("epoch", s.Epoch),
			zap.Time("serves_from", s.From))
	}
	t.next = start.Add(renewEvery)
}
