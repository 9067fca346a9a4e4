package ordered

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leafd/leafd/internal/clock"
)

// memStore is one lease row in memory, as MySQLLeases keeps it on the server "at" answers
// as (set at to play a failover). Each call moves the fake clock by took (a round trip);
// failNext makes the next Write fail after applying it (a reply lost).
type memStore struct {
	clk      *clock.Fake
	took     time.Duration
	row      Row
	at       int64
	err      error // returned by every call while set (nothing applied)
	failNext bool
	writes   int
	budget   time.Duration // the latest Write's context: time left (real clock)
}

// newMemWorld is the fake clock at t0 and a memStore on it, the set-up of a lease test.
func newMemWorld() (*clock.Fake, *memStore) {
	clk := clock.NewFake(t0)
	return clk, newMemStore(clk)
}

func newMemStore(clk *clock.Fake) *memStore {
	return &memStore{clk: clk, row: Row{Server: 1}, at: 1}
}

func (m *memStore) Read(ctx context.Context, tag string) (Row, error) {
	m.clk.Add(m.took)
	if m.err != nil {
		return Row{}, m.err
	}
	r := m.row
	r.At = m.at
	return r, nil
}

func (m *memStore) Write(ctx context.Context, tag string, old Row, holder string, take bool, length time.Duration) (Row, bool, error) {
	if dl, ok := ctx.Deadline(); ok {
		m.budget = time.Until(dl)
	}
	m.clk.Add(m.took)
	if m.err != nil {
		return Row{}, false, m.err
	}
	m.writes++
	if m.row.Version != old.Version || m.row.Server != old.Server || m.at != old.At {
		return Row{}, false, nil
	}
	r := written(old, holder, take, length)
	m.row = r
	if m.failNext {
		m.failNext = false
		return Row{}, false, errors.New("reply lost")
	}
	return r, true, nil
}

// other is another instance writing the row (a renewal or a take by "b").
func (m *memStore) other(holder string, length time.Duration) {
	m.row = written(Row{Holder: m.row.Holder, Epoch: m.row.Epoch, Version: m.row.Version, At: m.at, Longest: m.row.Longest}, holder, holder != m.row.Holder, length)
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestLease(t *testing.T, st Store, clk clock.Clock, holder string, length time.Duration) *Lease {
	t.Helper()
	l, err := New(Config{Tag: "t", Holder: holder, Length: length, Margin: length / 10, Clock: clk}, st)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func renew(t *testing.T, l *Lease) State {
	t.Helper()
	s, err := l.Renew(context.Background())
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	return s
}

func serving(l *Lease) bool { _, ok := l.Valid(); return ok }

// TestLeaseDeadlineFromSendTime (fence: the deadline counts from the write's send). A
// renewal answered 2 s after it was sent leaves the lease valid until send + length -
// margin, not reply + ...: the row cannot have been taken before the send.
func TestLeaseDeadlineFromSendTime(t *testing.T) {
	clk, st := newMemWorld()
	l := newTestLease(t, st, clk, "a", 3*time.Second)
	if s := renew(t, l); !s.Leader || !s.NewTerm {
		t.Fatalf("first grant: %+v", s)
	}
	sent := clk.Now()
	st.took = 2 * time.Second
	if s := renew(t, l); !s.Leader || s.NewTerm {
		t.Fatalf("renewal: %+v", s)
	}
	if st.writes != 2 {
		t.Fatalf("%d writes for a grant and a renewal, want 2 (a renewal is one statement)", st.writes)
	}
	clk.Set(sent.Add(2699 * time.Millisecond).UnixMilli())
	if !serving(l) {
		t.Fatal("not valid 2.699 s after the renewal's send")
	}
	clk.Add(time.Millisecond)
	if serving(l) {
		t.Fatal("still valid 2.7 s after the send (length 3 s - margin 0.3 s): the deadline counts from the reply")
	}
}

// TestLeaseFailedRenewalDoesNotExtend: a renewal that fails (timed out, maybe applied) keeps
// the old deadline, which then runs out.
func TestLeaseFailedRenewalDoesNotExtend(t *testing.T) {
	clk, st := newMemWorld()
	l := newTestLease(t, st, clk, "a", 3*time.Second)
	renew(t, l)
	clk.Add(time.Second)
	st.err = errors.New("timeout")
	if _, err := l.Renew(context.Background()); err == nil {
		t.Fatal("no error")
	}
	clk.Add(1700 * time.Millisecond)
	if serving(l) {
		t.Fatal("a failed renewal extended the lease")
	}
}

// TestLeaseRefusalEndsAtOnce (fence: a renewal compares the row). Another instance wrote the
// row: the renewal changes nothing and leadership ends at once.
func TestLeaseRefusalEndsAtOnce(t *testing.T) {
	clk, st := newMemWorld()
	l := newTestLease(t, st, clk, "a", 3*time.Second)
	renew(t, l)
	st.other("b", 3*time.Second)
	s := renew(t, l)
	if s.Leader || s.Holder != "b" || serving(l) {
		t.Fatalf("after b took the row: %+v, serving %v", s, serving(l))
	}
	if st.row.Holder != "b" {
		t.Fatalf("the refused renewal wrote the row: %+v", st.row)
	}
}

// TestLeaseTakeoverWaitsOnOwnClock (fence: a taker waits W of an unchanged row on its own
// clock). b reads a's row and takes it only a full lease after that read, whatever the
// database's clock says (there is none here); a renewal by a in between starts the wait
// again. Mutants: the wait check removed (take at once): caught; the row compare removed
// (the wait kept from the first read): caught.
func TestLeaseTakeoverWaitsOnOwnClock(t *testing.T) {
	clk, st := newMemWorld()
	a := newTestLease(t, st, clk, "a", 3*time.Second)
	b := newTestLease(t, st, clk, "b", 3*time.Second)
	renew(t, a)
	if s := renew(t, b); s.Leader || s.Holder != "a" || !s.HolderUntil.Equal(clk.Now().Add(3*time.Second)) {
		t.Fatalf("b's first look: %+v", s)
	}
	clk.Add(2 * time.Second)
	renew(t, a) // a renews: the row changes
	clk.Add(1500 * time.Millisecond)
	if s := renew(t, b); s.Leader {
		t.Fatalf("b took the row 3.5 s after its first read, 1.5 s after a renewed: %+v", s)
	}
	clk.Add(3*time.Second - time.Millisecond)
	if s := renew(t, b); s.Leader {
		t.Fatalf("b took the row before a lease of it unchanged: %+v", s)
	}
	clk.Add(time.Millisecond)
	s := renew(t, b)
	if !s.Leader || !s.NewTerm || !serving(b) || s.Epoch != 2 {
		t.Fatalf("b after a lease of the row unchanged: %+v serving %v", s, serving(b))
	}
	if serving(a) {
		t.Fatal("a still serves")
	}
}

// TestLeaseWaitIsTheLongestLease (fence: W is the longest lease granted in the row). a holds
// with 8 s, b runs with 2 s: b waits 8 s of the row unchanged. Mutant: Row.Longest ignored
// (W = b's own 2 s): caught.
func TestLeaseWaitIsTheLongestLease(t *testing.T) {
	clk, st := newMemWorld()
	a := newTestLease(t, st, clk, "a", 8*time.Second)
	b := newTestLease(t, st, clk, "b", 2*time.Second)
	renew(t, a)
	renew(t, b)
	clk.Add(8*time.Second - time.Millisecond)
	if s := renew(t, b); s.Leader {
		t.Fatalf("b (2 s) took an 8 s holder's row %v after its first read: %+v", 8*time.Second-time.Millisecond, s)
	}
	clk.Add(time.Millisecond)
	if s := renew(t, b); !s.Leader || !serving(b) {
		t.Fatalf("b 8 s after its first read: %+v", s)
	}
}

// TestLeaseSettleAfterFailover (fence: a row written last by another server settles for the
// longest lease). After a failover (another server answers) b takes a's row at once but
// serves only W after the take's reply, W being the 8 s a was granted although b runs with
// 2 s; a is refused on the new server. Mutants: the server check removed: caught; the settle
// sized by b's own length: caught.
func TestLeaseSettleAfterFailover(t *testing.T) {
	clk, st := newMemWorld()
	a := newTestLease(t, st, clk, "a", 8*time.Second)
	b := newTestLease(t, st, clk, "b", 2*time.Second)
	renew(t, a)
	st.at = 2 // failover: the replica has the row as server 1 wrote it
	st.took = 100 * time.Millisecond
	s := renew(t, b)
	if !s.Leader || !s.NewTerm || serving(b) {
		t.Fatalf("b after the failover: %+v serving %v, want a settling grant", s, serving(b))
	}
	reply := clk.Now()
	if want := reply.Add(8 * time.Second); !s.From.Equal(want) {
		t.Fatalf("b serves from %v, want the take's reply + 8 s (%v)", s.From, want)
	}
	if _, ok := b.Held(); ok {
		t.Fatal("a settling grant is Held at once (Held must judge it on the clock)")
	}
	if s := renew(t, a); s.Leader || serving(a) {
		t.Fatalf("a renewed on the new server: %+v", s)
	}
	st.took = 0
	clk.Set(reply.Add(8*time.Second - time.Millisecond).UnixMilli())
	renew(t, b)
	if serving(b) {
		t.Fatal("b serves before its settle ended")
	}
	clk.Add(time.Millisecond)
	if s := renew(t, b); s.NewTerm || !serving(b) {
		t.Fatalf("b after its settle: %+v serving %v", s, serving(b))
	}
}

// TestLeaseNeverGrantedRowMoved (fence: a free row written by another server settles). The
// tag was created on server 1 and never granted; after a failover b's first grant settles.
// Mutant: the server check only for held rows: caught (served at once).
func TestLeaseNeverGrantedRowMoved(t *testing.T) {
	clk, st := newMemWorld()
	st.at = 2
	b := newTestLease(t, st, clk, "b", 2*time.Second)
	if s := renew(t, b); !s.Leader || serving(b) || !s.From.Equal(clk.Now().Add(2*time.Second)) {
		t.Fatalf("first grant of a row created on another server: %+v serving %v, want a 2 s settle", s, serving(b))
	}
	// On its own server a free row serves at once.
	st2 := newMemStore(clk)
	c := newTestLease(t, st2, clk, "c", 2*time.Second)
	if s := renew(t, c); !s.Leader || !serving(c) {
		t.Fatalf("first grant of a row created here: %+v", s)
	}
}

// TestLeaseFailbackSettles (fence: a free row right after another server answered settles).
// b read the row on server 2 (a failover); the database fails back to server 1, which lost
// server 2's writes and shows the row free as server 1 left it. b's take settles. Mutant: the
// server watch ignored (a free row served at once): caught.
func TestLeaseFailbackSettles(t *testing.T) {
	clk, st := newMemWorld()
	b := newTestLease(t, st, clk, "b", 2*time.Second)
	st.at = 2
	st.row = Row{Holder: "x", Epoch: 5, Version: 9, Server: 2, Longest: 2 * time.Second}
	renew(t, b) // server 2: x holds
	st.at = 1
	st.row = Row{Server: 1, Version: 3} // failback: free, as server 1 left it
	clk.Add(100 * time.Millisecond)
	if s := renew(t, b); !s.Leader || serving(b) {
		t.Fatalf("free row just after a failback: %+v serving %v, want a settling grant", s, serving(b))
	}
	clk.Add(2 * time.Second)
	renew(t, b)
	if !serving(b) {
		t.Fatal("not serving after the settle")
	}
}

// TestLeaseLapsedRenewalNewTerm (fence: a renewal after the local deadline is a new term).
// The row was not taken meanwhile, but this instance stopped serving at its deadline: the
// renewal must begin a term, so the caller drops the held segments. Mutant: lapsed renewals
// kept in the term: caught.
func TestLeaseLapsedRenewalNewTerm(t *testing.T) {
	clk, st := newMemWorld()
	l := newTestLease(t, st, clk, "a", 3*time.Second)
	s1 := renew(t, l)
	clk.Add(time.Second)
	if s := renew(t, l); s.NewTerm {
		t.Fatalf("renewal within the deadline: %+v", s)
	}
	clk.Add(3 * time.Second)
	s := renew(t, l)
	if !s.Leader || !s.NewTerm || s.Term == s1.Term || s.Epoch != s1.Epoch {
		t.Fatalf("renewal after the local deadline: %+v (first %+v), want a new local term at the same epoch", s, s1)
	}
}

// TestLeaseLostReplyWaited: a take whose reply was lost (applied) shows the row as ours
// though we did not record it: it is waited out like another's, never served at once.
func TestLeaseLostReplyWaited(t *testing.T) {
	clk, st := newMemWorld()
	l := newTestLease(t, st, clk, "a", 3*time.Second)
	st.failNext = true
	if _, err := l.Renew(context.Background()); err == nil {
		t.Fatal("no error")
	}
	if s := renew(t, l); s.Leader || serving(l) {
		t.Fatalf("after a lost reply: %+v", s)
	}
	clk.Add(3 * time.Second)
	if s := renew(t, l); !s.Leader || !serving(l) {
		t.Fatalf("a lease later: %+v", s)
	}
}

// TestLeaseTermsNeverRepeat: every take begins a new local term.
func TestLeaseTermsNeverRepeat(t *testing.T) {
	clk, st := newMemWorld()
	l := newTestLease(t, st, clk, "a", 3*time.Second)
	s1 := renew(t, l)
	st.at = 2
	s2 := renew(t, l)
	if !s2.NewTerm || s2.Term == s1.Term {
		t.Fatalf("take after a failover: %+v after %+v", s2, s1)
	}
}

func TestLeaseConfig(t *testing.T) {
	st := &memStore{}
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

// TestManagerRenewsFromSendTime (fence: the renewal cadence counts from the send; a
// renewal's timeout is the lease left). With round trips of a quarter of the lease, the next
// renewal is due a third of the lease after the previous one was sent, so a sole leader on a
// slow link never lapses. Mutants: the next turn from the reply: caught; the timeout a third
// of the lease: caught.
func TestManagerRenewsFromSendTime(t *testing.T) {
	clk, st := newMemWorld()
	m, err := NewManager(ManagerConfig{Holder: "a:1", Length: 3 * time.Second, Manual: true, Clock: clk}, staticCatalog{"t"}, st)
	if err != nil {
		t.Fatal(err)
	}
	m.Start(context.Background(), nil)
	defer m.Close()
	tag := m.Lookup("t")
	st.took = 750 * time.Millisecond
	for i := range 20 {
		start := clk.Now()
		due := m.Round(context.Background())
		if i > 0 {
			if _, ok := tag.Serving(); !ok {
				t.Fatalf("round %d: the sole leader does not serve on a slow link", i)
			}
			// The renewal may take the lease left (1.7 s), not only a third of the lease.
			if st.budget < 1500*time.Millisecond {
				t.Fatalf("round %d: the renewal's timeout was %v, want the lease left (about 1.7s)", i, st.budget)
			}
		}
		if want := start.Add(time.Second); due.After(want) {
			t.Fatalf("round %d: next renewal due %v after the send, want at most 1s", i, due.Sub(start))
		}
		if due.After(clk.Now()) {
			clk.Set(due.UnixMilli())
		}
	}
}

type staticCatalog []string

func (c staticCatalog) IsOrdered(ctx context.Context, tag string) (bool, error) {
	for _, t := range c {
		if t == tag {
			return true, nil
		}
	}
	return false, nil
}

func (c staticCatalog) List(ctx context.Context) ([]string, error) { return c, nil }

// TestLeaseUnversionedRenewalRestartsWait: a renewal by a leafd that does not count versions
// (an upgrade in progress) moves only expires; the taker's wait starts again all the same.
func TestLeaseUnversionedRenewalRestartsWait(t *testing.T) {
	clk, st := newMemWorld()
	st.row = Row{Holder: "old", Epoch: 3, Server: 1, Expires: "2026-01-01 00:00:03.000"}
	b := newTestLease(t, st, clk, "b", 3*time.Second)
	renew(t, b)
	clk.Add(2 * time.Second)
	st.row.Expires = "2026-01-01 00:00:05.000" // the old holder renewed
	renew(t, b)
	clk.Add(2 * time.Second)
	if s := renew(t, b); s.Leader {
		t.Fatalf("b took the row 2 s after the old holder renewed it: %+v", s)
	}
}
