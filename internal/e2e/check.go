package e2e

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// CheckOrder fails the test for every connection that saw a number not above its previous.
func CheckOrder(t testing.TB, loads []*ConnLoad) {
	t.Helper()
	for _, cl := range loads {
		if cl.Order != "" {
			t.Error(cl.Order)
		}
	}
}

// InstID is an ID with the instance that handed it out.
type InstID struct {
	ID   int64
	Inst int
}

// CheckUnique fails the test when an ID was handed out twice (by any instance, in any of the
// loads) and returns all IDs sorted.
func CheckUnique(t testing.TB, loads ...[]*ConnLoad) []InstID {
	t.Helper()
	var all []InstID
	for _, ls := range loads {
		for _, cl := range ls {
			for _, v := range cl.IDs {
				all = append(all, InstID{v, cl.Inst})
			}
		}
	}
	slices.SortFunc(all, func(a, b InstID) int {
		if c := cmp.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return a.Inst - b.Inst
	})
	dups := 0
	for i := 1; i < len(all); i++ {
		if all[i].ID == all[i-1].ID {
			if dups < 10 {
				t.Errorf("ID %d handed out twice (by instances %d and %d), want every ID once", all[i].ID, all[i-1].Inst, all[i].Inst)
			}
			dups++
		}
	}
	if dups > 0 {
		t.Errorf("got %d duplicate IDs among %d, want 0", dups, len(all))
	}
	return all
}

// CheckCodes fails the test for transport errors and for error replies whose code is not
// one of allowed.
func CheckCodes(t testing.TB, what string, tt Totals, allowed ...string) {
	t.Helper()
	for code, n := range tt.Codes {
		if !slices.Contains(allowed, code) {
			t.Errorf("%s: got %d %s replies, want only %v", what, n, code, allowed)
		}
	}
	if tt.NetErrs > 0 {
		t.Errorf("%s: got %d transport errors (last: %v), want coded replies only", what, tt.NetErrs, tt.LastNet)
	}
}

// IDSet records IDs from many goroutines and counts duplicates.
type IDSet struct {
	mu   sync.Mutex
	seen map[int64]string
	dups []string
}

// NewIDSet returns an empty set.
func NewIDSet() *IDSet { return &IDSet{seen: map[int64]string{}} }

// Add records ids as handed out by who.
func (s *IDSet) Add(who string, ids ...int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if prev, ok := s.seen[id]; ok {
			s.dups = append(s.dups, fmt.Sprintf("%d from %s and %s", id, prev, who))
			continue
		}
		s.seen[id] = who
	}
}

// Len is the number of distinct IDs.
func (s *IDSet) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// Check fails the test for duplicates and when fewer than atLeast distinct IDs were seen
// (the test did not exercise the server).
func (s *IDSet) Check(t testing.TB, atLeast int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.dups) > 0 {
		t.Errorf("%d duplicate IDs, e.g. %v", len(s.dups), s.dups[:min(len(s.dups), 5)])
	}
	if len(s.seen) < atLeast {
		t.Errorf("only %d distinct IDs issued, want at least %d: the test did not exercise the server", len(s.seen), atLeast)
	}
}
