package segment

import (
	"context"
	"sync"
	"testing"

	"github.com/leafd/leafd/internal/mysqlcluster"
)

// galeraStore is a fakeStore behind a Galera cluster as mysqlstore checks it: every Allocate
// reads the member's state and passes it to the History (mysqlcluster.Retry runs it again on
// ErrGeneration); the first allocation under a new generation moves every row up by jump,
// as the store's fence does for another database.
type galeraStore struct {
	*fakeStore
	hist *mysqlcluster.History

	smu     sync.Mutex
	state   mysqlcluster.State
	fenced  int64 // the generation the rows were moved up for
	jump    int64
	changes int // OnDatabaseChange functions registered
}

func (s *galeraStore) OnDatabaseChange(f func()) {
	s.smu.Lock()
	s.changes++
	s.smu.Unlock()
	s.hist.OnGeneration(f)
}

func (s *galeraStore) Confirm(context.Context) (mysqlcluster.State, error) {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.state, nil
}

func (s *galeraStore) Begin(_ context.Context, _ string, gen, _ int64) error {
	s.smu.Lock()
	defer s.smu.Unlock()
	s.state.Gen = max(s.state.Gen, gen)
	return nil
}

func (s *galeraStore) set(seqno, gen int64) {
	s.smu.Lock()
	defer s.smu.Unlock()
	s.state.Seqno, s.state.Gen = seqno, gen
}

func (s *galeraStore) Allocate(ctx context.Context, tag string, step int64) (Alloc, error) {
	var a Alloc
	err := mysqlcluster.Retry(ctx, nil, func(ctx context.Context) error {
		st, _ := s.Confirm(ctx)
		if err := s.hist.Check(ctx, s, st); err != nil {
			return err
		}
		s.smu.Lock()
		if st.Gen > s.fenced {
			s.fenced = st.Gen
			s.fakeStore.mu.Lock()
			for _, r := range s.fakeStore.rows {
				r.maxID += s.jump
			}
			s.fakeStore.mu.Unlock()
		}
		s.smu.Unlock()
		var err error
		a, err = s.fakeStore.Allocate(ctx, tag, step)
		return err
	})
	if err == nil {
		s.smu.Lock()
		s.state.Seqno++ // the commit
		s.smu.Unlock()
	}
	return a, err
}

// TestDatabaseChangeDropsHeldSegments: once the process learns of a new generation of the
// Galera cluster (begun by this process, or recorded by another instance), no ID of a segment
// leased before is issued: the next request of a held tag loads a range of the new database.
func TestDatabaseChangeDropsHeldSegments(t *testing.T) {
	const jump = 1_000_000
	for _, tc := range []struct {
		name    string
		restart func(s *galeraStore)
	}{
		// The cluster continues from a member that lacked commits: this process begins the
		// generation at its next allocation.
		{"begun", func(s *galeraStore) { s.set(1, 0) }},
		// Another instance began it: this process reads the recorded generation.
		{"recorded elsewhere", func(s *galeraStore) { s.set(2, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hist, err := mysqlcluster.OpenHistory("", nil)
			if err != nil {
				t.Fatal(err)
			}
			st := &galeraStore{fakeStore: newFakeStore(map[string]int64{"a": 100, "b": 100}), hist: hist, jump: jump}
			st.state = mysqlcluster.State{UUID: "6b4c52e4-8f5d-11ef-9a0b-0242ac120002", Seqno: 50, Local: mysqlcluster.Synced}
			cfg := testConfig(newFakeClock())
			cfg.NoWarmStart = true
			g := newTestGen(t, cfg, st, newFakeMarks())
			if st.changes != 1 {
				t.Fatalf("New registered %d database-change functions, want 1", st.changes)
			}
			if v := mustNext(t, g, "a"); v != 1 {
				t.Fatalf("first ID %d, want 1", v)
			}
			held := g.tags.load("a") // as a request that looked the tag up just before
			tc.restart(st)
			if v := mustNext(t, g, "b"); v < jump {
				t.Fatalf("b under the new generation: %d, want at least %d", v, jump)
			}
			if v, ts := held.take(); ts != notTaken {
				t.Fatalf("a request holding the dropped buffer took %d from a segment leased before", v)
			}
			if v := mustNext(t, g, "a"); v < jump {
				t.Fatalf("a issued %d after the new generation was learned: a segment leased before, want at least %d", v, jump)
			}
		})
	}
}
