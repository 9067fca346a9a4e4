package mysqlworker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/internal/statefile"
)

const (
	lease        = 6 * time.Second
	margin       = time.Second
	t0ms   int64 = 1_800_000_000_000
)

// fixture: a fake database clock and table shared by the sources of a test.
type fixture struct {
	t  *testing.T
	db *clock.Fake
	st *fakeStore
}

func newFixture(t *testing.T) *fixture {
	db := clock.NewFakeMs(t0ms)
	return &fixture{t: t, db: db, st: newFakeStore(db)}
}

// source opens a source on the fixture's table with clock clk (nil: the database's clock).
func (fx *fixture) source(clk *clock.Fake, max int64) *Source {
	fx.t.Helper()
	if clk == nil {
		clk = fx.db
	}
	s, err := newSource(Config{DataDir: fx.t.TempDir(), Holder: "h", Lease: lease, Margin: margin, MaxWorkerID: max, Clock: clk}, fx.st)
	if err != nil {
		fx.t.Fatal(err)
	}
	s.UseLayout(snowflake.DefaultLayout())
	fx.t.Cleanup(func() { _ = s.Close() })
	return s
}

func acquire(t *testing.T, s *Source) snowflake.Worker {
	t.Helper()
	w, err := s.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return w
}

func extend(s *Source, until time.Time) error { return s.Extend(context.Background(), until) }

// TestCASTakeover: a row held by a live lease is not taken; once its lease has expired on the
// database's clock, the next Acquire takes it (epoch+1), and the old holder's next write fails
// (lost, ErrNoWorker). A taker with a stale version loses the race.
func TestCASTakeover(t *testing.T) {
	fx := newFixture(t)
	a, b, other := fx.source(nil, 1), fx.source(nil, 1), fx.source(nil, 1)
	wa := acquire(t, a)
	acquire(t, other) // id 1, renewed below
	if _, err := b.Acquire(context.Background()); !errors.Is(err, ErrIDsExhausted) || !errors.Is(err, snowflake.ErrWorkerHeld) {
		t.Fatalf("id 0 held: want ErrIDsExhausted (ErrWorkerHeld), got %v", err)
	}
	fx.db.Add(lease / 2)
	other.renewOnce(context.Background())
	fx.db.Add(lease / 2) // a stopped renewing
	wb := acquire(t, b)
	if wb.ID != wa.ID {
		t.Fatalf("b got %d, want the expired %d", wb.ID, wa.ID)
	}
	if r, _ := fx.st.get(0); r.Epoch != 2 || r.Token != b.token {
		t.Fatalf("row after takeover: %+v", r.row)
	}
	if err := extend(a, fx.db.Now().Add(time.Second)); !errors.Is(err, snowflake.ErrNoWorker) {
		t.Fatalf("old holder's write after the takeover: want ErrNoWorker, got %v", err)
	}
	// A stale version: the row moved on between the read and the compare-and-set.
	r, _ := fx.st.get(0)
	fx.db.Add(2 * lease)
	if ok, _ := fx.st.Take(context.Background(), 0, r.Version-1, claim{Token: "x", Lease: lease}); ok {
		t.Fatal("Take with a stale version succeeded")
	}
}

// TestSendTimeDeadline: the lease deadline counts from when the renewal was SENT. A renewal
// that takes 4s to answer still leaves its sender a deadline of send+Lease: at send+Lease the
// source self-fences (Extend re-acquires and refuses) although only Lease-4s have passed since
// the answer.
func TestSendTimeDeadline(t *testing.T) {
	fx := newFixture(t)
	s := fx.source(nil, 3)
	acquire(t, s)
	fx.db.Add(lease / 2)
	fx.st.slow["renew"], fx.st.slowClk = 4*time.Second, fx.db
	sent := fx.db.Now()
	s.renewOnce(context.Background()) // sent at `sent`, answered 4s later
	delete(fx.st.slow, "renew")
	if got := s.Status().LeaseDeadline; !got.Equal(sent.Add(lease)) {
		t.Fatalf("deadline %v, want send time + lease %v", got, sent.Add(lease))
	}
	fx.db.Set(sent.Add(lease).UnixMilli())
	err := extend(s, fx.db.Now().Add(time.Second))
	if err == nil || !strings.Contains(err.Error(), "re-acquired after its lease may have run out") {
		t.Fatalf("Extend at send+Lease: want the self-fence, got %v", err)
	}
	if st := s.Status(); st.SelfFences != 1 {
		t.Fatalf("self-fences %d, want 1", st.SelfFences)
	}
}

// TestExtendWithinLease: an Extend whose until reaches past the lease of its own (confirmed)
// renewal is refused; and after a renewal of unknown outcome the data dir alone accepts an
// until only within the lease of the last confirmed send.
func TestExtendWithinLease(t *testing.T) {
	fx := newFixture(t)
	s := fx.source(nil, 3)
	acquire(t, s)
	now := fx.db.Now()
	if err := extend(s, now.Add(lease+time.Millisecond)); err == nil {
		t.Fatal("until beyond the lease accepted")
	}
	fx.db.Add(time.Second)
	fx.st.fail["renew"] = true
	if err := extend(s, fx.db.Now().Add(3*time.Second)); err != nil {
		t.Fatalf("renewal failed, until within the confirmed lease: want accepted, got %v", err)
	}
	confirmed := s.Status().LastRenewal
	fx.st.fail["renew"] = true
	if err := extend(s, confirmed.Add(lease+time.Millisecond)); !errors.Is(err, snowflake.ErrSourceUnavailable) {
		t.Fatalf("renewal failed, until beyond the confirmed lease: want ErrSourceUnavailable, got %v", err)
	}
}

// TestTakerWait: a failover loses every row of holder a (the new primary never saw a's
// acquisition nor its bounds). b acquires the same id at once on the new primary; its start
// bound must still be above every ID a may have issued (a's reserved_until), by the taker's
// wait: the clock at b's acquisition plus Lease+Margin.
func TestTakerWait(t *testing.T) {
	fx := newFixture(t)
	before := fx.st.snapshot() // the replica, frozen before a's acquisition
	a, b := fx.source(nil, 3), fx.source(nil, 3)
	wa := acquire(t, a)
	fx.db.Set(wa.Bound.UnixMilli() + 1) // a waited out its own start wait, renewing meanwhile
	a.sent, a.deadline = fx.db.Now(), fx.db.Now().Add(lease)
	until := fx.db.Now().Add(3 * time.Second)
	if err := extend(a, until); err != nil {
		t.Fatal(err)
	}
	fx.st.restore(before) // failover: a's rows are lost
	wb := acquire(t, b)
	if wb.ID != wa.ID {
		t.Fatalf("b got %d, want %d (the id the new primary shows free)", wb.ID, wa.ID)
	}
	if !wb.Bound.After(until) {
		t.Fatalf("b's start bound %v is not above a's reserved_until %v: b would reissue a's IDs", wb.Bound, until)
	}
	if want := fx.db.Now().Add(lease + margin); wb.Bound.Before(want) {
		t.Fatalf("b's start bound %v, want at least acquisition + lease + margin %v", wb.Bound, want)
	}
}

// TestBoundCarriedInRow: holder a's clock runs a minute ahead of b's. a extends, dies without
// a release; once the row has expired, b takes it: b's start bound is a's reserved_until from
// the row (a minute ahead of b's clock: beyond what the taker's wait covers).
func TestBoundCarriedInRow(t *testing.T) {
	fx := newFixture(t)
	ca := clock.NewFakeMs(t0ms + 60_000)
	a, b := fx.source(ca, 3), fx.source(nil, 3)
	acquire(t, a)
	until := ca.Now().Add(3 * time.Second)
	if err := extend(a, until); err != nil {
		t.Fatal(err)
	}
	fx.db.Add(lease) // a is gone; its row expires on the database's clock
	wb := acquire(t, b)
	if !wb.Bound.Equal(until.UTC()) {
		t.Fatalf("b's start bound %v, want a's reserved_until %v carried in the row", wb.Bound, until.UTC())
	}
}

// TestPausedHolder: a holder paused past its lease. If nobody took its row, its first Extend
// after waking re-acquires it and refuses until Lease+Margin have passed (it issues nothing
// meanwhile); if another instance took the row, it has lost the id (ErrWorkerLost) and the next Acquire takes another one.
func TestPausedHolder(t *testing.T) {
	fx := newFixture(t)
	a := fx.source(nil, 3)
	acquire(t, a)
	fx.db.Add(2 * lease) // SIGSTOP ... SIGCONT
	err := extend(a, fx.db.Now().Add(time.Second))
	if !errors.Is(err, snowflake.ErrWorkerHeld) {
		t.Fatalf("first Extend after the pause: want a refusal while waiting out the lease, got %v", err)
	}
	// ... and ErrWorkerLost once, so that the generator acquires again: the same id, whose
	// Bound is the gate (its floor then covers whoever held the id meanwhile, even if the
	// clock steps back after the gate).
	if !errors.Is(err, snowflake.ErrWorkerLost) {
		t.Fatalf("first Extend after the re-take: want ErrWorkerLost (acquire again), got %v", err)
	}
	// ... which says what happened: the lease lapsed, nobody took the id over.
	if !errors.Is(err, snowflake.ErrLeaseLapsed) || !errors.Is(err, snowflake.ErrRetakeWait) {
		t.Fatalf("first Extend after the re-take of an id nobody took: want ErrLeaseLapsed and ErrRetakeWait, got %v", err)
	}
	if w := acquire(t, a); w.ID != 0 || w.Bound.Before(fx.db.Now().Add(lease+margin)) {
		t.Fatalf("Acquire after the re-take: got id %d bound %v, want id 0 with a bound at least now+lease+margin %v", w.ID, w.Bound, fx.db.Now().Add(lease+margin))
	}
	for range 2 { // the renewal goroutine keeps the lease meanwhile
		fx.db.Add(lease / 2)
		a.renewOnce(context.Background())
	}
	if err := extend(a, fx.db.Now().Add(time.Second)); !errors.Is(err, snowflake.ErrWorkerHeld) {
		t.Fatalf("Extend before lease+margin since the re-acquisition: want a refusal, got %v", err)
	}
	fx.db.Add(margin + time.Millisecond)
	if err := extend(a, fx.db.Now().Add(time.Second)); err != nil {
		t.Fatalf("Extend after the wait: %v", err)
	}
	if r, _ := fx.st.get(0); r.Epoch != 2 {
		t.Fatalf("epoch %d after the re-acquisition, want 2", r.Epoch)
	}

	// Taken over while paused: lost.
	b := fx.source(nil, 3)
	fx.db.Add(2 * lease)
	if w := acquire(t, b); w.ID != 0 {
		t.Fatalf("b got %d", w.ID)
	}
	if err := extend(a, fx.db.Now().Add(time.Second)); !errors.Is(err, snowflake.ErrWorkerLost) {
		t.Fatalf("paused holder whose row was taken: want ErrWorkerLost (an ErrNoWorker), got %v", err)
	}
	if err := extend(a, fx.db.Now().Add(2*time.Second)); !errors.Is(err, snowflake.ErrWorkerLost) {
		t.Fatalf("lost stays lost until Acquire: got %v", err)
	}
	// The generator then acquires again (its re-acquire after ErrWorkerLost): another free
	// id, with the taker's wait in its bound.
	w := acquire(t, a)
	if w.ID == 0 {
		t.Fatalf("re-acquired id 0, which b holds")
	}
	if min := fx.db.Now().Add(lease + margin); w.Bound.Before(min) {
		t.Fatalf("re-acquired bound %v, want at least now+lease+margin %v", w.Bound, min)
	}
}

// TestAmbiguousAcquire: an INSERT that was applied but whose answer was lost counts as applied:
// the next Acquire reads the row back and keeps that id instead of taking a second one.
func TestAmbiguousAcquire(t *testing.T) {
	fx := newFixture(t)
	s := fx.source(nil, 3)
	fx.st.fail["insert"], fx.st.applied["insert"] = true, true
	if _, err := s.Acquire(context.Background()); !errors.Is(err, snowflake.ErrSourceUnavailable) {
		t.Fatalf("ambiguous insert: want ErrSourceUnavailable, got %v", err)
	}
	w := acquire(t, s)
	if w.ID != 0 {
		t.Fatalf("after an ambiguous insert of id 0 the source took %d", w.ID)
	}
	if n := len(fx.st.snapshot()); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}

// TestAmbiguousRenewal: a renewal of unknown outcome does not move the deadline.
func TestAmbiguousRenewal(t *testing.T) {
	fx := newFixture(t)
	s := fx.source(nil, 3)
	acquire(t, s)
	d := s.Status().LeaseDeadline
	fx.db.Add(lease / 2)
	fx.st.fail["renew"], fx.st.applied["renew"] = true, true
	s.renewOnce(context.Background())
	if st := s.Status(); !st.LeaseDeadline.Equal(d) || st.RenewalFailures != 1 {
		t.Fatalf("after an ambiguous renewal: deadline %v (want %v), failures %d", st.LeaseDeadline, d, st.RenewalFailures)
	}
}

// TestReleaseAndReuse: Close releases the row (the bound stays in it); another instance takes
// the id at once, above the bound. Ids of dead instances are reused: the id space does not grow.
func TestReleaseAndReuse(t *testing.T) {
	fx := newFixture(t)
	a := fx.source(nil, 1)
	acquire(t, a)
	fx.db.Add(lease + margin + time.Millisecond)
	a.renewedLocked(fx.db.Now())
	until := fx.db.Now().Add(3 * time.Second)
	if err := extend(a, until); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if r, _ := fx.st.get(0); r.Token != "" || r.ReservedUntil != until.UnixMilli() {
		t.Fatalf("released row %+v", r.row)
	}
	for i := range 5 { // five generations, one id
		b := fx.source(nil, 1)
		if w := acquire(t, b); w.ID != 0 || w.Bound.UnixMilli() < until.UnixMilli() {
			t.Fatalf("generation %d: %+v", i, w)
		}
		fx.db.Add(lease) // dies
	}
}

// TestDataDirBound: the data dir's bound (written by another source) is honoured.
func TestDataDirBound(t *testing.T) {
	fx := newFixture(t)
	dir := t.TempDir()
	f, err := statefile.Open(dir + "/" + snowflake.LocalStateFile)
	if err != nil {
		t.Fatal(err)
	}
	high := t0ms + 3_600_000
	if err := f.Write(statefile.State{WorkerID: 7, Source: "file", ReservedUntilMs: high}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s, err := newSource(Config{DataDir: dir, Lease: lease, Clock: fx.db}, fx.st)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if w := acquire(t, s); w.Bound.UnixMilli() != high {
		t.Fatalf("bound %v, want the data dir's %v", w.Bound, time.UnixMilli(high))
	}
}

// TestLayoutInRows: a row used with another layout refuses the start.
func TestLayoutInRows(t *testing.T) {
	fx := newFixture(t)
	a := fx.source(nil, 3)
	acquire(t, a)
	s, err := newSource(Config{DataDir: t.TempDir(), Lease: lease, Clock: fx.db}, fx.st)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.UseLayout(snowflake.Layout{Epoch: time.UnixMilli(snowflake.DefaultEpochMs + 1000)})
	if _, err := s.Acquire(context.Background()); !errors.Is(err, snowflake.ErrLayoutChanged) {
		t.Fatalf("want ErrLayoutChanged, got %v", err)
	}
}

// TestDataDirBoundToFile: the bound the mysql source writes in the data dir is honoured by
// the file source on the same data dir (a switch of sources keeps one time bound).
func TestDataDirBoundToFile(t *testing.T) {
	fx := newFixture(t)
	dir := t.TempDir()
	s, err := newSource(Config{DataDir: dir, Lease: lease, Clock: fx.db}, fx.st)
	if err != nil {
		t.Fatal(err)
	}
	acquire(t, s)
	until := fx.db.Now().Add(3 * time.Second)
	if err := extend(s, until); err != nil {
		t.Fatal(err)
	}
	s.Close()
	f, err := snowflake.NewFileSource(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := f.Acquire(context.Background())
	if err != nil || w.Bound.UnixMilli() < until.UnixMilli() {
		t.Fatalf("file source after mysql: %+v %v, want a bound at least %v", w, err, until)
	}
}

// TestRetakeAfterFailover: a failover loses a's row (the new primary shows another, earlier
// holder's free row with a higher bound). a's next renewal matches no row; a re-takes the id
// by compare-and-set and, as a taker, refuses Extend until Lease+Margin have passed AND the
// clock is above the row's bound.
func TestRetakeAfterFailover(t *testing.T) {
	fx := newFixture(t)
	high := t0ms + 20_000 // an earlier holder's bound, beyond the taker's wait
	fx.st.rows[0] = fakeRow{row: row{ID: 0, Token: "", Epoch: 4, Version: 9, ReservedUntil: high}, expires: fx.db.Now()}
	replica := fx.st.snapshot()
	fx.st.rows = map[int64]fakeRow{}
	a := fx.source(nil, 3)
	acquire(t, a) // id 0, inserted on the old primary
	fx.st.restore(replica)
	fx.db.Add(lease / 2)
	err := extend(a, fx.db.Now().Add(time.Second))
	if !errors.Is(err, snowflake.ErrWorkerHeld) || a.Status().WorkerID != 0 {
		t.Fatalf("renewal after the failover: want a re-acquisition and a refusal, got %v", err)
	}
	if r, _ := fx.st.get(0); r.Token != a.token || r.Epoch != 5 {
		t.Fatalf("row after the re-take: %+v", r.row)
	}
	for fx.db.Now().UnixMilli() <= high {
		if err := extend(a, fx.db.Now().Add(time.Second)); err == nil {
			t.Fatalf("Extend accepted at %v, not above the row's bound %v", fx.db.Now().UnixMilli(), high)
		}
		fx.db.Add(lease / 3)
		a.renewOnce(context.Background())
	}
	fx.db.Add(time.Millisecond)
	if err := extend(a, fx.db.Now().Add(time.Second)); err != nil {
		t.Fatalf("Extend past the bound and the wait: %v", err)
	}
}
