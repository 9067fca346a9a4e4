package ordered

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/clock"
	"github.com/leafd/leafd/internal/testenv"
)

// fakeStore answers Acquire with grant (or err) after moving the fake clock by took (a slow
// round trip).
type fakeStore struct {
	clk   *clock.Fake
	took  time.Duration
	grant Grant
	err   error
}

func (f *fakeStore) Acquire(ctx context.Context, tag, holder string, length time.Duration) (Grant, error) {
	f.clk.Add(f.took)
	return f.grant, f.err
}

func newLease(t *testing.T) (*Lease, *fakeStore, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := &fakeStore{clk: clk, grant: Grant{Granted: true, Epoch: 1, Holder: "a"}}
	l, err := New(Config{Tag: "t", Holder: "a", Length: 3 * time.Second, Margin: 300 * time.Millisecond, Clock: clk}, st)
	if err != nil {
		t.Fatal(err)
	}
	return l, st, clk
}

// TestLeaseDeadlineFromSendTime (fence: the lease deadline). A renewal answered 2 s after it
// was sent leaves the lease valid until send + length - margin (2.7 s after the send), not
// reply + ...: the database may have set its expiry right at the send.
func TestLeaseDeadlineFromSendTime(t *testing.T) {
	l, st, clk := newLease(t)
	st.took = 2 * time.Second
	if s, err := l.Renew(context.Background()); err != nil || !s.Leader || !s.NewTerm || s.Epoch != 1 {
		t.Fatalf("Renew: %+v, %v", s, err)
	}
	if _, ok := l.Valid(); !ok {
		t.Fatal("not valid 2 s after the send")
	}
	clk.Add(699 * time.Millisecond)
	if _, ok := l.Valid(); !ok {
		t.Fatal("not valid 2.699 s after the send")
	}
	clk.Add(time.Millisecond)
	if _, ok := l.Valid(); ok {
		t.Fatal("still valid 2.7 s after the send (length 3 s - margin 0.3 s): the deadline counts from the reply")
	}
}

// TestLeaseFailedRenewalDoesNotExtend: a renewal that fails (timed out, maybe applied) keeps
// the old deadline, which then runs out.
func TestLeaseFailedRenewalDoesNotExtend(t *testing.T) {
	l, st, clk := newLease(t)
	if _, err := l.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	st.err = errors.New("timeout")
	if _, err := l.Renew(context.Background()); err == nil {
		t.Fatal("no error")
	}
	clk.Add(1700 * time.Millisecond) // 2.7 s after the first send
	if _, ok := l.Valid(); ok {
		t.Fatal("a failed renewal extended the lease")
	}
}

// TestLeaseRefusalEndsAtOnce: a renewal refused (another holder) ends leadership at once.
func TestLeaseRefusalEndsAtOnce(t *testing.T) {
	l, st, _ := newLease(t)
	if _, err := l.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.grant = Grant{Holder: "b", Epoch: 2}
	s, err := l.Renew(context.Background())
	if err != nil || s.Leader || s.Holder != "b" {
		t.Fatalf("refused Renew: %+v, %v", s, err)
	}
	if _, ok := l.Valid(); ok {
		t.Fatal("still valid after a refusal")
	}
}

// TestLeaseNewTerm: NewTerm is set when the epoch changes (the caller then starts above every
// range of the earlier terms), not on a renewal in the same term.
func TestLeaseNewTerm(t *testing.T) {
	l, st, _ := newLease(t)
	s, _ := l.Renew(context.Background())
	if !s.NewTerm {
		t.Fatal("first grant is not a new term")
	}
	if s, _ = l.Renew(context.Background()); s.NewTerm {
		t.Fatal("renewal in the same term reported as a new term")
	}
	st.grant.Epoch = 3
	if s, _ = l.Renew(context.Background()); !s.NewTerm || s.Epoch != 3 {
		t.Fatalf("epoch change: %+v", s)
	}
}

func TestLeaseConfig(t *testing.T) {
	st := &fakeStore{}
	for _, c := range []Config{
		{Holder: "a"}, {Tag: "t"},
		{Tag: "t", Holder: "a", Length: time.Second, Margin: time.Second},
		{Tag: "t", Holder: "a", Length: -time.Second},
	} {
		if _, err := New(c, st); err == nil {
			t.Fatalf("New(%+v) accepted", c)
		}
	}
}

// TestMySQLLeaseTakeover: on the database clock, a second instance gets the lease only after
// the first stopped renewing and its lease lapsed; at that moment the first no longer counts
// itself leader (its deadline, from the send time minus the margin, has passed); the term
// grows; the first is then refused. A lapsed lease taken back by its own holder is a new term.
func TestMySQLLeaseTakeover(t *testing.T) {
	m, db := openLeases(t, testenv.FreshDatabase(t, testenv.MySQLDSN(t)), "")
	ctx := context.Background()
	if _, err := m.Acquire(ctx, "plain", "a", time.Second); !errors.Is(err, ErrNotOrdered) {
		t.Fatalf("Acquire of a tag not ordered: %v", err)
	}
	if err := m.MarkOrdered(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Tag: "o", Length: 400 * time.Millisecond, Margin: 40 * time.Millisecond}
	cfg.Holder = "a"
	a, _ := New(cfg, m)
	cfg.Holder = "b"
	b, _ := New(cfg, m)
	sa, err := a.Renew(ctx)
	if err != nil || !sa.Leader {
		t.Fatalf("a: %+v, %v", sa, err)
	}
	if sb, err := b.Renew(ctx); err != nil || sb.Leader || sb.Holder != "a" {
		t.Fatalf("b while a holds: %+v, %v", sb, err)
	}
	var sb State
	deadline := time.Now().Add(10 * time.Second)
	for !sb.Leader && time.Now().Before(deadline) {
		if sb, err = b.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if sb.Leader {
			if _, ok := a.Valid(); ok {
				t.Fatal("b was granted the lease while a still counts itself leader")
			}
			break
		}
		time.Sleep(10 * time.Millisecond) // pacing of the renewal attempts
	}
	if !sb.Leader || sb.Epoch != sa.Epoch+1 || !sb.NewTerm {
		t.Fatalf("b after a's lease lapsed: %+v (a had %+v)", sb, sa)
	}
	if s, err := a.Renew(ctx); err != nil || s.Leader || s.Holder != "b" {
		t.Fatalf("a after b took over: %+v, %v", s, err)
	}
	// b lets its lease lapse on the database clock, then takes it back: a new term. (Taken
	// back after its local deadline but before the database's expiry, it stays in its term:
	// nobody else could hold it meanwhile.)
	for time.Now().Before(deadline) {
		var lapsed bool
		if err := db.QueryRowContext(ctx, "SELECT expires < UTC_TIMESTAMP(3) FROM leafd_leader WHERE biz_tag = 'o'").Scan(&lapsed); err != nil {
			t.Fatal(err)
		}
		if lapsed {
			break
		}
		time.Sleep(10 * time.Millisecond) // pacing of the poll
	}
	if _, ok := b.Valid(); ok {
		t.Fatal("b counts itself leader after the database's expiry")
	}
	var again State
	for !again.Leader && time.Now().Before(deadline) {
		if again, err = b.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		if !again.Leader {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !again.Leader || again.Epoch <= sb.Epoch {
		t.Fatalf("b after its own lapse: %+v, want a new term above %d", again, sb.Epoch)
	}
}

// TestLeaseSettleAfterFailover (fence: the settle). A grant on a row last granted by another
// database server serves only one lease length after its reply: the old holder may still
// count itself leader, judged by the old server. Mutant: Settle ignored: caught.
func TestLeaseSettleAfterFailover(t *testing.T) {
	l, st, clk := newLease(t)
	st.grant = Grant{Granted: true, Epoch: 4, Holder: "a", Settle: true}
	st.took = 100 * time.Millisecond
	s, err := l.Renew(context.Background())
	if err != nil || !s.Leader || !s.NewTerm {
		t.Fatalf("Renew: %+v, %v", s, err)
	}
	if _, ok := l.Valid(); ok {
		t.Fatal("a settling grant serves at once")
	}
	if _, ok := l.Held(); ok {
		t.Fatal("a settling grant is Held at once (Held must judge it on the clock)")
	}
	clk.Add(3*time.Second - time.Millisecond)
	st.took = 0
	st.grant.Settle = false
	if s, _ = l.Renew(context.Background()); s.NewTerm {
		t.Fatal("the renewal in the settling term is a new term")
	}
	if _, ok := l.Valid(); ok {
		t.Fatal("served before one lease length after the settling grant's reply")
	}
	clk.Add(time.Millisecond)
	if _, ok := l.Valid(); !ok {
		t.Fatal("not serving one lease length after the settling grant")
	}
	if _, ok := l.Held(); !ok {
		t.Fatal("not Held one lease length after the settling grant")
	}
}

// TestLeaseTermsNeverRepeat: a settling grant at the epoch already held (a failover to a
// replica that repeats epochs) is a new local term, so the caller drops its segments again.
// Mutant: newTerm without "|| g.Settle": caught.
func TestLeaseTermsNeverRepeat(t *testing.T) {
	l, st, clk := newLease(t)
	s1, _ := l.Renew(context.Background())
	st.grant.Settle = true // same epoch 1
	s2, _ := l.Renew(context.Background())
	if !s2.NewTerm || s2.Term == s1.Term {
		t.Fatalf("settling grant at the same epoch: %+v after %+v", s2, s1)
	}
	clk.Add(3 * time.Second)
	st.grant.Settle = false
	s3, _ := l.Renew(context.Background())
	if term, ok := l.Valid(); !ok || term != s2.Term || s3.NewTerm {
		t.Fatalf("Valid %d %v after %+v, want term %d", term, ok, s3, s2.Term)
	}
}

// TestMySQLLeaseSettleOnServerChange: a row last granted by another database server (a
// failover: this server's copy may have missed renewals) is taken as a new term that settles,
// even while it looks live; the old holder is then refused. Mutant: the server_id check
// removed: b is refused while the stale row looks live: caught.
func TestMySQLLeaseSettleOnServerChange(t *testing.T) {
	m, db := openLeases(t, testenv.FreshDatabase(t, testenv.MySQLDSN(t)), "")
	ctx := context.Background()
	if err := m.MarkOrdered(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.IsOrdered(ctx, "o"); err != nil || !ok {
		t.Fatalf("IsOrdered: %v %v", ok, err)
	}
	if tags, err := m.List(ctx); err != nil || len(tags) != 1 || tags[0] != "o" {
		t.Fatalf("List: %v %v", tags, err)
	}
	g, err := m.Acquire(ctx, "o", "a", time.Minute)
	if err != nil || !g.Granted || g.Settle {
		t.Fatalf("a: %+v %v", g, err)
	}
	if g2, err := m.Acquire(ctx, "o", "b", time.Minute); err != nil || g2.Granted || g2.Holder != "a" || g2.Remaining < 50*time.Second {
		t.Fatalf("b while a holds: %+v %v", g2, err)
	}
	if _, err := db.ExecContext(ctx, "UPDATE leafd_leader SET server_id = server_id + 1000"); err != nil {
		t.Fatal(err)
	}
	gb, err := m.Acquire(ctx, "o", "b", time.Minute)
	if err != nil || !gb.Granted || !gb.Settle || gb.Epoch != g.Epoch+1 {
		t.Fatalf("b after the server changed: %+v %v (a had %+v)", gb, err, g)
	}
	if ga, err := m.Acquire(ctx, "o", "a", time.Minute); err != nil || ga.Granted || ga.Holder != "b" {
		t.Fatalf("a after b took over: %+v %v", ga, err)
	}
	if err := m.Release(ctx, "o", "b"); err != nil {
		t.Fatal(err)
	}
	if ga, err := m.Acquire(ctx, "o", "a", time.Minute); err != nil || !ga.Granted || ga.Epoch != gb.Epoch+1 {
		t.Fatalf("a after b released: %+v %v", ga, err)
	}
}

// BenchmarkLeaseValid: Valid on the real clock, as every request of an ordered tag calls it
// (two or three times). Baseline in the same run: BenchmarkTimeNow.
func BenchmarkLeaseValid(b *testing.B) {
	clk := clock.NewFake(time.Now())
	st := &fakeStore{clk: clk, grant: Grant{Granted: true, Epoch: 1, Holder: "a"}}
	l, err := New(Config{Tag: "t", Holder: "a", Length: time.Hour, Clock: clock.Real{}}, st)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := l.Renew(context.Background()); err != nil {
		b.Fatal(err)
	}
	if _, ok := l.Valid(); !ok {
		b.Fatal("not valid")
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := l.Valid(); !ok {
			b.Fatal("not valid")
		}
	}
}

func BenchmarkTimeNow(b *testing.B) {
	var t time.Time
	for b.Loop() {
		t = time.Now()
	}
	_ = t
}

// TestMySQLLeaseTimeZones (fence: the lease is judged in UTC). The review found the lease row
// judged by NOW(3) against a DATETIME: an instance whose sessions ran in another time zone
// (a DSN's time_zone, or SET GLOBAL time_zone, or a DST change under SYSTEM) saw a live lease
// as lapsed and took it: two leaders at once. Two instances with sessions ten hours apart:
// the second is refused while the first holds. Mutant: NOW(3) back in Acquire: caught.
func TestMySQLLeaseTimeZones(t *testing.T) {
	dsn := testenv.FreshDatabase(t, testenv.MySQLDSN(t))
	ctx := context.Background()
	west, _ := openLeases(t, dsn, "time_zone="+url.QueryEscape("'-05:00'"))
	east, _ := openLeases(t, dsn, "time_zone="+url.QueryEscape("'+05:00'"))
	if err := west.MarkOrdered(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Tag: "o", Length: 5 * time.Second, Margin: 500 * time.Millisecond}
	cfg.Holder = "a"
	a, _ := New(cfg, west)
	cfg.Holder = "b"
	b, _ := New(cfg, east)
	if sa, err := a.Renew(ctx); err != nil || !sa.Leader {
		t.Fatalf("a: %+v, %v", sa, err)
	}
	if sb, err := b.Renew(ctx); err != nil || sb.Leader || sb.Holder != "a" {
		t.Fatalf("b, in a session ten hours ahead, while a holds: %+v, %v (want refused, holder a)", sb, err)
	}
	if _, ok := a.Valid(); !ok {
		t.Fatal("a lost its lease")
	}
}

// TestMySQLOrderedOneSpelling (fence: an ordered tag answers to its stored spelling only). On
// a case-insensitive collation "mx" finds the leafd_leader row of "MX" (and the same
// leaf_alloc row): taken as ordered under its own name it got a lease of its own, a second
// leader of one counter (the review of issue 19 saw IDs go back across the spellings). Now
// the other spelling is ErrOtherSpelling, which Admit passes on (BADTAG). Mutant: the
// spelling compare removed: caught.
func TestMySQLOrderedOneSpelling(t *testing.T) {
	m, db := openLeases(t, testenv.FreshDatabase(t, testenv.MySQLDSN(t)), "")
	ctx := context.Background()
	if err := m.MarkOrdered(ctx, "MX"); err != nil {
		t.Fatal(err)
	}
	var collation string
	if err := db.QueryRowContext(ctx, "SELECT COLLATION_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leafd_leader' AND COLUMN_NAME = 'biz_tag'").Scan(&collation); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.IsOrdered(ctx, "MX"); !ok || err != nil {
		t.Fatalf("IsOrdered(MX) = %v, %v", ok, err)
	}
	ok, err := m.IsOrdered(ctx, "mx")
	if strings.HasSuffix(collation, "_bin") {
		if ok || err != nil {
			t.Fatalf("IsOrdered(mx) on %s = %v, %v; want false", collation, ok, err)
		}
		return
	}
	if ok || !errors.Is(err, ErrOtherSpelling) {
		t.Fatalf("IsOrdered(mx) on %s = %v, %v; want ErrOtherSpelling", collation, ok, err)
	}
}

// openLeases opens dsn (with params added, if any) as the leases of one instance, with the
// table ensured.
func openLeases(t *testing.T, dsn, params string) (*MySQLLeases, *sql.DB) {
	t.Helper()
	if params != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + params
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	m := NewMySQLLeases(db, 5*time.Second)
	if err := m.EnsureTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, db
}
