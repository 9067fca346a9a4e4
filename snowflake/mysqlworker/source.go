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

// Extend persists reserved_until in the row (with a lease renewal, fenced on token and epoch)
// and in the data dir. It succeeds only for an until within the lease of the last confirmed
// renewal, counted from when that renewal was SENT (so a generator never issues past the
// moment any other instance can see the lease expired), and never while the lease has run out
// by this process's own clock (a pause, a long outage): then it re-acquires its row first and
// waits out Lease+Margin, like a taker.
func (s *Source) Extend(ctx context.Context, until time.Time) error {
	s.ioMu.Lock()
	defer s.ioMu.Unlock()
	s.mu.Lock()
	closed, held, lost := s.closed, s.held, s.lost
	s.mu.Unlock()
	switch {
	case closed:
		return errors.New("snowflake: source closed")
	case !held:
		return errors.New("snowflake: Extend before Acquire")
	case lost != nil:
		return lost
	case s.rebound:
		return s.reboundErr(s.waitingErr())
	}
	u := until.UnixMilli()
	if u <= s.accepted && s.gate.IsZero() {
		// Lowering the bound (the generator's Close, after it stopped issuing): the row keeps
		// its higher one; the data dir records the lower one, which is exact.
		return s.writeFile(u)
	}
	now := s.cfg.Clock.Now()
	if s.unsure || !now.Before(s.deadline) {
		return s.reboundErr(s.retakeLocked(ctx, now))
	}
	if !s.gate.IsZero() {
		if now.Before(s.gate) || now.UnixMilli() <= s.gateMs {
			return s.setErr(s.waitingErr())
		}
		s.mu.Lock()
		s.gate, s.gateMs = time.Time{}, 0
		s.mu.Unlock()
	}
	ok, err := s.st.Renew(ctx, s.id, s.epoch, s.token, u, s.cfg.Lease)
	switch {
	case err == nil && !ok:
		return s.reboundErr(s.retakeLocked(ctx, now)) // taken over, released or lost by a failover
	case err == nil:
		s.renewedLocked(now)
		if u > now.UnixMilli()+s.cfg.Lease.Milliseconds() {
			return s.setErr(fmt.Errorf("snowflake: reserved_until %v is beyond the worker lease %v", until.UTC(), s.cfg.Lease))
		}
	default:
		// Unknown outcome: counted as applied for the row (its bound may now be u), and as not
		// applied for the lease (the deadline stays that of the last confirmed send). Within
		// that lease, the data dir alone records u; a taker's wait covers it.
		s.mu.Lock()
		s.stats.RenewalFailures++
		s.mu.Unlock()
		if u > s.sent.UnixMilli()+s.cfg.Lease.Milliseconds() {
			return s.setErr(unavailable(fmt.Sprintf("renewing worker id %d (reserved_until %v beyond the confirmed lease)", s.id, until.UTC()), err))
		}
	}
	if err := s.writeFile(u); err != nil {
		return err
	}
	s.mu.Lock()
	s.until, s.accepted = max(s.until, u), max(s.accepted, u)
	s.mu.Unlock()
	return nil
}

// writeFile durably records u as the data dir's bound.
func (s *Source) writeFile(u int64) error {
	s.file.Lock()
	defer s.file.Unlock()
	return s.file.Write(statefile.State{WorkerID: s.id, Source: SourceName, ReservedUntilMs: u})
}

// renewedLocked records a confirmed lease write sent at sent.
func (s *Source) renewedLocked(sent time.Time) {
	s.mu.Lock()
	if sent.After(s.sent) {
		s.sent, s.deadline = sent, sent.Add(s.cfg.Lease)
	}
	s.stats.Renewals++
	s.lastErr = ""
	s.mu.Unlock()
}

// reboundErr turns err into ErrLeaseLapsed (an ErrWorkerLost, still an ErrWorkerHeld) once after a re-take: the
// generator then acquires again and gets the re-taken id with the gate as its Bound.
func (s *Source) reboundErr(err error) error {
	if !s.rebound || err == nil {
		return err
	}
	s.rebound = false
	return fmt.Errorf("%w (%w): acquiring it again so that IDs start above %v",
		snowflake.ErrLeaseLapsed, err, time.UnixMilli(s.gateMs).UTC())
}

func (s *Source) waitingErr() error {
	return fmt.Errorf("%w: worker id %d; issuing from %v (lease %v + margin %v)",
		snowflake.ErrRetakeWait, s.id, time.UnixMilli(s.gateMs).UTC(), s.cfg.Lease, s.cfg.Margin)
}

// retakeLocked re-acquires this process's worker id when its lease may be void: the lease ran
// out by this process's clock (measured from the send of its last confirmed renewal: a SIGSTOP,
// a long outage), a fenced write matched no row (taken over, released, or lost by a failover),
// or a write's outcome is unknown. It reads the row: still ours → Reclaim (epoch+1); missing
// → INSERT; free → Take (compare-and-set on version); held by another → lost (ErrWorkerLost; the generator acquires again). After a
// re-acquisition it is a taker like any other: Extend refuses until Lease+Margin have passed
// and the clock is above the row's reserved_until, so the generator issues nothing meanwhile.
// An unknown outcome counts as applied: the row is read back first on the next call.
func (s *Source) retakeLocked(ctx context.Context, now time.Time) error {
	if !now.Before(s.deadline) && !s.fenced {
		s.mu.Lock()
		s.stats.SelfFences++
		s.fenced = true
		s.mu.Unlock()
		s.log.Warn("snowflake: mysql worker lease ran out before it was renewed; re-acquiring",
			zap.Int64("worker_id", s.id), zap.Time("last_renewal_sent", s.sent), zap.Duration("lease", s.cfg.Lease))
	}
	r, ok, err := s.st.Get(ctx, s.id)
	if err != nil {
		s.unsure = true
		return s.setErr(unavailable(fmt.Sprintf("reading worker id %d to re-acquire it", s.id), err))
	}
	cl := claim{Holder: s.cfg.Holder, Instance: s.instance, Token: s.token, Layout: s.layoutString(), Lease: s.cfg.Lease}
	var wrote bool
	epoch := r.Epoch + 1
	switch {
	case ok && r.Token == s.token:
		wrote, err = s.st.Reclaim(ctx, s.id, r.Epoch, s.token, s.cfg.Lease)
	case !ok:
		wrote, err = s.st.Insert(ctx, s.id, cl)
		epoch = 1
	case r.Free:
		wrote, err = s.st.Take(ctx, s.id, r.Version, cl)
	default:
		// ErrWorkerLost: the generator stops issuing and calls Acquire again, which takes
		// another free id above every bound (the taker's wait).
		return s.setLost(fmt.Errorf("%w: worker id %d is held by %s (instance %s) since this process's lease may have run out",
			snowflake.ErrWorkerLost, s.id, r.Holder, r.Instance))
	}
	if err != nil || !wrote {
		s.unsure = true // maybe applied, or raced: read the row back next time
		if err == nil {
			err = errors.New("the row changed meanwhile")
		}
		return s.setErr(unavailable(fmt.Sprintf("re-acquiring worker id %d", s.id), err))
	}
	ack := s.cfg.Clock.Now()
	s.mu.Lock()
	s.epoch, s.unsure, s.fenced = epoch, false, false
	s.sent, s.deadline = now, now.Add(s.cfg.Lease)
	s.gate = ack.Add(s.cfg.TakerWait())
	s.gateMs = max(ack.UnixMilli()+s.cfg.TakerWait().Milliseconds(), r.ReservedUntil+1)
	s.until = max(s.until, r.ReservedUntil)
	if gb := time.UnixMilli(s.gateMs).UTC(); gb.After(s.bound) {
		s.bound = gb
	}
	s.rebound = true
	s.stats.Acquisitions++
	s.mu.Unlock()
	s.log.Warn("snowflake: mysql worker id re-acquired; issuing again after the taker's wait",
		zap.Int64("worker_id", s.id), zap.Int64("epoch", epoch), zap.Time("issuing_from", time.UnixMilli(s.gateMs)))
	return s.setErr(s.waitingErr())
}

// renewOnce renews the lease when a third of it has passed since the last confirmed send
// (the renewal goroutine's step; Extend renews too).
func (s *Source) renewOnce(ctx context.Context) {
	s.ioMu.Lock()
	defer s.ioMu.Unlock()
	s.mu.Lock()
	skip := s.closed || !s.held || s.lost != nil
	s.mu.Unlock()
	if skip {
		return
	}
	now := s.cfg.Clock.Now()
	if now.Sub(s.sent) < s.cfg.Lease/3 {
		return
	}
	if s.unsure || !now.Before(s.deadline) {
		_ = s.retakeLocked(ctx, now)
		return
	}
	ok, err := s.st.Renew(ctx, s.id, s.epoch, s.token, s.until, s.cfg.Lease)
	switch {
	case err != nil:
		s.mu.Lock()
		s.stats.RenewalFailures++
		s.lastErr = err.Error()
		s.mu.Unlock()
		s.log.Debug("snowflake: mysql worker lease renewal failed", zap.Error(err))
	case !ok:
		_ = s.retakeLocked(ctx, now)
	default:
		s.renewedLocked(now)
	}
}

func (s *Source) renewLoop() {
	defer s.wg.Done()
	step := max(s.cfg.Lease/6, 10*time.Millisecond)
	for {
		t := s.cfg.Clock.NewTimer(step)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.QueryTimeout)
		s.renewOnce(ctx)
		cancel()
	}
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
