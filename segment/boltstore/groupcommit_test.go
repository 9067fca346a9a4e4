package boltstore

import (
	"context"
	"errors"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/leafd/leafd/segment"
)

func openGroupBolt(t *testing.T) *BoltStore {
	t.Helper()
	s, err := OpenBolt(filepath.Join(t.TempDir(), "leafd.db"), BoltOptions{})
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// holdBolt blocks s's committer inside a transaction until the returned release is called,
// after n more operations have queued behind it: those n then share the next transaction.
func holdBolt(t *testing.T, s *BoltStore) (queued func(n int), release func()) {
	t.Helper()
	in, out := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.update(context.Background(), func(*bolt.Tx) error {
			close(in)
			<-out
			return nil
		})
	}()
	<-in
	var once sync.Once
	release = func() { once.Do(func() { close(out) }) }
	t.Cleanup(release)
	queued = func(n int) {
		waitFor(t, "the operations queued behind the held transaction", func() bool {
			s.group.mu.Lock()
			defer s.group.mu.Unlock()
			return len(s.group.queue) == n
		})
	}
	return queued, release
}

// TestBoltGroupSameTagOnce: ten concurrent first loads of one new tag in one transaction
// create it once and lease ten distinct ranges.
func TestBoltGroupSameTagOnce(t *testing.T) {
	s := openGroupBolt(t)
	queued, release := holdBolt(t, s)
	c0, _ := s.group.stats()
	const n = 10
	type res struct {
		a       segment.Alloc
		created bool
		err     error
	}
	out := make(chan res, n)
	for range n {
		go func() {
			a, created, err := s.CreateAllocate(context.Background(), segment.Tag{Name: "same", MaxID: 1, Step: 100}, 0, 0)
			out <- res{a, created, err}
		}()
	}
	queued(n)
	release()
	created := 0
	var ends []int64
	for range n {
		r := <-out
		if r.err != nil {
			t.Fatalf("CreateAllocate: %v", r.err)
		}
		if r.created {
			created++
		}
		ends = append(ends, r.a.MaxID)
	}
	if created != 1 {
		t.Errorf("created %d times, want once", created)
	}
	sort.Slice(ends, func(i, j int) bool { return ends[i] < ends[j] })
	for i, e := range ends {
		if want := int64(1 + 100*(i+1)); e != want {
			t.Fatalf("range ends %v, want 101, 201, ... (ten distinct ranges)", ends)
		}
	}
	if c1, _ := s.group.stats(); c1-c0 != 2 { // the held one and the ten together
		t.Errorf("%d commits, want 2 (the held transaction and one for the ten)", c1-c0)
	}
}

// TestBoltGroupOneBadOp: operations refused in a shared transaction (a shaped name, an
// existing tag, an unknown one) get their own error; the others of the batch commit.
func TestBoltGroupOneBadOp(t *testing.T) {
	s := openGroupBolt(t)
	ctx := context.Background()
	if err := s.CreateShape(ctx, "shaped", []byte(`{"format":"x"}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, segment.Tag{Name: "old", MaxID: 1, Step: 10}); err != nil {
		t.Fatal(err)
	}
	queued, release := holdBolt(t, s)
	var wg sync.WaitGroup
	errs := make(map[string]error)
	var mu sync.Mutex
	run := func(name string, f func() error) {
		wg.Go(func() {
			err := f()
			mu.Lock()
			errs[name] = err
			mu.Unlock()
		})
	}
	for _, name := range []string{"a", "b", "shaped"} {
		run("ca:"+name, func() error {
			_, _, err := s.CreateAllocate(ctx, segment.Tag{Name: name, MaxID: 1, Step: 10}, 0, 0)
			return err
		})
	}
	run("create:old", func() error { return s.Create(ctx, segment.Tag{Name: "old", MaxID: 1, Step: 10}) })
	run("alloc:unknown", func() error { _, err := s.Allocate(ctx, "unknown", 0); return err })
	run("create:c", func() error { return s.Create(ctx, segment.Tag{Name: "c", MaxID: 5, Step: 10}) })
	queued(6)
	c0, _ := s.group.stats()
	release()
	wg.Wait()
	for name, want := range map[string]error{
		"ca:a": nil, "ca:b": nil, "create:c": nil,
		"ca:shaped": segment.ErrShaped, "create:old": segment.ErrTagExists, "alloc:unknown": segment.ErrUnknownTag,
	} {
		if got := errs[name]; (want == nil) != (got == nil) || want != nil && !errors.Is(got, want) {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	if c1, _ := s.group.stats(); c1-c0 != 2 {
		t.Errorf("%d commits, want 2 (the held one, then the six together)", c1-c0)
	}
	rows, err := s.Rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range rows {
		got[r.Name] = r.MaxID
	}
	want := map[string]int64{"a": 11, "b": 11, "c": 5, "old": 1}
	if len(got) != len(want) {
		t.Errorf("rows %v, want %v (no row for the shaped name)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("row %s: max_id %d, want %d", k, got[k], v)
		}
	}
}
