package mysqlcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fakeSource is the cluster as a causal read shows it, and the generations recorded.
type fakeSource struct {
	confirm  State
	err      error // of Confirm
	beginErr error
	confirms int
	begins   []mark // gen and seqno of each Begin
	onBegin  func() // when set, called by Begin before it records the generation
}

func (f *fakeSource) Confirm(context.Context) (State, error) {
	f.confirms++
	return f.confirm, f.err
}

func (f *fakeSource) Begin(_ context.Context, uuid string, gen, seqno int64) error {
	if f.beginErr != nil {
		return f.beginErr
	}
	if f.onBegin != nil {
		f.onBegin()
	}
	f.begins = append(f.begins, mark{Seqno: seqno, Gen: gen})
	f.confirm.Gen = max(f.confirm.Gen, gen)
	return nil
}

const uuidA = "6b0c1c4e-0a0f-11ee-8000-000000000001"

func synced(seqno, gen int64) State { return State{UUID: uuidA, Seqno: seqno, Local: Synced, Gen: gen} }

func memHistory(t *testing.T) *History {
	t.Helper()
	h, err := OpenHistory("", nil)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// seenOf is the mark h holds for uuidA.
func seenOf(h *History) mark {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[uuidA]
}

// TestHistoryCheck: each branch of Check, against a fake source. A reading at or above what
// was seen decides nothing more; a lower one is confirmed by a causal read first, and only a
// confirmed loss on a Synced member of the same cluster begins a generation, once; a
// reading under an older generation is never used.
func TestHistoryCheck(t *testing.T) {
	ctx := context.Background()
	type step struct {
		st      State
		confirm State
		want    error // nil, ErrGeneration, ErrNotSynced
		begins  int   // Begin calls so far
		seen    mark  // afterwards
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"grows", []step{
			{st: synced(10, 0), seen: mark{10, 0}},
			{st: synced(12, 0), seen: mark{12, 0}},
			{st: synced(12, 0), seen: mark{12, 0}},
		}},
		{"a lagging member, confirmed at or above", []step{
			{st: synced(100, 0), seen: mark{100, 0}},
			{st: synced(97, 0), confirm: synced(101, 0), seen: mark{101, 0}},
		}},
		{"a lower seqno confirmed: a new generation, once", []step{
			{st: synced(100, 0), seen: mark{100, 0}},
			{st: synced(60, 0), confirm: synced(61, 0), want: ErrGeneration, begins: 1, seen: mark{61, 1}},
			// The transaction runs again and reads the new identity.
			{st: synced(61, 1), begins: 1, seen: mark{61, 1}},
			{st: synced(90, 1), begins: 1, seen: mark{90, 1}},
		}},
		{"a member not Synced decides nothing", []step{
			{st: synced(100, 0), seen: mark{100, 0}},
			{st: State{UUID: uuidA, Seqno: 40, Local: 2}, confirm: State{UUID: uuidA, Seqno: 40, Local: 2}, want: ErrNotSynced, seen: mark{100, 0}},
		}},
		{"another cluster answers the confirmation", []step{
			{st: synced(100, 0), seen: mark{100, 0}},
			{st: synced(40, 0), confirm: State{UUID: "other", Seqno: 1, Local: Synced}, want: ErrGeneration, seen: mark{100, 0}},
		}},
		{"another instance began the generation", []step{
			{st: synced(100, 0), seen: mark{100, 0}},
			{st: synced(70, 1), seen: mark{70, 1}},
			// A transaction whose snapshot predates it: run again, nothing begun.
			{st: synced(75, 0), confirm: synced(76, 1), want: ErrGeneration, seen: mark{76, 1}},
		}},
		{"the record of a generation lost too", []step{
			{st: synced(50, 2), seen: mark{50, 2}},
			{st: synced(80, 1), confirm: synced(80, 1), want: ErrGeneration, begins: 1, seen: mark{80, 3}},
		}},
		{"a single server", []step{
			{st: State{}, seen: mark{}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := memHistory(t)
			src := &fakeSource{}
			for i, s := range tc.steps {
				src.confirm = s.confirm
				err := h.Check(ctx, src, s.st)
				if s.want == nil && err != nil || s.want != nil && !errors.Is(err, s.want) {
					t.Fatalf("step %d: got %v, want %v", i, err, s.want)
				}
				if len(src.begins) != s.begins {
					t.Fatalf("step %d: got %d generations begun, want %d", i, len(src.begins), s.begins)
				}
				if got := seenOf(h); got != s.seen {
					t.Fatalf("step %d: got seen %+v, want %+v", i, got, s.seen)
				}
			}
		})
	}
}

// TestHistoryBeginFails: a generation that cannot be recorded (no leafd_generation, a lost
// connection) is an error that is not retried as a new identity, and the loss is found
// again at the next check (nothing is taken as seen).
func TestHistoryBeginFails(t *testing.T) {
	ctx := context.Background()
	h := memHistory(t)
	src := &fakeSource{}
	if err := h.Check(ctx, src, synced(100, 0)); err != nil {
		t.Fatal(err)
	}
	src.confirm, src.beginErr = synced(50, 0), errors.New("no table")
	for range 2 {
		err := h.Check(ctx, src, synced(50, 0))
		if err == nil || errors.Is(err, ErrGeneration) || errors.Is(err, ErrNotSynced) {
			t.Fatalf("got %v, want the failure to record it", err)
		}
	}
	if got := seenOf(h); got != (mark{100, 0}) {
		t.Fatalf("got seen %+v, want {100 0}", got)
	}
	src.err = errors.New("connection lost")
	if err := h.Check(ctx, src, synced(50, 0)); !errors.Is(err, src.err) {
		t.Fatalf("confirmation failed: got %v", err)
	}
	var nilH *History
	if err := nilH.Check(ctx, src, synced(1, 0)); err != nil {
		t.Fatalf("nil History: %v", err)
	}
}

// TestHistoryFile: what the data dir saw survives a restart: a new generation is written at
// once, a higher seqno alone at most every persistEvery and at Close; a restarted process
// finds a cluster below the recorded seqno and begins a generation.
func TestHistoryFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), HistoryFile)
	h, err := OpenHistory(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	h.now = func() time.Time { return now }
	h.wrote = now // as if just written: only what must be written at once is
	src := &fakeSource{}
	if err := h.Check(ctx, src, synced(100, 0)); err != nil { // first sight: written at once
		t.Fatal(err)
	}
	reopen := func() mark {
		t.Helper()
		r, err := OpenHistory(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return seenOf(r)
	}
	if got := reopen(); got != (mark{100, 0}) {
		t.Fatalf("after the first reading: file %+v, want {100 0}", got)
	}
	now = now.Add(persistEvery / 2)
	_ = h.Check(ctx, src, synced(150, 0))
	if got := reopen(); got != (mark{100, 0}) {
		t.Fatalf("within persistEvery: file %+v, want {100 0}", got)
	}
	now = now.Add(persistEvery)
	_ = h.Check(ctx, src, synced(160, 0))
	if got := reopen(); got != (mark{160, 0}) {
		t.Fatalf("after persistEvery: file %+v, want {160 0}", got)
	}
	_ = h.Check(ctx, src, synced(170, 0))
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if got := reopen(); got != (mark{170, 0}) {
		t.Fatalf("after Close: file %+v, want {170 0}", got)
	}

	// A restarted process: the cluster came back from a member at 120.
	h2, err := OpenHistory(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	h2.now = func() time.Time { return now }
	h2.wrote = now
	src2 := &fakeSource{confirm: synced(120, 0)}
	if err := h2.Check(ctx, src2, synced(120, 0)); !errors.Is(err, ErrGeneration) || len(src2.begins) != 1 {
		t.Fatalf("restarted below the record: got %v and %d generations begun, want ErrGeneration and 1", err, len(src2.begins))
	}
	if got := reopen(); got != (mark{120, 1}) {
		t.Fatalf("a new generation: file %+v, want {120 1} at once", got)
	}

	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenHistory(path, nil); err == nil {
		t.Fatal("a damaged file was accepted")
	}
}

// TestStateScan: the state column, and NULL as ErrNoIdentity.
func TestStateScan(t *testing.T) {
	var s State
	if err := s.Scan([]byte(uuidA + " 42 4 3")); err != nil || s != (State{uuidA, 42, 4, 3}) {
		t.Fatalf("got %+v, %v", s, err)
	}
	if err := s.Scan(""); err != nil || s != (State{}) {
		t.Fatalf("server: got %+v, %v", s, err)
	}
	if err := s.Scan(nil); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("NULL: %v", err)
	}
	if err := s.Scan("x 1 2"); err == nil {
		t.Fatal("three fields accepted")
	}
	calls := 0
	err := Retry(context.Background(), nil, func(context.Context) error {
		calls++
		if calls == 1 {
			return ErrGeneration
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("ErrGeneration once: %v after %d calls, want success after 2", err, calls)
	}
}
