package mysqlworker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

// SourceName is the Worker.Source and the data dir state's source of this package.
const SourceName = "mysql"

// ErrIDsExhausted (wrapped, with snowflake.ErrWorkerHeld): every worker id of the layout is
// leased by a live instance. The generator answers NOWORKER and keeps trying: an id comes free
// when its holder stops or its lease runs out. Never a wrap to a used id.
var ErrIDsExhausted = errors.New("snowflake: every worker id is leased")

var (
	_ snowflake.WorkerSource  = (*Source)(nil)
	_ snowflake.LayoutUser    = (*Source)(nil)
	_ snowflake.LeaseReporter = (*Source)(nil)
)

// Status is a snapshot of the source for INFO, /status and metrics.
type Status struct {
	WorkerID        int64     // -1 without one
	Held            bool      // a worker id is held and not lost
	LeaseDeadline   time.Time // the self-fence: nothing is issued from here on without a renewal
	LastRenewal     time.Time // when the last confirmed renewal was sent (zero: none)
	Waiting         time.Time // non-zero: a re-acquired id issues nothing before this
	Acquisitions    uint64
	Renewals        uint64
	RenewalFailures uint64
	SelfFences      uint64
	Lease           time.Duration
	LastError       string
}

// Source takes snowflake worker ids from the leafd_worker table. See the package doc for the
// fences and the failover argument.
type Source struct {
	cfg      Config
	log      *zap.Logger
	st       store
	file     *statefile.File
	instance string
	stop     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once

	// ioMu serialises the table I/O of this source and is held across it (never on the request
	// path: Acquire and Extend run in the generator's background goroutine, renewals in the
	// source's). mu guards the fields below for Status; written under both, read under either.
	ioMu     sync.Mutex
	mu       sync.Mutex
	ensured  bool
	closed   bool
	held     bool
	lost     error
	id       int64
	epoch    int64
	token    string
	bound    time.Time // the Worker.Bound handed out for this acquisition
	sent     time.Time // send time (clock.Now) of the last confirmed lease write
	deadline time.Time // sent + Lease: the self-fence
	gate     time.Time // after a re-acquisition: Extend fails until the clock is past it
	gateMs   int64     // the same, as wall-clock ms (both must be passed)
	unsure   bool      // a write's outcome is unknown (or raced): read the row before writing
	fenced   bool      // the self-fence was counted for the current lapse
	// rebound: the id was re-taken after a lapse (retakeLocked) and the generator has not
	// been told yet: the next Extend answers ErrWorkerLost, so that the generator acquires
	// again (the same id, Bound = the gate) and raises its floor to the gate. Without it a
	// clock step back after the gate passed would let it issue below the bound of whoever
	// held the id meanwhile.
	rebound  bool
	pending  *pendingAcq
	until    int64 // the highest reserved_until accepted (Extend) or carried (Acquire, re-take)
	accepted int64 // the highest until Extend accepted for this acquisition
	lastErr  string
	stats    Status
}

type pendingAcq struct {
	id    int64
	token string
	sent  time.Time
}

// NewSource opens the data dir's state (locked) and the database pool, and starts the renewal
// goroutine. It does not reach the database; Acquire does.
func NewSource(cfg Config) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DSN == "" {
		return nil, errors.New("snowflake: mysql worker source: Config.DSN is empty")
	}
	c := cfg.withDefaults()
	st, err := openSQL(c.DSN, c.QueryTimeout)
	if err != nil {
		return nil, err
	}
	s, err := newSource(c, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	s.wg.Add(1)
	go s.renewLoop()
	return s, nil
}

// newSource builds a source on st without the renewal goroutine (tests drive renewals).
func newSource(cfg Config, st store) (*Source, error) {
	cfg = cfg.withDefaults()
	if cfg.Holder == "" {
		cfg.Holder, _ = os.Hostname()
	}
	f, err := statefile.Open(filepath.Join(cfg.DataDir, snowflake.LocalStateFile))
	if err != nil {
		return nil, err
	}
	return &Source{cfg: cfg, log: cfg.Logger, st: st, file: f, instance: f.Instance(), stop: make(chan struct{}), id: -1,
		stats: Status{Lease: cfg.Lease}}, nil
}

// UseLayout implements snowflake.LayoutUser: the data dir and the table's rows record it.
func (s *Source) UseLayout(l snowflake.Layout) {
	s.file.Lock()
	s.file.SetWant(snowflake.LayoutRecord(l))
	s.file.Unlock()
}

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func unavailable(what string, err error) error {
	return fmt.Errorf("%w: mysql: %s: %v", snowflake.ErrSourceUnavailable, what, err)
}

func (s *Source) setErr(err error) error {
	s.mu.Lock()
	s.lastErr = err.Error()
	s.mu.Unlock()
	return err
}

func (s *Source) layoutString() string {
	if w := s.file.Want(); w != nil {
		return w.String()
	}
	return ""
}

// Acquire takes a worker id: the data dir's previous one when it is free, else the lowest free
// row, else the lowest id without a row (INSERT; the primary key decides a race). The Bound it
// returns is the highest of the row's reserved_until (the previous holders'), the data dir's
// bound, and the clock at the acquisition plus Lease+Margin (the taker's wait, which covers
// a holder whose rows a failover lost). Called again while the id is held, it returns the same
// worker; after a loss it acquires anew.
func (s *Source) Acquire(ctx context.Context) (snowflake.Worker, error) {
	s.ioMu.Lock()
	defer s.ioMu.Unlock()
	s.mu.Lock()
	closed, held, lost := s.closed, s.held, s.lost
	s.mu.Unlock()
	if closed {
		return snowflake.Worker{}, errors.New("snowflake: source closed")
	}
	if held && lost == nil {
		return snowflake.Worker{ID: s.id, Bound: s.bound, Source: SourceName}, nil
	}
	s.file.Lock()
	st, ok, err := s.file.Read()
	if err == nil {
		err = s.file.CheckLayout(st)
	}
	want := s.layoutString()
	s.file.Unlock()
	if err != nil {
		return snowflake.Worker{}, err
	}
	dirBound, prefer := int64(0), int64(-1)
	if ok {
		dirBound = st.ReservedUntilMs
		if st.Source == SourceName {
			prefer = st.WorkerID
		}
	}
	if !s.ensured && !s.cfg.NoCreateTable {
		if err := s.st.Ensure(ctx); err != nil {
			return snowflake.Worker{}, s.setErr(unavailable("create table "+Table, err))
		}
		s.ensured = true
	}
	// An acquisition whose outcome was unknown counts as applied until the row says otherwise.
	if p := s.pending; p != nil {
		r, ok, err := s.st.Get(ctx, p.id)
		if err != nil {
			return snowflake.Worker{}, s.setErr(unavailable("reading back an unconfirmed acquisition", err))
		}
		s.pending = nil
		if ok && r.Token == p.token {
			return s.acquired(r, p.token, p.sent, r.ReservedUntil, dirBound)
		}
	}
	rows, err := s.st.List(ctx)
	if err != nil {
		return snowflake.Worker{}, s.setErr(unavailable("list "+Table, err))
	}
	used := make(map[int64]bool, len(rows))
	var free []row
	for _, r := range rows {
		used[r.ID] = true
		if want != "" && r.Layout != "" && r.Layout != want {
			return snowflake.Worker{}, fmt.Errorf("%w: worker id %d in %s was used with %s, this run has %s; IDs of the earlier runs would be issued again",
				statefile.ErrLayoutChanged, r.ID, Table, r.Layout, want)
		}
		if r.Free && r.ID <= s.cfg.MaxWorkerID {
			if r.ID == prefer {
				free = append([]row{r}, free...)
			} else {
				free = append(free, r)
			}
		}
	}
	cl := claim{Holder: s.cfg.Holder, Instance: s.instance, Layout: want, Lease: s.cfg.Lease}
	for _, r := range free {
		cl.Token = newToken()
		sent := s.cfg.Clock.Now()
		ok, err := s.st.Take(ctx, r.ID, r.Version, cl)
		if err != nil {
			s.pending = &pendingAcq{id: r.ID, token: cl.Token, sent: sent}
			return snowflake.Worker{}, s.setErr(unavailable(fmt.Sprintf("take worker id %d (outcome unknown, counted as taken)", r.ID), err))
		}
		if ok {
			// The compare-and-set on version proves r.ReservedUntil is the row's bound as it was
			// taken: any later write of the previous holder would have changed the version.
			r.Epoch++
			return s.acquired(r, cl.Token, sent, r.ReservedUntil, dirBound)
		}
	}
	for id := int64(0); id <= s.cfg.MaxWorkerID; id++ {
		if used[id] {
			continue
		}
		cl.Token = newToken()
		sent := s.cfg.Clock.Now()
		ok, err := s.st.Insert(ctx, id, cl)
		if err != nil {
			s.pending = &pendingAcq{id: id, token: cl.Token, sent: sent}
			return snowflake.Worker{}, s.setErr(unavailable(fmt.Sprintf("insert worker id %d (outcome unknown, counted as taken)", id), err))
		}
		if ok {
			return s.acquired(row{ID: id, Epoch: 1}, cl.Token, sent, 0, dirBound)
		}
	}
	return snowflake.Worker{}, s.setErr(fmt.Errorf("%w: %w: all %d worker ids (0-%d) in %s are leased by live instances (or were taken meanwhile)",
		snowflake.ErrWorkerHeld, ErrIDsExhausted, s.cfg.MaxWorkerID+1, s.cfg.MaxWorkerID, Table))
}

// acquired records the held row (ioMu held). sent is when the acquiring write was sent.
func (s *Source) acquired(r row, token string, sent time.Time, rowBound, dirBound int64) (snowflake.Worker, error) {
	now := s.cfg.Clock.Now()
	// The taker's wait: nothing below the clock at the acquisition plus Lease+Margin.
	waitMs := now.UnixMilli() + s.cfg.TakerWait().Milliseconds()
	b := max(rowBound, dirBound, waitMs)
	s.file.Lock()
	err := s.file.Write(statefile.State{WorkerID: r.ID, Source: SourceName, ReservedUntilMs: dirBound})
	s.file.Unlock()
	if err != nil {
		return snowflake.Worker{}, err
	}
	s.mu.Lock()
	s.held, s.lost, s.id, s.epoch, s.token = true, nil, r.ID, r.Epoch, token
	s.sent, s.deadline = sent, sent.Add(s.cfg.Lease)
	s.bound = time.UnixMilli(b).UTC()
	s.until, s.accepted = max(rowBound, dirBound), 0
	s.gate, s.gateMs, s.unsure = time.Time{}, 0, false
	s.stats.Acquisitions++
	s.lastErr = ""
	s.mu.Unlock()
	s.log.Info("snowflake: mysql worker id acquired", zap.Int64("worker_id", r.ID), zap.Int64("epoch", r.Epoch),
		zap.Time("start_bound", s.bound), zap.Int64("previous_reserved_until", rowBound), zap.Duration("lease", s.cfg.Lease))
	return snowflake.Worker{ID: r.ID, Bound: s.bound, Source: SourceName}, nil
}

func (s *Source) setLost(err error) error {
	s.mu.Lock()
	s.lost = err
	s.lastErr = err.Error()
	s.mu.Unlock()
	s.log.Error("snowflake: mysql worker id lost", zap.Int64("worker_id", s.id), zap.Error(err))
	return err
}

// Close stops the renewals, releases the row (token ”, lease expired; reserved_until kept at
// least as high) and the data dir. The generator has stopped issuing and lowered its bound
// before. It is idempotent.
func (s *Source) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		s.ioMu.Lock()
		defer s.ioMu.Unlock()
		s.mu.Lock()
		s.closed = true
		release := s.held && s.lost == nil && !s.unsure
		s.mu.Unlock()
		if release {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.QueryTimeout)
			if _, rerr := s.st.Release(ctx, s.id, s.epoch, s.token, s.until); rerr != nil {
				s.log.Warn("snowflake: releasing the mysql worker id failed; it comes free when its lease runs out", zap.Error(rerr))
			}
			cancel()
		}
		err = errors.Join(s.st.Close(), s.file.Close())
	})
	return err
}

// LeaseInfo implements snowflake.LeaseReporter.
func (s *Source) LeaseInfo() snowflake.LeaseInfo {
	st := s.Status()
	return snowflake.LeaseInfo{Lease: st.Lease, Deadline: st.LeaseDeadline, LastRenewal: st.LastRenewal,
		Acquisitions: st.Acquisitions, Renewals: st.Renewals, RenewalFailures: st.RenewalFailures, SelfFences: st.SelfFences}
}

// Status returns a snapshot.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.WorkerID, st.Held = -1, s.held && s.lost == nil && !s.closed
	if s.held {
		st.WorkerID = s.id
		st.LeaseDeadline, st.LastRenewal = s.deadline, s.sent
		st.Waiting = s.gate
	}
	st.LastError = s.lastErr
	return st
}
