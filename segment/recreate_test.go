package segment

import (
	"testing"
)

// A tag retired and deleted from the store, then re-created by auto-create on its next
// request, starts at this instance's mark: it serves (no REGRESSION) and never reissues.
func TestAutoCreateAfterRetireStartsAtMark(t *testing.T) {
	fs := newFakeStore(nil)
	cfg := testConfig(newFakeClock())
	cfg.AutoCreate = true
	g := newTestGen(t, cfg, fs, newFakeMarks())
	var last int64
	for range 5 {
		last = mustNext(t, g, "a")
	}
	if !g.Retire("a") {
		t.Fatal("Retire(a): not held")
	}
	fs.set(func(s *fakeStore) { delete(s.rows, "a") })
	v, err := g.Next("a")
	if err != nil || v <= last {
		t.Fatalf("INCR a after retire, delete and auto-create: got %d, %v; want above %d", v, err, last)
	}
}
